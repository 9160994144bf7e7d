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
