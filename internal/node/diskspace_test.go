package node

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestDiskAlarm checks that a node short of disk space refuses new events
// (publish, reserve, commit) as overloaded, saying why and what to do,
// while fetch, ack and topic deletion go on; and that it takes events
// again by itself once space returns.
func TestDiskAlarm(t *testing.T) {
	var free atomic.Uint64
	free.Store(1 << 30)
	cfg := testConfig(t.TempDir())
	cfg.DiskFreeLimit = 100 << 20
	cfg.DiskFree = func(string) (uint64, error) { return free.Load(), nil }
	n := openNode(t, cfg)
	ctx := context.Background()
	mustCreate(t, n, "orders", map[string]string{"shards": "2"})
	mustCreate(t, n, "old", map[string]string{"shards": "1"})
	before := publish(t, n, "orders", ev("a", "1"), ev("b", "2"))
	r, err := n.Reserve(ctx, "orders", "a", 100, 1)
	if err != nil {
		t.Fatal(err)
	}

	free.Store(99 << 20)
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrOverloaded) || !strings.Contains(err.Error(), "--disk-free-limit") || !strings.Contains(err.Error(), "99.0 MiB free") {
			t.Fatalf("%s short of disk space: %v, want overloaded naming the free space and --disk-free-limit", what, err)
		}
	}
	waitFor(t, func() bool {
		_, err := n.Publish(ctx, "orders", []Event{ev("a", "3")})
		return err != nil
	})
	_, err = n.Publish(ctx, "orders", []Event{ev("a", "3")})
	refused("publish", err)
	_, err = n.Reserve(ctx, "orders", "a", 100, 1)
	refused("reserve", err)
	_, err = n.Commit(ctx, r.ID, []Event{ev("a", "3")})
	refused("commit", err)

	// What frees space goes on.
	// (The publishes that went in before the alarm was noticed come
	// too: a fetch leases a run of a key's events.)
	ds := fetch(t, n, "orders", 100, time.Minute)
	fetched := map[string]bool{}
	for _, d := range ds {
		fetched[d.ID] = true
	}
	for _, id := range before {
		if !fetched[id] {
			t.Fatalf("fetched %v short of disk space, want %v among them", sortedIDs(ds), before)
		}
	}
	var receipts []string
	for _, d := range ds {
		receipts = append(receipts, d.Receipt)
	}
	if _, err := n.Ack(ctx, receipts); err != nil {
		t.Fatalf("ack short of disk space: %v", err)
	}
	if err := n.DeleteTopic(ctx, "old"); err != nil {
		t.Fatalf("delete a topic short of disk space: %v", err)
	}

	free.Store(100 << 20)
	waitFor(t, func() bool {
		_, err := n.Publish(ctx, "orders", []Event{ev("a", "4")})
		return err == nil
	})
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
