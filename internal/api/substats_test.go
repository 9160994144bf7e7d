package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"herald/internal/node"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// A subscription's statistics come only when asked for (with_stats), in
// TopicStats's shape: the total and each shard, as the subscription sees
// them.
func TestSubscriptionStats(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "orders", Attributes: map[string]string{"shards": "2"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "orders",
		Events: []*heraldv1.PublishEvent{{Key: "a", Payload: []byte("{}")}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSubscription(ctx, connect.NewRequest(&heraldv1.CreateSubscriptionRequest{Topic: "orders", Name: "audit"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "orders",
		Events: []*heraldv1.PublishEvent{{Key: "a", Payload: []byte("{}")}, {Key: "b", Payload: []byte("{}")}}})); err != nil {
		t.Fatal(err)
	}

	plain, err := c.ListSubscriptions(ctx, connect.NewRequest(&heraldv1.ListSubscriptionsRequest{Topic: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range plain.Msg.Subscriptions {
		if s.Stats != nil || s.ShardStats != nil {
			t.Errorf("%s has statistics unasked: %v", s.Name, s.Stats)
		}
	}

	// The new subscription holds what came after it; the default all.
	want := map[string]uint64{"default": 3, "audit": 2}
	var list *connect.Response[heraldv1.ListSubscriptionsResponse]
	deadline := time.Now().Add(20 * time.Second)
	for {
		list, err = c.ListSubscriptions(ctx, connect.NewRequest(&heraldv1.ListSubscriptionsRequest{Topic: "orders", WithStats: true}))
		// A shard that has not started the subscription yet says so.
		if err == nil && list.Msg.Subscriptions[1].GetStats().GetError() == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Msg.Subscriptions {
		if s.Stats.GetEvents() != want[s.Name] || len(s.ShardStats) != 2 || s.Stats.GetError() != "" {
			t.Errorf("%s: stats %v, %d shards; want %d events on 2 shards", s.Name, s.Stats, len(s.ShardStats), want[s.Name])
		}
		if got := s.ShardStats[0].GetEvents() + s.ShardStats[1].GetEvents(); got != want[s.Name] {
			t.Errorf("%s: its shards hold %d events, want %d", s.Name, got, want[s.Name])
		}
	}

	got, err := c.GetSubscription(ctx, connect.NewRequest(&heraldv1.GetSubscriptionRequest{Topic: "orders", Name: "audit", WithStats: true}))
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Msg.Subscription; s.Stats.GetEvents() != 2 || s.Stats.GetOldestEventTime() == nil || len(s.ShardStats) != 2 {
		t.Errorf("get with stats: %v", s)
	}
	if got, err := c.GetSubscription(ctx, connect.NewRequest(&heraldv1.GetSubscriptionRequest{Topic: "orders", Name: "audit"})); err != nil || got.Msg.Subscription.Stats != nil {
		t.Errorf("get without stats: %v, %v", got, err)
	}
}

// shardStatsProto carries the subscription's counters and health: skipped
// events, since when pushes fail, and a pause only while it lasts.
func TestShardStatsProtoHealth(t *testing.T) {
	now := time.Now()
	h := node.DeliveryHealth{ConsecutiveFailures: 2, FailingSince: now.Add(-time.Minute), PausedUntil: now.Add(time.Hour)}
	p := shardStatsProto(node.ShardStats{Shard: 1, Stats: node.QueueStats{Skipped: 7}, Delivery: &h})
	if p.Skipped != 7 || !p.Delivery.FailingSince.AsTime().Equal(h.FailingSince) || !p.Delivery.PausedUntil.AsTime().Equal(h.PausedUntil) {
		t.Errorf("shardStatsProto = %v", p)
	}
	h.PausedUntil = now.Add(-time.Second)
	if p := shardStatsProto(node.ShardStats{Delivery: &h}); p.Delivery.PausedUntil != nil {
		t.Errorf("a pause over shows as %v", p.Delivery.PausedUntil)
	}
}

// Reading a subscription's statistics takes any token, as TopicStats does.
func TestSubscriptionStatsTakeAnyToken(t *testing.T) {
	tt := makeTokens(t, time.Now())
	base, _ := startAuthServer(t, Options{Tokens: tt.store})
	create := heraldv1connect.HeraldServiceCreateTopicProcedure
	if status, body := callJSON(t, base, create, tt.secrets["admin"], `{"name":"orders","attributes":{"shards":"1"}}`); status != http.StatusOK {
		t.Fatalf("create: %d %s", status, body)
	}
	for _, tc := range []struct{ procedure, body string }{
		{heraldv1connect.HeraldServiceListSubscriptionsProcedure, `{"topic":"orders","withStats":true}`},
		{heraldv1connect.HeraldServiceGetSubscriptionProcedure, `{"topic":"orders","name":"default","withStats":true}`},
	} {
		for _, name := range []string{"publish", "consume"} {
			status, body := callJSON(t, base, tc.procedure, tt.secrets[name], tc.body)
			if status != http.StatusOK || !strings.Contains(body, `"stats":`) {
				t.Errorf("%s with a %s token: %d %s, want the statistics", procedureName(tc.procedure), name, status, body)
			}
		}
	}
}
