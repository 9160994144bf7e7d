package consume

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// byKey groups leases by their events' keys, in the order handed out.
func byKey(ls []Lease) map[string][]uint64 {
	out := make(map[string][]uint64)
	for _, l := range ls {
		out[l.Event.Key] = append(out[l.Event.Key], l.Offset)
	}
	return out
}

// publishRoundRobin publishes n events of each of keys, one of each in
// turn: key i's j-th event is at offset j*len(keys)+i.
func publishRoundRobin(t *testing.T, g *fakeGroup, keys []string, n int) {
	t.Helper()
	var all []string
	for range n {
		all = append(all, keys...)
	}
	g.publish(t, all...)
}

// ackLeases acknowledges leases by their receipts, as the node does.
func ackLeases(t *testing.T, s Shard, g *fakeGroup, ls ...Lease) {
	t.Helper()
	var offs, nums []uint64
	for _, l := range ls {
		offs, nums = append(offs, l.Offset), append(nums, l.Number)
	}
	held, _, lapsed := s.Leases.HoldForAck(s.Sub, offs, nums, time.Now())
	if len(lapsed) != 0 {
		t.Fatalf("ack of %v: %d receipts lapsed", offs, len(lapsed))
	}
	g.ackIn(t, s.Sub, held...)
}

// A fetch of more events than there are keys leases runs of each key's
// events, in offset order, all under one expiry.
func TestFetchLeasesRunsInOrder(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	publishRoundRobin(t, g, []string{"a", "b"}, 5)

	got, err := s.Fetch(ctx, 10, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(offsets(got), []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("fetch of 10 leased %v, want 0 to 9 in order", offsets(got))
	}
	if k := byKey(got); !slices.Equal(k["a"], []uint64{0, 2, 4, 6, 8}) || !slices.Equal(k["b"], []uint64{1, 3, 5, 7, 9}) {
		t.Errorf("runs by key = %v", k)
	}
	tb := s.table()
	tb.mu.Lock()
	for _, l := range got {
		if u := tb.events[l.Offset].until; u != tb.events[0].until {
			t.Errorf("event %d leased until %v, event 0 until %v: a fetch's runs share one expiry", l.Offset, u, tb.events[0].until)
		}
	}
	tb.mu.Unlock()
	checkLeased(t, s, 10)
	checkIndex(t, s, g)
}

// A key a fetch holds is held whole: another fetch gets none of its later
// events, until the run is acknowledged.
func TestFetchDoesNotShareAHeldKey(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.publish(t, "a", "a", "a", "a", "a")
	first, err := s.Fetch(ctx, 3, time.Hour)
	if err != nil || !slices.Equal(offsets(first), []uint64{0, 1, 2}) {
		t.Fatalf("first fetch of 3 = %v, %v; want 0, 1, 2", offsets(first), err)
	}
	g.publish(t, "b")
	second, err := s.Fetch(ctx, 10, time.Hour)
	if err != nil || !slices.Equal(offsets(second), []uint64{5}) {
		t.Fatalf("second fetch = %v, %v; want b's 5 alone (a is held by the first)", offsets(second), err)
	}
	ackLeases(t, s, g, first[:2]...)
	if got, _ := s.Fetch(ctx, 10, time.Hour); len(got) != 0 {
		t.Fatalf("with 2 of a's run out, a fetch leased %v", offsets(got))
	}
	ackLeases(t, s, g, first[2])
	if got, _ := s.Fetch(ctx, 10, time.Hour); !slices.Equal(offsets(got), []uint64{3, 4}) {
		t.Fatalf("once a's run is acknowledged, a fetch leased %v, want 3, 4", offsets(got))
	}
	checkIndex(t, s, g)
}

// A nack of the 2nd event of a run of 5 ends the leases of the 2nd to
// the 5th; once the 1st is acknowledged they go out again together, in
// order. A nack by a receipt of the old run touches none of the new one.
func TestNackEndsTheRestOfARun(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.publish(t, "a", "a", "a", "a", "a")
	run, err := s.Fetch(ctx, 5, time.Hour)
	if err != nil || len(run) != 5 {
		t.Fatalf("fetch = %v, %v; want a's 5 events", offsets(run), err)
	}
	s.Leases.Nack(0, []uint64{1}, []uint64{run[1].Number})
	checkLeased(t, s, 1)
	if got, _ := s.Fetch(ctx, 10, time.Hour); len(got) != 0 {
		t.Fatalf("with 0 still out, a fetch leased %v", offsets(got))
	}
	ackLeases(t, s, g, run[0])
	again, err := s.Fetch(ctx, 10, time.Hour)
	if err != nil || !slices.Equal(offsets(again), []uint64{1, 2, 3, 4}) {
		t.Fatalf("refetch = %v, %v; want 1, 2, 3, 4", offsets(again), err)
	}
	for _, l := range again {
		if l.Attempt != 2 {
			t.Errorf("event %d handed out again is attempt %d, want 2", l.Offset, l.Attempt)
		}
	}
	s.Leases.Nack(0, []uint64{1}, []uint64{run[1].Number}) // a stale receipt
	checkLeased(t, s, 4)
	checkIndex(t, s, g)
}

// A run whose lease lapses goes out again whole, in order.
func TestLapsedRunGoesOutAgain(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.publish(t, "a", "a", "a", "b")
	if got, err := s.Fetch(ctx, 10, time.Nanosecond); err != nil || len(got) != 4 {
		t.Fatalf("fetch = %v, %v; want 4 events", offsets(got), err)
	}
	got, err := s.Fetch(ctx, 10, time.Hour)
	if err != nil || !slices.Equal(offsets(got), []uint64{0, 1, 2, 3}) {
		t.Fatalf("after the runs lapsed, fetch = %v, %v; want 0 to 3", offsets(got), err)
	}
	checkIndex(t, s, g)
}

// An event of a run held for its ack stays held when a nack of an earlier
// one ends the rest of the run: the key's next run ends before it.
func TestAckHeldEventLeavesItsRun(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.publish(t, "a", "a", "a", "a", "a")
	run, err := s.Fetch(ctx, 5, time.Hour)
	if err != nil || len(run) != 5 {
		t.Fatalf("fetch = %v, %v", offsets(run), err)
	}
	if held, _, _ := s.Leases.HoldForAck(0, []uint64{2}, []uint64{run[2].Number}, time.Now()); len(held) != 1 {
		t.Fatalf("HoldForAck of its own receipt held %v", held)
	}
	s.Leases.Nack(0, []uint64{0}, []uint64{run[0].Number})
	checkLeased(t, s, 1)
	got, err := s.Fetch(ctx, 10, time.Hour)
	if err != nil || !slices.Equal(offsets(got), []uint64{0, 1}) {
		t.Fatalf("fetch = %v, %v; want 0, 1 (2 is held for its ack)", offsets(got), err)
	}
	checkIndex(t, s, g)
}

// Fetches of 100 from 40 keys of 10 events each share the keys: each of
// four gets 100 events of 10 keys of its own (Spread), not the first all
// 40 keys and the others nothing.
func TestRunsSpreadKeysOverFetches(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	publishRoundRobin(t, g, keys, 10)
	holder := make(map[string]int)
	for f := range 4 {
		got, err := s.Fetch(ctx, 100, time.Hour)
		if err != nil || len(got) != 100 {
			t.Fatalf("fetch %d = %d events, %v; want 100", f, len(got), err)
		}
		runs := byKey(got)
		if len(runs) != 10 {
			t.Errorf("fetch %d leased runs of %d keys, want 10", f, len(runs))
		}
		for k, offs := range runs {
			if h, ok := holder[k]; ok {
				t.Errorf("fetch %d got events of %s, held by fetch %d", f, k, h)
			}
			holder[k] = f
			i := int(k[1] - '0') // k0..k9 suffice for a spot check
			if len(k) == 2 && (offs[0] != uint64(i) || !slices.IsSorted(offs)) {
				t.Errorf("fetch %d: %s's run %v, want from its first event %d, in order", f, k, offs, i)
			}
		}
	}
	if got, _ := s.Fetch(ctx, 100, time.Hour); len(got) != 0 {
		t.Errorf("a fifth fetch leased %v", offsets(got))
	}
	checkIndex(t, s, g)
}
