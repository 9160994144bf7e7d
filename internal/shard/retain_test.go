package shard

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// checkRetention checks the retained events against the runs and the
// cursors: they start at or below the lowest head, there is one entry per
// offset up to the next one, and a pending event is retained with its
// size, unless it is the copy of a dead letter replayed, which is not
// retained.
func checkRetention(t *testing.T, s *State) {
	t.Helper()
	if !s.retaining {
		if s.retainFrom != 0 || s.retained.len() != 0 {
			t.Fatalf("not retaining, yet retaining %d entries from %d", s.retained.len(), s.retainFrom)
		}
		return
	}
	if h := s.minHead(); s.retainFrom > h {
		t.Fatalf("retaining from %d, beyond the lowest head %d", s.retainFrom, h)
	}
	if uint64(s.retained.len()) != s.nextOffset-s.retainFrom {
		t.Fatalf("%d retained entries for offsets [%d, %d)", s.retained.len(), s.retainFrom, s.nextOffset)
	}
	for c := range s.active {
		for o := max(c.head, s.retainFrom); o < s.nextOffset; o++ {
			r := s.retained.size(int(o - s.retainFrom))
			if c.isPending(o, s.nextOffset) && r != acked && c.pending.size(int(o-c.head)) != r {
				t.Fatalf("subscription %d: pending event %d is retained with another size", c.id, o)
			}
		}
	}
	checkPendingList(t, &s.retained)
}

// retentionHistory is a shard that retains, with two subscriptions at
// different places, one of which sought back, and events trimmed.
func retentionHistory(t *testing.T) *harness {
	h := newHarness(t)
	h.ok(Command{Op: OpSubscribe, Subscription: 4})
	h.ok(Command{Op: OpPublish, Time: 1, Events: events(1, 2)})
	h.ok(Command{Op: OpAck, Offsets: []uint64{1}})
	h.ok(Command{Op: OpRetain, OlderThan: 0})
	for i := range 8 {
		h.ok(Command{Op: OpPublish, Time: int64(10 + i), Events: events(i+1, 3)})
	}
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 2, 3, 4, 5, 6, 9}})
	h.ok(Command{Op: OpAck, Subscription: 4, Offsets: []uint64{0, 2, 3, 4, 5, 6, 7, 8}})
	h.ok(Command{Op: OpDeadLetter, Subscription: 4, Time: 30, Dead: []DeadInfo{{Offset: 9, Reason: "r"}}})
	h.ok(Command{Op: OpRetain, OlderThan: 12})
	h.ok(Command{Op: OpSeek, Subscription: 4, From: 5})
	h.ok(Command{Op: OpAttempt, Subscription: 4, Offsets: []uint64{6}})
	return h
}

func TestRetainZeroFreesAsBefore(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Time: 1, Events: events(1, 2, 3)})
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 1, 2}})
	if h.s.Retaining() || len(h.s.runs) != 0 || h.s.Earliest() != 3 {
		t.Fatalf("without a Retain the shard holds %d runs from %d", len(h.s.runs), h.s.Earliest())
	}
	if got, want := h.s.CompactIndex(), h.index+1; got != want {
		t.Fatalf("CompactIndex = %d, want %d", got, want)
	}
}

func TestRetainKeepsDeliveredEventsUntilTrimmed(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Time: 1, Events: events(5)})
	h.ok(Command{Op: OpAck, Offsets: []uint64{0}}) // freed before retention began
	h.ok(Command{Op: OpRetain, OlderThan: 0})
	first := h.index + 1
	h.ok(Command{Op: OpPublish, Time: 10, Events: events(1, 2)})
	h.ok(Command{Op: OpPublish, Time: 20, Events: events(3)})
	h.ok(Command{Op: OpPublish, Time: 30, Events: events(4)})
	h.ok(Command{Op: OpAck, Offsets: []uint64{1, 2, 3}})
	checkInvariants(t, h.s)
	if got := h.s.Earliest(); got != 1 {
		t.Fatalf("Earliest = %d, want 1", got)
	}
	if got := h.s.CompactIndex(); got != first {
		t.Fatalf("CompactIndex = %d, want %d, the first retained event's entry", got, first)
	}
	if idx, slot, ok := h.s.Locate(2); !ok || idx != first || slot != 1 {
		t.Fatalf("Locate(2) = %d, %d, %v", idx, slot, ok)
	}
	if got, ok := h.s.OldestRetained(); !ok || got != 10 {
		t.Fatalf("OldestRetained = %d, %v; want 10", got, ok)
	}
	if got := h.ok(Command{Op: OpRetain, OlderThan: 20}).Count; got != 2 {
		t.Fatalf("trim freed %d offsets, want 2", got)
	}
	if got := h.s.Earliest(); got != 3 {
		t.Fatalf("after a trim Earliest = %d, want 3", got)
	}
	// A trim never frees what a cursor holds: offset 4 is pending.
	if got := h.ok(Command{Op: OpRetain, OlderThan: 100}).Count; got != 1 {
		t.Fatalf("trim freed %d offsets, want 1", got)
	}
	if got := h.s.Earliest(); got != 4 {
		t.Fatalf("after a trim Earliest = %d, want the head 4", got)
	}
	if _, ok := h.s.OldestRetained(); ok {
		t.Fatal("OldestRetained reports an event a cursor holds")
	}
	checkInvariants(t, h.s)
	h.ok(Command{Op: OpPublish, Time: 40, Events: events(6)})
	h.ok(Command{Op: OpAck, Offsets: []uint64{4, 5}})
	if got := h.s.Earliest(); got != 4 {
		t.Fatalf("Earliest = %d, want 4", got)
	}
	// RetainNone stops retaining: the shard frees events as before.
	h.ok(Command{Op: OpRetain, OlderThan: RetainNone})
	if h.s.Retaining() || len(h.s.runs) != 0 || h.s.Earliest() != 6 {
		t.Fatalf("after RetainNone the shard retains %v, %d runs from %d", h.s.Retaining(), len(h.s.runs), h.s.Earliest())
	}
	checkInvariants(t, h.s)
}

func TestRetainKeepsEventsWithoutSubscriptions(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpRetain, OlderThan: 0})
	h.ok(Command{Op: OpUnsubscribe})
	h.ok(Command{Op: OpPublish, Time: 5, Events: events(1, 2)})
	h.ok(Command{Op: OpSubscribe, Subscription: 7, From: 0})
	if got := h.pendingOf(7); !slices.Equal(got, []uint64{0, 1}) {
		t.Fatalf("a subscription from the earliest has %v pending, want [0 1]", got)
	}
	if st := h.cursorOf(7).Stats(); st.Bytes != 3 || st.Events != 2 {
		t.Fatalf("stats %+v", st)
	}
	checkInvariants(t, h.s)
}

func TestSeek(t *testing.T) {
	// Each case starts from: retaining since offset 0, eleven events of
	// size 1..11 at times 10, 20, ... (offsets 0-9 one a Publish, 10 in
	// its own), subscription 2 having acked 0-3, skipped 4, dead-lettered
	// 5 and acked 7; 6 and 8-10 pending, 6 with an attempt.
	setup := func(t *testing.T) *harness {
		h := newHarness(t)
		h.ok(Command{Op: OpRetain, OlderThan: 0})
		h.ok(Command{Op: OpUnsubscribe})
		h.ok(Command{Op: OpSubscribe, Subscription: 2})
		for i := range 11 {
			h.ok(Command{Op: OpPublish, Time: int64(10 * (i + 1)), Events: events(i + 1)})
		}
		h.ok(Command{Op: OpAck, Subscription: 2, Offsets: []uint64{0, 1, 2, 3, 7}})
		h.ok(Command{Op: OpSkip, Subscription: 2, Offsets: []uint64{4}})
		h.ok(Command{Op: OpDeadLetter, Subscription: 2, Time: 99, Dead: []DeadInfo{{Offset: 5}}})
		h.ok(Command{Op: OpAttempt, Subscription: 2, Offsets: []uint64{6}})
		return h
	}
	for _, tc := range []struct {
		name     string
		from     uint64
		time     int64 // the Seek's Time
		trim     int64 // a Retain before the seek, if not 0
		head     uint64
		pending  []uint64
		replayed int
	}{
		{name: "back to the start", from: 0, head: 0, pending: []uint64{0, 1, 2, 3, 4, 6, 7, 8, 9, 10}, replayed: 6},
		{name: "back past the dead letter", from: 3, head: 3, pending: []uint64{3, 4, 6, 7, 8, 9, 10}, replayed: 3},
		{name: "to the head", from: 6, head: 6, pending: []uint64{6, 7, 8, 9, 10}, replayed: 1},
		{name: "forward", from: 9, head: 9, pending: []uint64{9, 10}},
		{name: "to now", from: FromNow, head: 11, pending: nil},
		{name: "below what is retained", from: 0, trim: 35, head: 3, pending: []uint64{3, 4, 6, 7, 8, 9, 10}, replayed: 3},
		{name: "to a time", from: 0, time: 45, head: 4, pending: []uint64{4, 6, 7, 8, 9, 10}, replayed: 2},
		{name: "to a time after an offset", from: 8, time: 45, head: 8, pending: []uint64{8, 9, 10}},
		{name: "to a time after everything", from: 0, time: 1000, head: 11, pending: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := setup(t)
			if tc.trim != 0 {
				h.ok(Command{Op: OpRetain, OlderThan: tc.trim})
			}
			r := h.ok(Command{Op: OpSeek, Subscription: 2, From: tc.from, Time: tc.time})
			c := h.cursorOf(2)
			wantTime := int64(0)
			if tc.head < 11 {
				wantTime = int64(10 * (tc.head + 1))
			}
			if r.FirstOffset != tc.head || r.Time != wantTime {
				t.Errorf("seek went to %d, published at %d; want %d, %d", r.FirstOffset, r.Time, tc.head, wantTime)
			}
			if r.Count != tc.replayed || c.Head() != tc.head || !slices.Equal(h.pendingOf(2), tc.pending) {
				t.Fatalf("seek to %d: replayed %d, head %d, pending %v; want %d, %d, %v",
					tc.from, r.Count, c.Head(), h.pendingOf(2), tc.replayed, tc.head, tc.pending)
			}
			var size int64
			for _, o := range tc.pending {
				size += int64(o + 1)
				if a := c.Attempts(o); a != 0 {
					t.Errorf("event %d has %d attempts after the seek", o, a)
				}
			}
			st := c.Stats()
			if st.Bytes != size || st.Events != int64(len(tc.pending)) || st.DeadLetters != 1 {
				t.Errorf("stats %+v, want %d events of %d bytes and the dead letter", st, len(tc.pending), size)
			}
			checkInvariants(t, h.s)
			if !bytes.Equal(snapshot(t, clone(t, h.s)), snapshot(t, h.s)) {
				t.Fatal("a restored state differs")
			}
			// Delivering it all again empties the cursor.
			h.ok(Command{Op: OpAck, Subscription: 2, Offsets: tc.pending})
			if got := h.cursorOf(2).Head(); got != 11 {
				t.Fatalf("after acking everything the head is %d", got)
			}
			checkInvariants(t, h.s)
		})
	}
}

func TestSeekWithoutRetentionTakesWhatIsHeld(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpSubscribe, Subscription: 3})
	h.ok(Command{Op: OpPublish, Time: 1, Events: events(1, 2, 3, 4)})
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 1, 2}})
	h.ok(Command{Op: OpAck, Subscription: 3, Offsets: []uint64{1, 2, 3}})
	// The lowest head is subscription 3's, 0, which it holds; 3 the
	// default subscription holds. Offsets 1 and 2 are done by both, so
	// without retention their sizes are gone and a seek cannot take them.
	h.ok(Command{Op: OpSeek, From: 0})
	if got := h.pendingOf(0); !slices.Equal(got, []uint64{0, 3}) {
		t.Fatalf("pending %v, want [0 3]", got)
	}
	checkInvariants(t, h.s)
}

func TestSeekRejectionsChangeNothing(t *testing.T) {
	h := retentionHistory(t)
	detached := clone(t, h.s)
	detached.Apply(h.index+1, &Command{Op: OpUnsubscribe})
	for _, tc := range []struct {
		s   *State
		cmd Command
	}{
		{h.s, Command{Op: OpSeek, Subscription: 99}},
		{detached, Command{Op: OpSeek, From: 0}}, // the default subscription was deleted
	} {
		rejected, noop := clone(t, tc.s), clone(t, tc.s)
		if r := rejected.Apply(100, &tc.cmd); !errors.Is(r.Err, ErrUnknownSubscription) {
			t.Errorf("%+v: got %v, want ErrUnknownSubscription", tc.cmd, r.Err)
			continue
		}
		noop.Apply(100, nil)
		if !bytes.Equal(snapshot(t, rejected), snapshot(t, noop)) {
			t.Errorf("%+v: a rejected seek changed the state", tc.cmd)
		}
	}
}

func TestRetentionFreezeIsolation(t *testing.T) {
	h := retentionHistory(t)
	capture := h.s.SnapshotFunc()
	want := snapshot(t, h.s)
	for i := range 600 {
		h.ok(Command{Op: OpPublish, Time: int64(100 + i), Events: events(i % 9)})
	}
	h.ok(Command{Op: OpSeek, Subscription: 4, From: 0})
	h.ok(Command{Op: OpAck, Offsets: []uint64{7, 8, 10}})
	h.ok(Command{Op: OpRetain, OlderThan: 300})
	h.ok(Command{Op: OpRetain, OlderThan: RetainNone})
	if got, _ := capture(); !bytes.Equal(got, want) {
		t.Fatal("a capture changed with the state")
	}
	checkInvariants(t, h.s)
}

func TestRetentionSnapshotRoundTrip(t *testing.T) {
	h := retentionHistory(t)
	checkInvariants(t, h.s)
	r := clone(t, h.s)
	checkInvariants(t, r)
	if !bytes.Equal(snapshot(t, r), snapshot(t, h.s)) {
		t.Fatal("restored state differs")
	}
	if !r.Retaining() || r.Earliest() != h.s.Earliest() {
		t.Fatalf("restored retention %v from %d", r.Retaining(), r.Earliest())
	}
}

func TestOffsetAt(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpRetain, OlderThan: 0})
	h.ok(Command{Op: OpPublish, Time: 10, Events: events(1, 1)})
	h.ok(Command{Op: OpPublish, Time: 20, Events: events(1)})
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 1, 2}})
	for _, tc := range []struct {
		t    int64
		want uint64
	}{{0, 0}, {10, 0}, {11, 2}, {20, 2}, {21, 3}} {
		if got := h.s.OffsetAt(tc.t); got != tc.want {
			t.Errorf("OffsetAt(%d) = %d, want %d", tc.t, got, tc.want)
		}
	}
}

// TestSeekRandomly drives a retaining shard with three subscriptions,
// and a fourth that comes and goes, starting from the earliest retained
// event, through random commands, seeks and trims among them, checking
// every cursor against a model, the invariants, and snapshots and
// captures.
func TestSeekRandomly(t *testing.T) {
	d := newRandomSubscriptions(t, 3, 0, 3, 8)
	d.h.ok(Command{Op: OpRetain, OlderThan: 0})
	d.h.ok(Command{Op: OpSubscribe, Subscription: 3})
	d.h.ok(Command{Op: OpSubscribe, Subscription: 8})
	retainFrom := uint64(0) // the model's first retained offset
	minHead := func() uint64 {
		h := uint64(len(d.times))
		for _, s := range d.subs {
			for o := range d.model[s] {
				h = min(h, o)
			}
		}
		return h
	}
	for step := range 4000 {
		sub := d.anySub()
		d.step(step, func() {
			switch op := d.rng.IntN(15); {
			case op < 3:
				d.publish(step)
			case op < 6:
				d.done(OpAck, sub)
			case op < 7:
				d.attempt(sub)
			case op < 8:
				d.deadLetter(step, sub)
			case op < 9:
				d.replay(step, sub)
			case op < 10:
				d.purge(sub)
			case op < 12:
				cutoff := int64(step - d.rng.IntN(200))
				d.h.ok(Command{Op: OpRetain, OlderThan: cutoff})
				mh := minHead()
				for retainFrom < mh && d.times[retainFrom] < cutoff {
					retainFrom++
				}
			case op == 14:
				// Subscription 11 comes and goes: it starts from the
				// earliest retained event.
				if slices.Contains(d.subs, 11) {
					d.h.ok(Command{Op: OpUnsubscribe, Subscription: 11})
					d.remove(11)
					return
				}
				d.h.ok(Command{Op: OpSubscribe, Subscription: 11, From: 0})
				d.add(11)
				for o := retainFrom; o < uint64(len(d.times)); o++ {
					if !d.only[o] {
						d.model[11][o] = true
					}
				}
			default:
				next := uint64(len(d.times))
				from := retainFrom + uint64(d.rng.IntN(int(next-retainFrom)+2))
				d.h.ok(Command{Op: OpSeek, Subscription: sub, From: from})
				from = min(from, next)
				for o := range d.model[sub] {
					if o < from {
						delete(d.model[sub], o)
					}
				}
				for o := from; o < next; o++ {
					if !d.dead[sub][o] && (!d.only[o] || d.model[sub][o]) {
						d.model[sub][o] = true
					}
				}
			}
		})
		if got := d.h.s.Earliest(); got != retainFrom {
			t.Fatalf("step %d: retaining from %d, model %d", step, got, retainFrom)
		}
	}
}

// A snapshot whose retained events disagree with the cursors, or reach
// past the lowest head, is rejected.
func TestRetentionSnapshotRejects(t *testing.T) {
	h := retentionHistory(t)
	good := snapshot(t, keyless(h.s))
	if !h.s.cursorOf(t, 0).isPending(h.s.nextOffset-1, h.s.nextOffset) {
		t.Fatal("the history's last event is not pending")
	}
	// The byte before the last two (the LRO, 0, and the count of key
	// hashes, 0) is the last event's retained size plus one.
	if good[len(good)-2] != 0 || good[len(good)-1] != 0 {
		t.Fatal("the history is tiered, or holds key hashes")
	}
	bad := bytes.Clone(good)
	bad[len(bad)-3]++
	var s State
	if err := s.UnmarshalBinary(bad); !errors.Is(err, ErrInvalidSnapshot) {
		t.Errorf("a retained size that disagrees: %v, want ErrInvalidSnapshot", err)
	}
	if err := s.UnmarshalBinary(good[:len(good)-1]); !errors.Is(err, ErrInvalidSnapshot) {
		t.Errorf("a truncated snapshot: %v, want ErrInvalidSnapshot", err)
	}
}

func (s *State) cursorOf(t *testing.T, sub uint64) *cursor {
	t.Helper()
	c, err := s.cursorFor(sub)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
