package node

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"herald/internal/host"
	"herald/internal/shard"
	"herald/internal/topic"
)

// trimAt runs the node's retention trim once, as if at now.
func trimAt(n *Node, now time.Time) {
	r := &retentionTrim{retaining: n.retaining, log: quietLog(), now: func() time.Time { return now },
		shards: groupReservations{registry: n.reg, relay: n.relay, host: n.host, propose: n.proposeShard}}
	r.check()
}

// retaining reports, for each shard of a topic, whether it retains.
func retaining(t *testing.T, n *Node, topicName string) []bool {
	t.Helper()
	tr, err := n.reg.lookup(topicName)
	if err != nil {
		t.Fatal(err)
	}
	var out []bool
	for _, s := range tr.shards {
		err := n.host.View(context.Background(), s.group, func(sm host.StateMachine, _ uint64) {
			out = append(out, machineOf(sm).Retaining())
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// ackAll fetches and acknowledges everything pending in a subscription,
// and returns the ids fetched.
func ackAll(t *testing.T, n *Node, topicName, sub string) []string {
	t.Helper()
	ds := fetchFrom(t, n, topicName, sub, time.Minute)
	if len(ds) > 0 {
		if _, err := n.AckSubscription(context.Background(), sub, receipts(ds)); err != nil {
			t.Fatal(err)
		}
	}
	return sortedIDs(ds)
}

// A topic with retention keeps what its only subscription acknowledged,
// and a seek to the earliest event, to a time or to an event delivers it
// again; the trim frees what is older than the retention, and retention 0
// stops retaining.
func TestSeekSubscription(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "orders", map[string]string{"shards": "2", "retention": "3600"})
	if err := n.DeleteSubscription(ctx, "orders", topic.DefaultSubscriptionName); err != nil {
		t.Fatal(err)
	}
	pullSubscription(t, n, "orders", "billing")
	// A topic created with retention retains at once.
	if got := retaining(t, n, "orders"); slices.Contains(got, false) {
		t.Fatalf("shards retain %v, want all", got)
	}

	before := time.Now()
	ids := publish(t, n, "orders", ev("a", "1"), ev("b", "2"), ev("c", "3"), ev("d", "4"))
	slices.Sort(ids)
	if got := ackAll(t, n, "orders", "billing"); !slices.Equal(got, ids) {
		t.Fatalf("billing fetched %v, want %v", got, ids)
	}
	if got := ackAll(t, n, "orders", "billing"); len(got) != 0 {
		t.Fatalf("billing fetched %v after acking everything", got)
	}

	seek := func(to SeekTarget, want int) {
		t.Helper()
		res, err := n.SeekSubscription(ctx, "orders", "billing", to)
		if err != nil || res.Replayed != want {
			t.Fatalf("seek to %+v = %+v, %v; want %d replayed", to, res, err, want)
		}
	}
	seek(SeekTarget{Earliest: true}, 4)
	if got := ackAll(t, n, "orders", "billing"); !slices.Equal(got, ids) {
		t.Fatalf("after a seek to the earliest billing fetched %v, want %v", got, ids)
	}
	seek(SeekTarget{Time: time.Now().Add(time.Hour)}, 0)
	seek(SeekTarget{Time: before}, 4)
	ackAll(t, n, "orders", "billing")

	// To an event: from it on, on its shard; from its publish time on the
	// others, where every event of the same publish is.
	seek(SeekTarget{EventID: ids[3]}, 4-mustOffsetRank(t, ids, ids[3]))
	ackAll(t, n, "orders", "billing")

	// Nothing older than the retention is kept.
	trimAt(n, time.Now().Add(2*time.Hour))
	seek(SeekTarget{Earliest: true}, 0)

	// Retention 0 stops retaining, at once; retention again starts it.
	if _, err := n.SetTopicAttributes(ctx, "orders", map[string]string{"retention": "0"}); err != nil {
		t.Fatal(err)
	}
	if got := retaining(t, n, "orders"); slices.Contains(got, true) {
		t.Fatalf("shards retain %v with retention 0", got)
	}
	if _, err := n.SetTopicAttributes(ctx, "orders", map[string]string{"retention": "60"}); err != nil {
		t.Fatal(err)
	}
	if got := retaining(t, n, "orders"); slices.Contains(got, false) {
		t.Fatalf("shards retain %v with retention 60, want all", got)
	}
}

// A topic whose retention was set while its shard did not take it gets
// it from the trim: a shard that retains without retention is told to
// stop, one that should retain starts.
func TestRetentionTrimCatchesUp(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "orders", map[string]string{"shards": "2"})
	tr, err := n.reg.lookup("orders")
	if err != nil {
		t.Fatal(err)
	}
	// As if the topic's retention had been set to 0 while shard 0 was
	// away: it retains, without retention.
	if _, err := n.proposeShard(ctx, tr.shards[0], &shard.Command{Op: shard.OpRetain}); err != nil {
		t.Fatal(err)
	}
	if got := retaining(t, n, "orders"); !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("shards retain %v, want shard 0 alone", got)
	}
	trimAt(n, time.Now())
	if got := retaining(t, n, "orders"); slices.Contains(got, true) {
		t.Fatalf("after a trim with retention 0 shards retain %v", got)
	}
	// And the other way round: retention set, no shard retaining.
	if _, err := n.SetTopicAttributes(ctx, "orders", map[string]string{"retention": "60"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range tr.shards {
		if _, err := n.proposeShard(ctx, s, &shard.Command{Op: shard.OpRetain, OlderThan: shard.RetainNone}); err != nil {
			t.Fatal(err)
		}
	}
	trimAt(n, time.Now())
	if got := retaining(t, n, "orders"); slices.Contains(got, false) {
		t.Fatalf("after a trim with retention 60 shards retain %v, want all", got)
	}
}

// mustOffsetRank returns how many events of ids, all of one publish, are
// before id on its shard: a seek to id on its shard skips those.
func mustOffsetRank(t *testing.T, ids []string, id string) int {
	t.Helper()
	_, idx, offset, err := topic.ParseEventID(id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, other := range ids {
		_, i, o, _ := topic.ParseEventID(other)
		if i == idx && o < offset {
			n++
		}
	}
	return n
}

func TestSeekSubscriptionErrors(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "orders", map[string]string{"shards": "2"})
	mustCreate(t, n, "other", map[string]string{"shards": "1"})
	pullSubscription(t, n, "orders", "billing")
	for _, tc := range []struct {
		topic, sub string
		to         SeekTarget
		want       error
	}{
		{"orders", "billing", SeekTarget{}, topic.ErrInvalid},
		{"orders", "billing", SeekTarget{Earliest: true, Time: time.Now()}, topic.ErrInvalid},
		{"orders", "billing", SeekTarget{EventID: "other/0/0"}, topic.ErrInvalid},
		{"orders", "billing", SeekTarget{EventID: "orders/7/0"}, topic.ErrInvalid},
		{"orders", "billing", SeekTarget{EventID: "nonsense"}, topic.ErrInvalid},
		{"orders", "nobody", SeekTarget{Earliest: true}, ErrNotFound},
		{"gone", "billing", SeekTarget{Earliest: true}, ErrNotFound},
	} {
		if _, err := n.SeekSubscription(ctx, tc.topic, tc.sub, tc.to); !errors.Is(err, tc.want) {
			t.Errorf("seek %s/%s to %+v: %v, want %v", tc.topic, tc.sub, tc.to, err, tc.want)
		}
	}
	// Without retention a seek still takes what some subscription holds:
	// the default one has every event pending.
	ids := publish(t, n, "orders", ev("a", "1"), ev("b", "2"))
	ackAll(t, n, "orders", "billing")
	if res, err := n.SeekSubscription(ctx, "orders", "billing", SeekTarget{Earliest: true}); err != nil || res.Replayed != len(ids) {
		t.Fatalf("seek without retention = %+v, %v; want %d replayed", res, err, len(ids))
	}
}

// A push subscription's dispatchers notice a seek: what they delivered
// from the point on is delivered again, in order per key.
func TestSeekPushSubscription(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "orders", map[string]string{"shards": "2", "retention": "3600"})
	if err := n.DeleteSubscription(ctx, "orders", topic.DefaultSubscriptionName); err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t)
	if _, err := n.CreateSubscription(ctx, "orders", "hook", map[string]string{"push_endpoint": rcv.URL}); err != nil {
		t.Fatal(err)
	}
	trimAt(n, time.Now())
	keys := []string{"a", "b", "c"}
	const perKey = 5
	for i := range perKey {
		for _, k := range keys {
			publish(t, n, "orders", typed(k, "paid", i))
		}
	}
	waitUntil(t, "every event is delivered and recorded", func() bool {
		st, err := n.SubscriptionStats(ctx, "orders", "hook")
		return err == nil && st.Total.Stats.Events == 0 && len(rcv.got("c")) == perKey
	})
	res, err := n.SeekSubscription(ctx, "orders", "hook", SeekTarget{Earliest: true})
	if err != nil || res.Replayed != perKey*len(keys) {
		t.Fatalf("seek = %+v, %v; want %d replayed", res, err, perKey*len(keys))
	}
	waitUntil(t, "every event is delivered again", func() bool {
		for _, k := range keys {
			if len(rcv.got(k)) != 2*perKey {
				return false
			}
		}
		return true
	})
	for _, k := range keys {
		if got, want := rcv.got(k), append(counting(perKey, -1), counting(perKey, -1)...); !slices.Equal(got, want) {
			t.Errorf("key %s got %v, want %v", k, got, want)
		}
	}
}
