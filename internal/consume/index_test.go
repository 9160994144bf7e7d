package consume

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"herald/internal/delivery"
	"herald/internal/shard"
)

// scanPick is the reference the index is held to, and how fetches chose
// their events before it (with runs of 1): walking the pending events in
// offset order, it visits each key at its first event not done; a key
// whose first is leased is held by its consumer; of each other key it
// takes a run of its next events not done, up to limit and ending before
// a leased one, until it has max. It returns them in offset order.
func scanPick(pending []delivery.Event, acked, leased func(offset uint64) bool, max, limit int) []delivery.Event {
	byKey := make(map[string][]delivery.Event) // each key's events not done
	var keys []string                          // in order of their first
	for _, p := range pending {
		if acked(p.Offset) {
			continue
		}
		if _, ok := byKey[p.Event.Key]; !ok {
			keys = append(keys, p.Event.Key)
		}
		byKey[p.Event.Key] = append(byKey[p.Event.Key], p)
	}
	var out []delivery.Event
	for _, k := range keys {
		for i, p := range byKey[k] {
			if len(out) >= max || i == limit || leased(p.Offset) {
				break
			}
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b delivery.Event) int { return cmp.Compare(a.Offset, b.Offset) })
	return out
}

// fetchByScan is Shard.Fetch as it was before the index, for the
// benchmark's comparison: it reads up to scan pending events from the
// head on each fetch.
func fetchByScan(ctx context.Context, s Shard, max int, visibility time.Duration, scan int) ([]Lease, error) {
	pending, _, err := s.ReadPending(ctx, 0, scan)
	if err != nil || len(pending) == 0 {
		return nil, err
	}
	if err := s.Group.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	acked, err := s.AckedNow(ctx, pending)
	if err != nil {
		return nil, err
	}
	t := s.table()
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	leased := func(o uint64) bool { return t.events[o].leased(t.clock(now)) }
	var out []Lease
	for _, p := range scanPick(pending, func(o uint64) bool { return acked[o] }, leased, max, 1) {
		number, attempts := t.lease(p.Offset, now.Add(visibility), nil, 0)
		out = append(out, Lease{Offset: p.Offset, Number: number, Event: p.Event, Time: p.Time, Attempt: attempts})
	}
	return out, nil
}

// expectedFetch returns the offsets a fetch of max events should lease
// now, by the reference scan over every pending event.
func expectedFetch(t *testing.T, s Shard, g *fakeGroup, max int) []uint64 {
	t.Helper()
	pending, _, err := s.ReadPending(context.Background(), 0, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	l := s.table()
	// The runs' length depends on the keys the index holds once it has
	// read the log (runCap): bring it up to date as the fetch will.
	if _, err := s.index(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	leased := func(o uint64) bool { return l.events[o].leased(l.clock(now)) }
	return offsets2(scanPick(pending, s.isAcked(g), leased, max, runCap(max, len(l.index.keys))))
}

func offsets2(evs []delivery.Event) []uint64 {
	var out []uint64
	for _, e := range evs {
		out = append(out, e.Offset)
	}
	return out
}

// checkIndex fails t unless the index's invariants hold: each key is in
// one heap, where its position says; the leased keys are listed by their
// front; the count of offsets is right; and each key's queue holds, in
// order, every pending event of the key below indexed.
func checkIndex(t *testing.T, s Shard, g *fakeGroup) {
	t.Helper()
	l := s.table()
	l.mu.Lock()
	defer l.mu.Unlock()
	x := l.index
	if x.stale {
		return // rebuilt before use
	}
	inHeap := make(map[*keyQueue]string)
	for name, h := range map[string]*keyHeap{"ready": &x.ready, "leased": &x.leased} {
		for i, k := range h.items {
			if k.pos != i {
				t.Fatalf("key %#x at %d of the %s heap says %d", k.key, i, name, k.pos)
			}
			if prev, ok := inHeap[k]; ok {
				t.Fatalf("key %#x in the %s heap and the %s heap", k.key, prev, name)
			}
			inHeap[k] = name
			if i > 0 && h.less(k, h.items[(i-1)/2]) {
				t.Fatalf("%s heap out of order at %d", name, i)
			}
		}
	}
	held := 0
	for key, k := range x.keys {
		if k.key != key || len(k.offsets) == 0 || inHeap[k] == "" {
			t.Fatalf("key %#x: named %#x, %d offsets, heap %q", key, k.key, len(k.offsets), inHeap[k])
		}
		held += len(k.offsets)
		if f, ok := x.fronts[k.offsets[0]]; (inHeap[k] == "leased") != (ok && f == k) {
			t.Fatalf("key %#x in the %s heap, listed by its front: %v", key, inHeap[k], ok)
		}
	}
	if len(inHeap) != len(x.keys) || len(x.fronts) != x.leased.Len() || held != x.entries {
		t.Fatalf("%d keys in heaps, %d in the map; %d fronts for %d leased; %d entries counted, %d held",
			len(inHeap), len(x.keys), len(x.fronts), x.leased.Len(), x.entries, held)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.m
	c, ok := m.Cursor(s.Sub)
	if !ok {
		t.Fatalf("subscription %d has no cursor", s.Sub)
	}
	want := make(map[uint32][]uint64) // by key hash
	entries := make(map[uint64]shard.Command)
	for o := c.Head(); o < x.indexed; o++ {
		if c.IsAcked(o) {
			continue
		}
		idx, slot, _ := m.Locate(o)
		cmd, ok := entries[idx]
		if !ok {
			cmd, _ = shard.UnmarshalCommand(g.log[idx])
			entries[idx] = cmd
		}
		key := shard.KeyHash(cmd.Events[slot].Key)
		want[key] = append(want[key], o)
	}
	for key, offs := range want {
		k := x.keys[key]
		if k == nil {
			t.Fatalf("key %#x with pending events %v is not indexed", key, offs)
		}
		pending := slices.DeleteFunc(slices.Clone(k.offsets), c.IsAcked)
		if !slices.Equal(pending, offs) {
			t.Fatalf("key %#x: index holds pending %v, want %v", key, pending, offs)
		}
	}
}

// After any sequence of publishes, fetches, acks (by id and by receipt),
// nacks, lapsed leases, dead letters, snapshot restores and changes of
// leader, a fetch leases exactly what the scan of every pending event
// would.
// It holds for the default subscription, and for another one, which
// shares the log with the default one and consumes at its own pace.
func TestFetchMatchesScan(t *testing.T) {
	for _, sub := range []uint64{0, 5} {
		for seed := range uint64(40) {
			t.Run(fmt.Sprintf("sub=%d/%d", sub, seed), func(t *testing.T) { fetchMatchesScan(t, sub, seed) })
		}
	}
}

func fetchMatchesScan(t *testing.T, sub, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	s, g := newShard()
	if sub != 0 {
		g.subscribe(t, sub)
		s = s.sub(sub)
	}
	nkeys := 1 + rng.IntN(8)
	var out []Lease // handed out, perhaps acknowledged or lapsed since
	pendingOffsets := func() []uint64 {
		evs, _, err := s.ReadPending(ctx, 0, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		return offsets2(evs)
	}
	for step := range 400 {
		switch op := rng.IntN(20); {
		case op < 5:
			keys := make([]string, 1+rng.IntN(5))
			for i := range keys {
				keys[i] = fmt.Sprint("k", rng.IntN(nkeys))
			}
			g.publish(t, keys...)
		case op < 10:
			max := 1 + rng.IntN(6)
			visibility := time.Hour
			if rng.IntN(3) == 0 {
				visibility = time.Nanosecond // lapses at once
			}
			want := expectedFetch(t, s, g, max)
			got, err := s.Fetch(ctx, max, visibility)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(offsets(got), want) {
				t.Fatalf("step %d: fetch of %d leased %v, the scan %v", step, max, offsets(got), want)
			}
			out = append(out, got...)
		case op < 12 && len(out) > 0: // the holder acks its receipt
			l := out[rng.IntN(len(out))]
			held, _, _ := s.Leases.HoldForAck(s.Sub, []uint64{l.Offset}, []uint64{l.Number}, time.Now())
			if len(held) > 0 {
				g.ackIn(t, s.Sub, held...)
			}
		case op < 13 && len(out) > 0:
			l := out[rng.IntN(len(out))]
			s.Leases.Nack(s.Sub, []uint64{l.Offset}, []uint64{l.Number})
		case op < 14: // an ack by id, of any pending event
			if p := pendingOffsets(); len(p) > 0 {
				g.ackIn(t, s.Sub, p[rng.IntN(len(p))])
			}
		case op < 15: // an ack of a receipt that fails to commit
			o := uint64(rng.IntN(int(g.m.NextOffset()) + 1))
			_, fresh, _ := s.Leases.HoldForAck(s.Sub, []uint64{o}, []uint64{12345}, time.Now())
			if rng.IntN(2) == 0 {
				s.Leases.Nack(s.Sub, fresh, nil)
			}
		case op < 16:
			if p := pendingOffsets(); len(p) > 0 {
				o := p[rng.IntN(len(p))]
				g.apply(t, shard.Command{Op: shard.OpDeadLetter, Time: 1, Subscription: s.Sub, Dead: []shard.DeadInfo{{Offset: o, Reason: "test"}}})
			}
		case op < 17:
			if rng.IntN(2) == 0 {
				g.restore(t)
			} else {
				g.restoreKeyless(t) // as an older release wrote it
			}
		case op < 18: // a new leader, without the leases
			s.Leases = NewLeases(nil)
			g.leases = s.Leases
			out = nil
		case op < 19:
			if p := pendingOffsets(); len(p) > 0 {
				g.ackIn(t, s.Sub, p...)
			}
		case sub != 0: // the default subscription consumes at its own pace
			if p, _, _ := s.sub(0).ReadPending(ctx, 0, 1<<30); len(p) > 0 {
				g.ackIn(t, 0, p[rng.IntN(len(p))].Offset)
			}
		}
		checkIndex(t, s, g)
	}
}

// A new leader, or a replica whose state a snapshot replaced, rebuilds
// the index from the shard, and hands out each key's pending events.
func TestFetchRebuildsTheIndex(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.publish(t, "a", "b", "a", "c", "b")
	if got, err := s.Fetch(ctx, 10, time.Hour); err != nil || !slices.Equal(offsets(got), []uint64{0, 1, 2, 3, 4}) {
		t.Fatalf("fetch = %v, %v; want 0 to 4", offsets(got), err)
	}
	g.ack(t, 0)
	s.Leases = NewLeases(nil) // failover: the leases are lost
	g.leases = s.Leases
	got, err := s.Fetch(ctx, 10, time.Hour)
	if err != nil || !slices.Equal(offsets(got), []uint64{1, 2, 3, 4}) {
		t.Fatalf("fetch on a new leader = %v, %v; want 1, 2, 3, 4", offsets(got), err)
	}
	s.Leases.Nack(0, []uint64{4}, []uint64{got[3].Number}) // b's second, alone: the last of its run
	// Acks that arrive in a snapshot end no lease: the restore does.
	g.mu.Lock()
	m := g.m
	g.mu.Unlock()
	g.index++
	m.ApplyDecoded(g.index, &shard.Command{Op: shard.OpAck, Offsets: []uint64{1, 2}}, nil)
	g.restore(t)
	if got, err := s.Fetch(ctx, 10, time.Hour); err != nil || !slices.Equal(offsets(got), []uint64{4}) {
		t.Fatalf("fetch after a restore = %v, %v; want 4", offsets(got), err)
	}
	checkIndex(t, s, g)
}

// A fetch on a backlog longer than MaxScan hands out events from the part
// indexed, in order per key, and indexes on at each fetch.
func TestFetchIndexesALongBacklogInSteps(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	keys := make([]string, MaxScan+10)
	for i := range keys {
		keys[i] = "a"
	}
	keys[len(keys)-1] = "b"
	g.publish(t, keys...)
	if got, err := s.Fetch(ctx, 10, time.Hour); err != nil || !slices.Equal(offsets(got), []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("first fetch = %v, %v; want 0 to 9, a run of a (b is not indexed yet)", offsets(got), err)
	}
	if got, err := s.Fetch(ctx, 10, time.Hour); err != nil || !slices.Equal(offsets(got), []uint64{MaxScan + 9}) {
		t.Fatalf("second fetch = %v, %v; want b's", offsets(got), err)
	}
	checkIndex(t, s, g)
}

// Draining a backlog leaves the index empty, and a drained index with
// many keys gives its memory back.
func TestFetchIndexDrains(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	keys := make([]string, 6000)
	for i := range keys {
		keys[i] = fmt.Sprint(i)
	}
	g.publish(t, keys...)
	for {
		got, err := s.Fetch(ctx, 1000, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		g.ack(t, offsets(got)...)
	}
	if got, err := s.Fetch(ctx, 1000, time.Hour); err != nil || len(got) != 0 {
		t.Fatalf("fetch of a drained shard = %v, %v", offsets(got), err)
	}
	x := s.table().index
	if len(x.keys) != 0 || x.entries != 0 || x.ready.Len()+x.leased.Len() != 0 || x.peak != 0 {
		t.Errorf("drained index: %d keys, %d entries, %d in heaps, peak %d; want nothing", len(x.keys), x.entries, x.ready.Len()+x.leased.Len(), x.peak)
	}
}

// An event whose entry cannot be read is not left leased.
func TestFetchUnleasesWhatItCannotRead(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.publish(t, "a")
	if _, err := s.index(ctx, s.table()); err != nil {
		t.Fatal(err)
	}
	delete(g.log, 1)
	if _, err := s.Fetch(ctx, 10, time.Hour); err == nil {
		t.Fatal("fetch of a lost entry succeeded")
	}
	checkLeased(t, s, 0)
}
