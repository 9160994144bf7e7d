package shard

import (
	"bytes"
	"errors"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// cursorOf returns the view of subscription sub, failing the test if the
// shard has none.
func (h *harness) cursorOf(sub uint64) Cursor {
	h.t.Helper()
	c, ok := h.s.Cursor(sub)
	if !ok {
		h.t.Fatalf("no cursor for subscription %d", sub)
	}
	return c
}

// pendingOf returns the offsets subscription sub has still to deliver.
func (h *harness) pendingOf(sub uint64) []uint64 {
	c := h.cursorOf(sub)
	var out []uint64
	for o := c.Head(); o < h.s.NextOffset(); o++ {
		if !c.IsAcked(o) {
			out = append(out, o)
		}
	}
	return out
}

func TestSubscriptionsProgressIndependently(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpSubscribe, Subscription: 7, From: FromNow})
	h.ok(Command{Op: OpPublish, Time: 10, Events: events(1, 2, 3)}) // offsets 0-2, index 2
	h.ok(Command{Op: OpPublish, Time: 20, Events: events(4)})       // offset 3, index 3

	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 1, 2}})
	if got := h.pendingOf(0); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("default pending %v, want [3]", got)
	}
	if got := h.pendingOf(7); !slices.Equal(got, []uint64{0, 1, 2, 3}) {
		t.Fatalf("subscription 7 pending %v, want all four", got)
	}
	// The log keeps what subscription 7 still needs.
	if got := h.s.CompactIndex(); got != 2 {
		t.Fatalf("compact index %d, want 2: subscription 7 has not had the first entry", got)
	}
	if idx, slot, ok := h.s.Locate(1); !ok || idx != 2 || slot != 1 {
		t.Fatalf("Locate(1) = %d, %d, %v; want 2, 1, true", idx, slot, ok)
	}

	h.ok(Command{Op: OpSkip, Subscription: 7, Offsets: []uint64{0}})
	h.ok(Command{Op: OpAttempt, Subscription: 7, Offsets: []uint64{1}})
	h.ok(Command{Op: OpAck, Subscription: 7, Offsets: []uint64{1, 2}})
	if got := h.s.CompactIndex(); got != 3 {
		t.Fatalf("compact index %d, want 3 once both are past the first entry", got)
	}
	st := h.cursorOf(7).Stats()
	want := Stats{Events: 1, Bytes: events(4)[0].Size(), Published: 4, Acked: 2, Delivered: 2, Skipped: 1, Retried: 1,
		NextOffset: 4, Head: 3, OldestEventTime: 20}
	if st != want {
		t.Fatalf("subscription 7 stats\n%+v, want\n%+v", st, want)
	}
	if d := h.stats(); d.Acked != 3 || d.Skipped != 0 || d.Retried != 0 || d.Head != 3 {
		t.Fatalf("default stats %+v: the other subscription's progress leaked into it", d)
	}
	checkInvariants(t, h.s)
}

func TestSubscribeStartsFromNowOrFromWhatIsHeld(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Events: events(1, 2, 3, 4)}) // offsets 0-3
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 2}})

	h.ok(Command{Op: OpSubscribe, Subscription: 1, From: FromNow})
	h.ok(Command{Op: OpSubscribe, Subscription: 2}) // from the earliest held
	h.ok(Command{Op: OpSubscribe, Subscription: 3, From: 3})
	if got := h.pendingOf(1); len(got) != 0 {
		t.Fatalf("from now: pending %v, want none", got)
	}
	// Offset 0 is freed (every subscription had it); 2 was delivered to
	// the only subscription there was, so it is not held for anyone.
	if got := h.pendingOf(2); !slices.Equal(got, []uint64{1, 3}) {
		t.Fatalf("from the earliest: pending %v, want [1 3]", got)
	}
	if got := h.pendingOf(3); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("from 3: pending %v, want [3]", got)
	}
	for sub, want := range map[uint64]uint64{1: 0, 2: 0, 3: 0} {
		if st := h.cursorOf(sub).Stats(); st.Acked != want || st.Events+int64(st.Acked) != int64(len(h.pendingOf(sub))) {
			t.Errorf("subscription %d: %+v counts events it never had", sub, st)
		}
	}
	// A repeated subscribe changes nothing, not even a later start.
	if r := h.ok(Command{Op: OpSubscribe, Subscription: 2, From: FromNow}); r.Count != 0 {
		t.Fatalf("repeated subscribe counted %d", r.Count)
	}
	if got := h.pendingOf(2); !slices.Equal(got, []uint64{1, 3}) {
		t.Fatalf("repeated subscribe moved the cursor: %v", got)
	}
	h.ok(Command{Op: OpPublish, Events: events(5)})
	for _, sub := range []uint64{0, 1, 2, 3} {
		if got := h.pendingOf(sub); !slices.Contains(got, 4) {
			t.Errorf("subscription %d does not have the new event: %v", sub, got)
		}
	}
	checkInvariants(t, h.s)
}

func TestReplayDeadIsForItsSubscriptionAlone(t *testing.T) {
	h := newLogHarness(t)
	h.ok(Command{Op: OpSubscribe, Subscription: 5, From: FromNow})
	h.ok(Command{Op: OpPublish, Events: []Event{keyed("a", 3), keyed("b", 4)}}) // 0, 1
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 1}})
	h.ok(Command{Op: OpDeadLetter, Subscription: 5, Time: 9, Dead: []DeadInfo{{Offset: 1, Reason: "max_retries"}}})
	h.ok(Command{Op: OpAck, Subscription: 5, Offsets: []uint64{0}})
	if dl := h.cursorOf(5).DeadLetters(0, 0); len(dl) != 1 || dl[0].Offset != 1 {
		t.Fatalf("subscription 5 dead letters %+v, want offset 1", dl)
	}
	if dl := h.s.DeadLetters(0, 0); len(dl) != 0 {
		t.Fatalf("default subscription has dead letters %+v", dl)
	}
	// The dead letter's entry is kept although both heads are past it.
	if got := h.s.CompactIndex(); got != 2 {
		t.Fatalf("compact index %d, want 2 (the dead letter's entry)", got)
	}
	ev := h.event(1)
	r := h.ok(Command{Op: OpReplayDead, Subscription: 5, Offsets: []uint64{1}, Events: []Event{ev}})
	if r.FirstOffset != 2 {
		t.Fatalf("replayed at %d, want 2", r.FirstOffset)
	}
	if got := h.pendingOf(5); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("subscription 5 pending %v, want the replayed [2]", got)
	}
	if got := h.pendingOf(0); len(got) != 0 {
		t.Fatalf("the default subscription got the other's replay: %v", got)
	}
	if st := h.stats(); st.Acked != 2 || st.Published != 3 {
		t.Fatalf("default stats %+v: want 2 acked of 3 published, the replay not its", st)
	}
	// A replay for the default subscription is its own, too.
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 2, Reason: "x"}}})
	checkInvariants(t, h.s)
}

func TestUnsubscribe(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpSubscribe, Subscription: 2, From: FromNow})
	h.ok(Command{Op: OpPublish, Events: events(1, 2)})
	h.ok(Command{Op: OpDeadLetter, Subscription: 2, Dead: []DeadInfo{{Offset: 0}}})
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 1}})
	if got := h.s.CompactIndex(); got != 2 {
		t.Fatalf("compact index %d, want 2", got)
	}
	if r := h.ok(Command{Op: OpUnsubscribe, Subscription: 2}); r.Count != 1 {
		t.Fatalf("unsubscribe counted %d", r.Count)
	}
	if got := h.s.CompactIndex(); got != h.s.Applied()+1 {
		t.Fatalf("compact index %d: the log still holds the deleted subscription's events", got)
	}
	if r := h.ok(Command{Op: OpUnsubscribe, Subscription: 2}); r.Count != 0 {
		t.Fatal("a repeated unsubscribe counted")
	}
	for _, op := range []Op{OpAck, OpSkip, OpAttempt, OpReplayDead, OpPurgeDead} {
		h.fails(Command{Op: op, Subscription: 2, Offsets: []uint64{1}}, ErrUnknownSubscription)
	}
	h.fails(Command{Op: OpDeadLetter, Subscription: 2, Dead: []DeadInfo{{Offset: 1}}}, ErrUnknownSubscription)
	if !reflect.DeepEqual(h.s.Subscriptions(), []uint64{0}) {
		t.Fatalf("subscriptions %v, want [0]", h.s.Subscriptions())
	}
}

func TestDeletedDefaultSubscription(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Events: events(1, 2)})
	h.ok(Command{Op: OpSubscribe, Subscription: 4})
	h.ok(Command{Op: OpUnsubscribe})
	h.fails(Command{Op: OpAck, Offsets: []uint64{0}}, ErrUnknownSubscription)
	if got := h.pendingOf(4); !slices.Equal(got, []uint64{0, 1}) {
		t.Fatalf("subscription 4 lost events with the default: %v", got)
	}
	h.ok(Command{Op: OpPublish, Events: events(3)})
	// The State methods that read the default subscription see nothing.
	if st := h.stats(); st.Events != 0 || st.Acked != 0 || st.Head != 3 || h.s.Head() != 3 || !h.s.IsAcked(2) {
		t.Fatalf("deleted default subscription: %+v", st)
	}
	h.ok(Command{Op: OpAck, Subscription: 4, Offsets: []uint64{0, 1, 2}})
	// With no subscription at all, events go nowhere.
	h.ok(Command{Op: OpUnsubscribe, Subscription: 4})
	h.ok(Command{Op: OpPublish, Events: events(9)})
	if got, want := h.s.CompactIndex(), h.s.Applied()+1; got != want || len(h.s.Subscriptions()) != 0 {
		t.Fatalf("compact index %d (want %d), subscriptions %v", got, want, h.s.Subscriptions())
	}
	if err := h.s.checkSpace(1<<40, 1<<40); err != nil {
		t.Fatalf("a shard without subscriptions holds bytes: %v", err)
	}
	// The default subscription can come back, from now.
	h.ok(Command{Op: OpSubscribe, From: FromNow})
	h.ok(Command{Op: OpPublish, Events: events(5)})
	if got := h.pendingOf(0); !slices.Equal(got, []uint64{4}) {
		t.Fatalf("re-created default subscription pending %v, want [4]", got)
	}
	checkInvariants(t, h.s)
	checkInvariants(t, clone(t, h.s))
}

func TestQueueFullCountsTheSlowestSubscription(t *testing.T) {
	h := newHarness(t)
	size := events(10)[0].Size()
	limit := 2*size + size/2
	h.ok(Command{Op: OpSubscribe, Subscription: 1, From: FromNow})
	h.ok(Command{Op: OpPublish, Events: events(10, 10), MaxQueueBytes: limit})
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 1}})
	// The default subscription is done, but subscription 1 still holds
	// both events: the shard is as full as before.
	h.fails(Command{Op: OpPublish, Events: events(10), MaxQueueBytes: limit}, ErrQueueFull)
	h.ok(Command{Op: OpAck, Subscription: 1, Offsets: []uint64{0}})
	h.ok(Command{Op: OpPublish, Events: events(10), MaxQueueBytes: limit})
}

func TestUnknownSubscriptionChangesNothing(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpSubscribe, Subscription: 2})
	h.ok(Command{Op: OpPublish, Events: events(1, 2)})
	h.ok(Command{Op: OpDeadLetter, Subscription: 2, Dead: []DeadInfo{{Offset: 1}}})
	for _, c := range []Command{
		{Op: OpAck, Subscription: 3, Offsets: []uint64{0}},
		{Op: OpSkip, Subscription: 1, Offsets: []uint64{0}},
		{Op: OpAttempt, Subscription: 3, Offsets: []uint64{0}},
		{Op: OpDeadLetter, Subscription: 3, Dead: []DeadInfo{{Offset: 0}}},
		{Op: OpPurgeDead, Subscription: 3},
		{Op: OpReplayDead, Subscription: 3, Offsets: []uint64{1}, Events: events(2)},
	} {
		rejected, noop := clone(t, h.s), clone(t, h.s)
		if r := rejected.Apply(100, &c); !errors.Is(r.Err, ErrUnknownSubscription) {
			t.Errorf("%v for subscription %d: %v, want ErrUnknownSubscription", c.Op, c.Subscription, r.Err)
		}
		noop.Apply(100, nil)
		if !bytes.Equal(snapshot(t, rejected), snapshot(t, noop)) {
			t.Errorf("rejected %v changed the state", c.Op)
		}
	}
}

// randomSubscriptions drives a shard with several subscriptions through
// random commands, keeping a model of what each subscription has still to
// deliver and of its dead letters, and checks the shard against it after
// every step. TestSubscriptionsRandomly and TestSeekRandomly share it.
type randomSubscriptions struct {
	t     *testing.T
	h     *harness
	rng   *rand.Rand
	subs  []uint64
	model map[uint64]map[uint64]bool // subscription → offsets it has to deliver
	dead  map[uint64]map[uint64]bool // subscription → its dead letters
	times []int64                    // each offset's publish time
	only  map[uint64]bool            // replayed copies, one subscription's alone
}

func newRandomSubscriptions(t *testing.T, seed uint64, subs ...uint64) *randomSubscriptions {
	d := &randomSubscriptions{t: t, h: newHarness(t), rng: rand.New(rand.NewPCG(seed, seed+1)),
		model: map[uint64]map[uint64]bool{}, dead: map[uint64]map[uint64]bool{}, only: map[uint64]bool{}}
	for _, sub := range subs {
		d.add(sub)
	}
	return d
}

// add starts modelling sub, which holds nothing yet.
func (d *randomSubscriptions) add(sub uint64) {
	d.subs = append(d.subs, sub)
	d.model[sub], d.dead[sub] = map[uint64]bool{}, map[uint64]bool{}
}

// remove stops modelling sub.
func (d *randomSubscriptions) remove(sub uint64) {
	d.subs = slices.DeleteFunc(d.subs, func(s uint64) bool { return s == sub })
	delete(d.model, sub)
	delete(d.dead, sub)
}

func (d *randomSubscriptions) anySub() uint64 { return d.subs[d.rng.IntN(len(d.subs))] }

// pick returns a random third of what sub has to deliver.
func (d *randomSubscriptions) pick(sub uint64) []uint64 {
	var out []uint64
	for _, o := range slices.Sorted(maps.Keys(d.model[sub])) {
		if d.rng.IntN(3) == 0 {
			out = append(out, o)
		}
	}
	return out
}

func (d *randomSubscriptions) publish(step int) {
	n := 1 + d.rng.IntN(4)
	r := d.h.ok(Command{Op: OpPublish, Time: int64(step), Events: events(make([]int, n)...)})
	for i := range n {
		d.times = append(d.times, int64(step))
		for _, s := range d.subs {
			d.model[s][r.FirstOffset+uint64(i)] = true
		}
	}
}

// done acknowledges (OpAck) or skips (OpSkip) some of sub's events.
func (d *randomSubscriptions) done(op Op, sub uint64) {
	offs := d.pick(sub)
	d.h.ok(Command{Op: op, Subscription: sub, Offsets: offs})
	for _, o := range offs {
		delete(d.model[sub], o)
	}
}

func (d *randomSubscriptions) attempt(sub uint64) {
	d.h.ok(Command{Op: OpAttempt, Subscription: sub, Offsets: d.pick(sub)})
}

func (d *randomSubscriptions) deadLetter(step int, sub uint64) {
	var ds []DeadInfo
	for _, o := range d.pick(sub) {
		ds = append(ds, DeadInfo{Offset: o, Reason: "r"})
		delete(d.model[sub], o)
		d.dead[sub][o] = true
	}
	d.h.ok(Command{Op: OpDeadLetter, Subscription: sub, Time: int64(step), Dead: ds})
}

// replay replays up to two of sub's dead letters, as new events for it
// alone.
func (d *randomSubscriptions) replay(step int, sub uint64) {
	c, _ := d.h.s.Cursor(sub)
	dl := c.DeadLetters(0, 2)
	if len(dl) == 0 {
		return
	}
	var offs []uint64
	var evs []Event
	for _, x := range dl {
		offs = append(offs, x.Offset)
		evs = append(evs, events(0)[0])
		delete(d.dead[sub], x.Offset)
	}
	r := d.h.ok(Command{Op: OpReplayDead, Subscription: sub, Time: int64(step), Offsets: offs, Events: evs})
	for i := range offs {
		o := r.FirstOffset + uint64(i)
		d.model[sub][o] = true
		d.times = append(d.times, int64(step))
		d.only[o] = true
	}
}

func (d *randomSubscriptions) purge(sub uint64) {
	d.h.ok(Command{Op: OpPurgeDead, Subscription: sub})
	clear(d.dead[sub])
}

// step applies one random command through do, and then checks every
// cursor against the model, that a capture taken before the command kept
// its bytes, and now and then the invariants and a snapshot round trip.
func (d *randomSubscriptions) step(step int, do func()) {
	t := d.t
	capture := d.h.s.SnapshotFunc()
	want := snapshot(t, d.h.s)
	do()
	if got, _ := capture(); !bytes.Equal(got, want) {
		t.Fatalf("step %d: a capture changed with the state", step)
	}
	for _, s := range d.subs {
		if got, want := d.h.pendingOf(s), slices.Sorted(maps.Keys(d.model[s])); !slices.Equal(got, want) {
			t.Fatalf("step %d: subscription %d pending %v, model %v", step, s, got, want)
		}
		c, _ := d.h.s.Cursor(s)
		if got := len(c.DeadLetters(0, 0)); got != len(d.dead[s]) {
			t.Fatalf("step %d: subscription %d has %d dead letters, model %d", step, s, got, len(d.dead[s]))
		}
	}
	if step%50 == 0 {
		checkInvariants(t, d.h.s)
		r := clone(t, d.h.s)
		checkInvariants(t, r)
		if !bytes.Equal(snapshot(t, r), snapshot(t, d.h.s)) {
			t.Fatalf("step %d: restored state differs", step)
		}
	}
}

// TestSubscriptionsRandomly drives a shard with three subscriptions
// through random commands, checking after each one every cursor against a
// model of which offsets it has still to deliver, the shard's invariants,
// and that a snapshot, and a capture taken before the command, read back
// to the same state.
func TestSubscriptionsRandomly(t *testing.T) {
	d := newRandomSubscriptions(t, 1, 0, 3, 8)
	d.h.ok(Command{Op: OpSubscribe, Subscription: 3})
	d.h.ok(Command{Op: OpSubscribe, Subscription: 8})
	for step := range 3000 {
		sub := d.anySub()
		d.step(step, func() {
			switch op := d.rng.IntN(10); {
			case op < 3:
				d.publish(step)
			case op < 5:
				d.done(OpAck, sub)
			case op < 6:
				d.done(OpSkip, sub)
			case op < 7:
				d.attempt(sub)
			case op < 8:
				d.deadLetter(step, sub)
			case op < 9:
				d.replay(step, sub)
			default:
				d.purge(sub)
			}
		})
	}
}
