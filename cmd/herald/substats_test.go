package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/client"
	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
)

// subscriptionsWithStats are a failing, paused push subscription whose
// second shard is led elsewhere, a healthy one, and a pull one with a
// shard that could not count.
func subscriptionsWithStats(now time.Time) []*client.Subscription {
	failing := &client.DeliveryHealth{LastError: "HTTP 503:\nbusy", LastErrorTime: now.Add(-5 * time.Second),
		ConsecutiveFailures: 3, FailingSince: now.Add(-2 * time.Minute), LastSuccess: now.Add(-3 * time.Minute),
		PausedUntil: now.Add(30 * time.Second)}
	return []*client.Subscription{
		{Name: "billing", ID: 1, Attributes: map[string]string{"push_endpoint": "https://b/hook", "filter_policy": `{"type": ["paid"]}`},
			Stats: &client.ShardStats{Name: "orders", Events: 12, Bytes: 340, OldestEventTime: now.Add(-63 * time.Second),
				Delivered: 100, Skipped: 5, Retried: 3, DeadLetters: 2, DeadLettered: 4, Delivery: failing},
			ShardStats: []client.ShardStats{
				{Shard: 0, Name: "orders", Events: 12, OldestEventTime: now.Add(-63 * time.Second), Delivered: 100, Skipped: 5, Retried: 3, DeadLetters: 2, Delivery: failing},
				{Shard: 1, Name: "orders.1"},
			}},
		{Name: "audit", ID: 2, Attributes: map[string]string{"push_endpoint": "nats://n"},
			Stats: &client.ShardStats{Delivered: 7, Delivery: &client.DeliveryHealth{LastSuccess: now.Add(-time.Second)}}},
		{Name: "pull", ID: 3, Disabled: true, Attributes: map[string]string{},
			Stats: &client.ShardStats{Events: 1, Error: "shard orders.1: not started yet"}},
		{Name: "moving", ID: 4, Disabled: true, Attributes: map[string]string{"push_endpoint": "kafka://k/t"},
			Stats: &client.ShardStats{Events: 2, OldestEventTime: now.Add(-time.Hour)}},
	}
}

// subscription list: lag, oldest, delivered, dead letters and health per
// subscription, before the wide push endpoint and filter.
func TestPrintSubscriptionsWithStats(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	if err := printSubscriptionsText(&b, subscriptionsWithStats(now), now); err != nil {
		t.Fatal(err)
	}
	want := `NAME     ID  STATE     LAG  OLDEST  DELIVERED  DEAD  HEALTH       PUSH ENDPOINT   FILTER
billing  1   enabled   12   1m3s    100        2     failing (3)  https://b/hook  {"type": ["paid"]}
audit    2   enabled   0    -       7          0     ok           nats://n        -
pull     3   disabled  ?    -       0          0     -            -               -
moving   4   disabled  2    1h0m0s  0          0     -            kafka://k/t     -
`
	if b.String() != want {
		t.Errorf("printSubscriptionsText:\n%s\nwant:\n%s", b.String(), want)
	}
}

// subscription get: the lag, the counters and the health in words, then
// the attributes and the counters per shard.
func TestPrintSubscriptionWithStats(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	subs := subscriptionsWithStats(now)
	var b strings.Builder
	if err := printSubscriptionText(&b, subs[0], now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Lag:           12 events (340 bytes), the oldest published 1m3s ago\n",
		"Delivered:     100\n",
		"Skipped:       5 (rejected by the filter)\n",
		"Retried:       3 (failed attempts)\n",
		"Dead letters:  2 held, 4 in all\n",
		"Health:        failing: 3 failed attempts since the last success, for 2m0s; paused for 30s more, as the endpoint asked (Retry-After); " +
			"last success 3m0s ago; last error 5s ago: HTTP 503: busy (shards led by other nodes not included)\n",
		"Shards:\nSHARD  NAME      LAG  OLDEST  DELIVERED  SKIPPED  RETRIED  DEAD  ERROR  FAILING  LAST OK   LAST PUSH ERROR\n",
		"1      orders.1  0    -       0          0        0        0     -      ?        ?         ? (ask the shard's leader)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("printSubscriptionText lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := printSubscriptionText(&b, subs[2], now); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "Lag:           1 event (0 bytes); incomplete: shard orders.1: not started yet\n") ||
		!strings.Contains(out, "Health:        - (pull: consumers fetch its events)\n") {
		t.Errorf("a pull subscription with a shard that could not count:\n%s", out)
	}
}

// get and list ask for the statistics; -o json writes them as the API's
// Subscription does.
func TestSubscriptionStatsAsked(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	sub := &heraldv1.Subscription{Topic: "orders", Name: "billing", Id: 3, Attributes: map[string]string{"push_endpoint": "https://b/hook"},
		CreatedAt: timestamppb.New(eventTime), UpdatedAt: timestamppb.New(eventTime),
		Stats: &heraldv1.ShardStats{Name: "orders", Events: 4, Delivered: 9, Skipped: 2,
			Delivery: &heraldv1.DeliveryHealth{ConsecutiveFailures: 1, FailingSince: timestamppb.New(eventTime)}},
		ShardStats: []*heraldv1.ShardStats{{Name: "orders", Events: 4, Delivered: 9, Skipped: 2}}}
	f.PutSubscription(sub)

	var got heraldv1.Subscription
	if err := protojson.Unmarshal([]byte(cli(t, url, "", "subscription", "get", "orders", "billing", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, sub) {
		t.Errorf("subscription get -o json = %v, want %v", &got, sub)
	}
	if gets := fakeherald.Received[*heraldv1.GetSubscriptionRequest](f); len(gets) != 1 || !gets[0].GetWithStats() {
		t.Errorf("subscription get sent %v, want with_stats", gets)
	}
	out := cli(t, url, "", "subscription", "list", "orders")
	if lines := strings.Split(out, "\n"); len(lines) < 2 || !strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "billing 3 enabled 4 - 9 0 failing (1) https://b/hook") {
		t.Errorf("subscription list:\n%s", out)
	}
	if lists := fakeherald.Received[*heraldv1.ListSubscriptionsRequest](f); len(lists) != 1 || !lists[0].GetWithStats() {
		t.Errorf("subscription list sent %v, want with_stats", lists)
	}
}
