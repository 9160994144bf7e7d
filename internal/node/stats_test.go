package node

import (
	"context"
	"testing"
	"time"
)

// TestTopicStatsFollowEveryChange reads a shard's counters between changes:
// counters kept from an earlier read must never be served once the shard
// has applied something since.
func TestTopicStatsFollowEveryChange(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "1"})
	ctx := context.Background()
	events := func() int64 {
		t.Helper()
		st, err := n.TopicStats(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		return st.Total.Stats.Events
	}
	if got := events(); got != 0 {
		t.Fatalf("a new topic holds %d events", got)
	}
	for i := range 3 {
		publish(t, n, "t", ev("k", "x"))
		if got, want := events(), int64(i+1); got != want {
			t.Fatalf("after publish %d: %d events, want %d", i+1, got, want)
		}
		if got := events(); got != int64(i+1) { // a second read, served from the kept counters
			t.Fatalf("read again after publish %d: %d events", i+1, got)
		}
	}
	d := fetch(t, n, "t", 1, time.Minute)
	if _, err := n.Ack(ctx, []string{d[0].ID}); err != nil {
		t.Fatal(err)
	}
	if got := events(); got != 2 {
		t.Fatalf("after an ack: %d events, want 2", got)
	}
}

// TestSubscriptionStatsFollowEveryChange is TestTopicStatsFollowEveryChange
// for the counters of each subscription, which are kept apart: a read of
// one subscription must not serve another's, nor counters older than the
// shard's last change.
func TestSubscriptionStatsFollowEveryChange(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "1"})
	ctx := context.Background()
	if _, err := n.CreateSubscription(ctx, "t", "audit", nil); err != nil {
		t.Fatal(err)
	}
	// events returns what each of default and audit holds, read twice:
	// the second read is served from the kept counters.
	events := func() (def, audit int64) {
		t.Helper()
		subs, err := n.ListSubscriptions(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		var first []TopicStats
		for range 2 {
			var all []TopicStats
			waitUntil(t, "the shard has started audit", func() bool {
				all, err = n.SubscriptionsStats(ctx, "t", subs)
				return err == nil && all[1].Total.Err == nil
			})
			if first != nil && (all[0].Total.Stats != first[0].Total.Stats || all[1].Total.Stats != first[1].Total.Stats) {
				t.Fatalf("read again: %+v, then %+v", first, all)
			}
			first = all
		}
		one, err := n.SubscriptionStats(ctx, "t", "audit")
		if err != nil {
			t.Fatal(err)
		}
		if one.Total.Stats != first[1].Total.Stats {
			t.Fatalf("audit read alone: %+v; read with default: %+v", one.Total.Stats, first[1].Total.Stats)
		}
		return first[0].Total.Stats.Events, first[1].Total.Stats.Events
	}
	if def, audit := events(); def != 0 || audit != 0 {
		t.Fatalf("a new topic: default holds %d events, audit %d", def, audit)
	}
	for i := range 3 {
		publish(t, n, "t", ev("k", "x"))
		if def, audit := events(); def != int64(i+1) || audit != int64(i+1) {
			t.Fatalf("after publish %d: default holds %d events, audit %d; want %d each", i+1, def, audit, i+1)
		}
	}
	d := fetch(t, n, "t", 1, time.Minute)
	if _, err := n.Ack(ctx, []string{d[0].ID}); err != nil {
		t.Fatal(err)
	}
	if def, audit := events(); def != 2 || audit != 3 {
		t.Fatalf("after default's ack: default holds %d events, audit %d; want 2 and 3", def, audit)
	}
}
