package consume

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"herald/internal/shard"
)

// fakeGroup is a shard's group held in memory: its state machine and the
// commands of its log, encoded, by index.
type fakeGroup struct {
	mu       sync.Mutex
	m        *shard.Machine
	log      map[uint64][]byte
	index    uint64
	leases   *Leases // told of applied commands, and restores, as the node's state machine does
	barriers int
	reads    int  // log entries read
	notLed   bool // ReadBarrier fails: another node leads
}

func newFakeGroup(leases *Leases) *fakeGroup {
	return &fakeGroup{m: shard.NewMachine(), log: make(map[uint64][]byte), leases: leases}
}

func (g *fakeGroup) apply(t testing.TB, cmd shard.Command) shard.Result {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.index++
	g.log[g.index] = cmd.AppendBinary(nil)
	r := g.m.ApplyDecoded(g.index, &cmd, nil)
	if r.Err != nil {
		t.Fatalf("apply %v: %v", cmd.Op, r.Err)
	}
	g.leases.Applied(&cmd, r)
	return r
}

// restore replaces the state machine with one restored from its snapshot.
func (g *fakeGroup) restore(t testing.TB) {
	t.Helper()
	g.restoreAs(t, func(data []byte) []byte { return data })
}

// restoreKeyless replaces the state machine with one restored from its
// snapshot as a release that did not record keys wrote it: version 6,
// which is version 7 without the key hashes at the end (their count, a
// varint, and four bytes each). A shard with the default subscription
// alone writes version 3, which records no keys in any release.
func (g *fakeGroup) restoreKeyless(t testing.TB) {
	t.Helper()
	m := g.restoreAs(t, func(data []byte) []byte {
		var n uint64 // the keys recorded: those of the events from some offset on
		for o := g.m.Earliest(); o < g.m.NextOffset(); o++ {
			if _, ok := g.m.KeyHashOf(o); ok {
				n = g.m.NextOffset() - o
				break
			}
		}
		switch data[0] {
		case 7:
			return append([]byte{6}, data[1:len(data)-4*int(n)-len(binary.AppendUvarint(nil, n))]...)
		case 3:
			return data
		}
		t.Fatalf("snapshot written as version %d", data[0])
		return nil
	})
	for o := m.Earliest(); o < m.NextOffset(); o++ {
		if _, ok := m.KeyHashOf(o); ok {
			t.Fatalf("a version 6 snapshot restored with the key of event %d", o)
		}
	}
}

// restoreAs replaces the state machine with one restored from its
// snapshot as rewrite makes it, and returns the new one.
func (g *fakeGroup) restoreAs(t testing.TB, rewrite func(data []byte) []byte) *shard.Machine {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	data, err := g.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	m := shard.NewMachine()
	if err := m.Restore(rewrite(data)); err != nil {
		t.Fatal(err)
	}
	g.m = m
	g.leases.Restored()
	return m
}

func (g *fakeGroup) publish(t testing.TB, keys ...string) {
	var evs []shard.Event
	for _, k := range keys {
		evs = append(evs, shard.Event{Key: k, Payload: []byte("p-" + k)})
	}
	g.apply(t, shard.Command{Op: shard.OpPublish, Time: time.Now().UnixNano(), MaxQueueBytes: 1 << 40, Events: evs})
}

func (g *fakeGroup) ack(t testing.TB, offsets ...uint64) {
	g.apply(t, shard.Command{Op: shard.OpAck, Offsets: offsets})
}

// ackIn acknowledges offsets in subscription sub.
func (g *fakeGroup) ackIn(t testing.TB, sub uint64, offsets ...uint64) {
	g.apply(t, shard.Command{Op: shard.OpAck, Subscription: sub, Offsets: offsets})
}

// subscribe starts subscription sub's cursor from the earliest event the
// shard holds.
func (g *fakeGroup) subscribe(t testing.TB, sub uint64) {
	g.apply(t, shard.Command{Op: shard.OpSubscribe, Subscription: sub})
}

func (g *fakeGroup) View(_ context.Context, f func(*shard.Machine)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g.m)
	return nil
}

var errNoEntry = errors.New("no such entry")

func (g *fakeGroup) Entry(_, index uint64) (shard.Command, error) {
	g.mu.Lock()
	data, ok := g.log[index]
	g.reads++
	g.mu.Unlock()
	if !ok {
		return shard.Command{}, errNoEntry
	}
	return shard.UnmarshalCommand(data)
}

var errNotLeader = errors.New("not the leader")

func (g *fakeGroup) ReadBarrier(context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.barriers++
	if g.notLed {
		return errNotLeader
	}
	return nil
}

func newShard() (Shard, *fakeGroup) {
	l := NewLeases(nil)
	g := newFakeGroup(l)
	return Shard{Topic: "orders", Index: 0, Group: g, Leases: l}, g
}

// sub returns the shard as subscription sub's consumers read it.
func (s Shard) sub(sub uint64) Shard {
	s.Sub = sub
	return s
}

// table returns the subscription's lease table.
func (s Shard) table() *table { return s.Leases.table(s.Sub) }

// isAcked returns whether an event is done for the subscription, as its
// cursor says now.
func (s Shard) isAcked(g *fakeGroup) func(offset uint64) bool {
	return func(o uint64) bool {
		c, ok := g.m.Cursor(s.Sub)
		return !ok || c.IsAcked(o)
	}
}

func offsets(ls []Lease) []uint64 {
	var out []uint64
	for _, l := range ls {
		out = append(out, l.Offset)
	}
	return out
}

func checkLeased(t *testing.T, s Shard, want int) {
	t.Helper()
	if n := s.Leases.Count(time.Now()); n != want {
		t.Errorf("%d events leased, want %d", n, want)
	}
}

func TestReadPendingSkipsAcknowledgedEvents(t *testing.T) {
	s, g := newShard()
	g.publish(t, "a", "b")
	g.publish(t, "c")
	g.ack(t, 1)
	evs, next, err := s.ReadPending(context.Background(), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, e := range evs {
		got = append(got, e.Offset)
	}
	if !slices.Equal(got, []uint64{0, 2}) || next != 3 || evs[1].Event.Key != "c" {
		t.Errorf("ReadPending = %v (next %d), want offsets 0 and 2, next 3, the second of key c", got, next)
	}
	evs, next, err = s.ReadPending(context.Background(), 0, 1)
	if err != nil || len(evs) != 1 || next != 1 {
		t.Errorf("ReadPending limited to 1 = %d events, next %d, %v; want 1, next 1", len(evs), next, err)
	}
}

func TestReadPendingReportsAnUnreadableEntry(t *testing.T) {
	s, g := newShard()
	g.publish(t, "a")
	delete(g.log, 1)
	if _, _, err := s.ReadPending(context.Background(), 0, 10); !errors.Is(err, errNoEntry) {
		t.Errorf("ReadPending of a lost entry: %v, want the group's error", err)
	}
}

// A fetch leases a run of each key's events, in offset order, and no
// event of a key while an earlier one of it is out; an expired lease, a
// nack or an ack lets the key's events go out again. (Before runs, a
// fetch leased one event per key: a's second waited for its first.)
func TestFetchLeasesInKeyOrder(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.publish(t, "a", "a", "b", "c")

	got, err := s.Fetch(ctx, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(offsets(got), []uint64{0, 1, 2, 3}) {
		t.Fatalf("first fetch leased %v, want 0, 1, 2, 3 (a's run is 0 and 1)", offsets(got))
	}
	if got[0].Attempt != 1 || got[0].Number == 0 || got[0].Event.Key != "a" || got[1].Number == got[0].Number {
		t.Errorf("lease %+v: want attempt 1, a number of its own, key a", got[0])
	}
	if again, _ := s.Fetch(ctx, 10, time.Minute); len(again) != 0 {
		t.Errorf("a fetch while everything is leased leased %v", offsets(again))
	}
	checkLeased(t, s, 4)

	g.ack(t, 0)
	s.Leases.Nack(0, []uint64{2}, nil)
	got, err = s.Fetch(ctx, 10, time.Minute)
	if err != nil || !slices.Equal(offsets(got), []uint64{2}) {
		t.Fatalf("after acking 0 and nacking 2, fetch leased %v, %v; want 2 (1 is still out in a's run)", offsets(got), err)
	}
	if got[0].Attempt != 2 {
		t.Errorf("a nacked event handed out again is attempt %d, want 2", got[1].Attempt)
	}

	got, err = s.Fetch(ctx, 1, time.Nanosecond)
	if err != nil || len(got) != 0 {
		t.Fatalf("fetch = %v, %v; want nothing", offsets(got), err)
	}
	g.ack(t, 1, 2, 3)
	if got, err := s.Fetch(ctx, 10, time.Minute); err != nil || len(got) != 0 {
		t.Errorf("fetch of an acknowledged shard = %v, %v", offsets(got), err)
	}
	checkLeased(t, s, 0)
}

func TestFetchHonoursMaxAndVisibility(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.publish(t, "a", "b", "c")
	got, err := s.Fetch(ctx, 2, 10*time.Millisecond)
	if err != nil || !slices.Equal(offsets(got), []uint64{0, 1}) {
		t.Fatalf("fetch of 2 = %v, %v", offsets(got), err)
	}
	time.Sleep(20 * time.Millisecond)
	got, err = s.Fetch(ctx, 10, time.Minute)
	if err != nil || !slices.Equal(offsets(got), []uint64{0, 1, 2}) {
		t.Errorf("after the leases expired, fetch = %v, %v; want all three", offsets(got), err)
	}
}

// A fetch confirms the leadership before it leases, and leases nothing
// when it cannot; an empty shard needs no confirmation.
func TestFetchConfirmsTheLeadership(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	if _, err := s.Fetch(ctx, 10, time.Minute); err != nil || g.barriers != 0 {
		t.Fatalf("fetch of an empty shard: %v, %d read barriers; want none", err, g.barriers)
	}
	g.publish(t, "a")
	g.notLed = true
	if got, err := s.Fetch(ctx, 10, time.Minute); !errors.Is(err, errNotLeader) || len(got) != 0 {
		t.Errorf("fetch on a replaced leader = %v, %v; want the barrier's error", offsets(got), err)
	}
	checkLeased(t, s, 0)
}

// An ack of a receipt acts on its own lease, or on an event no one holds;
// one whose event was handed out again since has lapsed.
func TestHoldForAck(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.publish(t, "a", "b", "c")
	got, err := s.Fetch(ctx, 10, time.Minute)
	if err != nil || len(got) != 3 {
		t.Fatalf("fetch = %v, %v", offsets(got), err)
	}
	now := time.Now()
	held, fresh, lapsed := s.Leases.HoldForAck(0, []uint64{0, 1, 2}, []uint64{got[0].Number, got[1].Number + 100, got[2].Number}, now)
	if !slices.Equal(held, []uint64{0, 2}) || len(fresh) != 0 || !slices.Equal(lapsed, []int{1}) {
		t.Errorf("HoldForAck = held %v, fresh %v, lapsed %v; want 0 and 2 held as their own, 1 lapsed", held, fresh, lapsed)
	}
	s.Leases.Nack(0, []uint64{1}, []uint64{got[1].Number + 100}) // another lease's receipt: no effect
	if n := s.Leases.Count(now); n != 3 {
		t.Errorf("a nack of another lease's receipt ended a lease: %d leased, want 3", n)
	}
	held, fresh, lapsed = s.Leases.HoldForAck(0, []uint64{7}, []uint64{42}, now)
	if !slices.Equal(held, []uint64{7}) || !slices.Equal(fresh, []uint64{7}) || len(lapsed) != 0 {
		t.Errorf("HoldForAck of an event no one holds = held %v, fresh %v, lapsed %v; want it held, fresh", held, fresh, lapsed)
	}
	// The first ack of a subscription makes its table, after taking its
	// now: that now holds no lease either.
	before := time.Now()
	held, fresh, lapsed = s.Leases.HoldForAck(9, []uint64{0}, []uint64{42}, before)
	if !slices.Equal(held, []uint64{0}) || !slices.Equal(fresh, []uint64{0}) || len(lapsed) != 0 {
		t.Errorf("HoldForAck making its table = held %v, fresh %v, lapsed %v; want it held, fresh", held, fresh, lapsed)
	}
}

func TestAckedNow(t *testing.T) {
	s, g := newShard()
	g.publish(t, "a", "b")
	pending, _, err := s.ReadPending(context.Background(), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	g.ack(t, 1)
	acked, err := s.AckedNow(context.Background(), pending)
	if err != nil || len(acked) != 1 || !acked[1] {
		t.Errorf("AckedNow = %v, %v; want offset 1 alone", acked, err)
	}
}

// Two subscriptions of one shard each get every event: one's leases do
// not hide the events from the other, nor hold its keys back.
func TestSubscriptionsLeaseIndependently(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.subscribe(t, 7)
	g.publish(t, "a", "a", "b")
	def, other := s, s.sub(7)

	got, err := def.Fetch(ctx, 10, time.Hour)
	if err != nil || !slices.Equal(offsets(got), []uint64{0, 1, 2}) {
		t.Fatalf("default fetch = %v, %v; want 0, 1, 2", offsets(got), err)
	}
	got7, err := other.Fetch(ctx, 10, time.Hour)
	if err != nil || !slices.Equal(offsets(got7), []uint64{0, 1, 2}) {
		t.Fatalf("fetch of subscription 7 while the default one holds 0, 1 and 2 = %v, %v; want them as well", offsets(got7), err)
	}
	if n := def.Leases.Count(time.Now()); n != 6 {
		t.Errorf("%d events leased in all, want 6 (3 per subscription)", n)
	}

	// A nack, by a receipt of one subscription, ends only that one's
	// leases (of 0 and of 1, the rest of its run), even when the numbers
	// meet.
	def.Leases.Nack(7, []uint64{0}, []uint64{got7[0].Number})
	if again, _ := def.Fetch(ctx, 10, time.Hour); len(again) != 0 {
		t.Errorf("a nack in subscription 7 let the default one fetch %v", offsets(again))
	}
	if again, _ := other.Fetch(ctx, 10, time.Hour); !slices.Equal(offsets(again), []uint64{0, 1}) {
		t.Errorf("after its nack, subscription 7 fetched %v, want 0, 1", offsets(again))
	}
}

// An ack in one subscription is done for it alone: the other still has
// the event, leased or not.
func TestSubscriptionsAckIndependently(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.subscribe(t, 7)
	g.publish(t, "a", "a")
	def, other := s, s.sub(7)
	// Fetches of one event each: a fetch of more would lease a's run.
	if _, err := def.Fetch(ctx, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	got7, err := other.Fetch(ctx, 1, time.Hour)
	if err != nil || !slices.Equal(offsets(got7), []uint64{0}) {
		t.Fatalf("fetch of subscription 7 = %v, %v; want 0", offsets(got7), err)
	}

	held, _, lapsed := def.Leases.HoldForAck(7, []uint64{0}, []uint64{got7[0].Number}, time.Now())
	if !slices.Equal(held, []uint64{0}) || len(lapsed) != 0 {
		t.Fatalf("HoldForAck in 7 of its own receipt = held %v, lapsed %v", held, lapsed)
	}
	g.ackIn(t, 7, held...)
	if got, err := other.Fetch(ctx, 10, time.Hour); err != nil || !slices.Equal(offsets(got), []uint64{1}) {
		t.Errorf("after its ack of 0, subscription 7 fetched %v, %v; want 1", offsets(got), err)
	}
	if got, err := def.Fetch(ctx, 10, time.Hour); err != nil || len(got) != 0 {
		t.Errorf("the default subscription, holding 0, fetched %v, %v; want nothing", offsets(got), err)
	}
	pending, _, err := def.ReadPending(ctx, 0, 10)
	if err != nil || !slices.Equal(offsets2(pending), []uint64{0, 1}) {
		t.Errorf("the default subscription's pending events = %v, %v; want 0 and 1", offsets2(pending), err)
	}
	acked, err := other.AckedNow(ctx, pending)
	if err != nil || !acked[0] || acked[1] {
		t.Errorf("AckedNow in subscription 7 = %v, %v; want 0 alone", acked, err)
	}
}

// A subscription whose cursor the shard does not hold has nothing to
// read; once its cursor ends, its leases go with it.
func TestSubscriptionWithoutCursor(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.publish(t, "a")
	other := s.sub(9)
	if got, err := other.Fetch(ctx, 10, time.Hour); err != nil || len(got) != 0 {
		t.Errorf("fetch of a subscription without a cursor = %v, %v; want nothing", offsets(got), err)
	}
	if evs, next, err := other.ReadPending(ctx, 0, 10); !errors.Is(err, ErrNoCursor) || len(evs) != 0 || next != 0 {
		t.Errorf("ReadPending of a subscription without a cursor = %d events, next %d, %v; want none, 0, ErrNoCursor", len(evs), next, err)
	}

	g.subscribe(t, 9)
	if got, err := other.Fetch(ctx, 10, time.Hour); err != nil || !slices.Equal(offsets(got), []uint64{0}) {
		t.Fatalf("fetch once the cursor started = %v, %v; want 0", offsets(got), err)
	}
	g.apply(t, shard.Command{Op: shard.OpUnsubscribe, Subscription: 9})
	if s.Leases.existing(9) != nil {
		t.Error("the leases of a subscription whose cursor ended are kept")
	}
	checkLeased(t, s, 0)
}

// Applied ends the leases of what an ack, a skip or a dead letter made
// done, in its subscription alone; a cursor that starts or ends takes its
// table with it, but a repeated subscribe, which changes nothing, does not.
func TestApplied(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.subscribe(t, 7)
	g.publish(t, "a", "b", "c")
	if _, err := s.Fetch(ctx, 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	other := s.sub(7)
	if _, err := other.Fetch(ctx, 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	g.apply(t, shard.Command{Op: shard.OpSkip, Subscription: 7, Offsets: []uint64{0}})
	g.apply(t, shard.Command{Op: shard.OpDeadLetter, Subscription: 7, Time: 1, Dead: []shard.DeadInfo{{Offset: 1, Reason: "test"}}})
	if n, m := s.table().count(time.Now()), other.table().count(time.Now()); n != 3 || m != 1 {
		t.Errorf("after a skip and a dead letter in 7: %d leased in the default subscription, %d in 7; want 3 and 1", n, m)
	}
	g.subscribe(t, 7) // again: changes nothing
	if s.Leases.existing(7) == nil {
		t.Error("a repeated subscribe dropped the subscription's leases")
	}
	// A rejected command changes nothing either.
	s.Leases.Applied(&shard.Command{Op: shard.OpAck, Subscription: 7, Offsets: []uint64{2}}, shard.Result{Err: shard.ErrUnknownOffset})
	if m := other.table().count(time.Now()); m != 1 {
		t.Errorf("a rejected ack ended a lease: %d leased in 7, want 1", m)
	}
}

// A seek drops the subscription's table: its leases end, and the next
// fetch hands out the events the seek made pending again, in order.
func TestSeekDropsLeases(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.apply(t, shard.Command{Op: shard.OpRetain, OlderThan: 0})
	g.publish(t, "a", "b", "c")
	if got, err := s.Fetch(ctx, 10, time.Hour); err != nil || len(got) != 3 {
		t.Fatalf("fetch = %v, %v; want 3 events", offsets(got), err)
	}
	g.ack(t, 0, 1)
	seeks, sought := s.Leases.Seeks(0)
	others, otherSought := s.Leases.Seeks(7)
	g.apply(t, shard.Command{Op: shard.OpSeek, From: 0})
	if s.Leases.existing(0) != nil {
		t.Error("a seek kept the subscription's leases")
	}
	if n, _ := s.Leases.Seeks(0); n == seeks {
		t.Error("Seeks did not change for the subscription sought")
	}
	if n, _ := s.Leases.Seeks(7); n != others {
		t.Error("Seeks changed for another subscription")
	}
	select {
	case <-sought:
	default:
		t.Error("the channel Seeks returned was not closed by the seek")
	}
	select {
	case <-otherSought:
		t.Error("another subscription's channel was closed by the seek")
	default:
	}
	if got, err := s.Fetch(ctx, 10, time.Hour); err != nil || !slices.Equal(offsets(got), []uint64{0, 1, 2}) {
		t.Errorf("fetch after the seek = %v, %v; want 0 1 2", offsets(got), err)
	}
}

// DropIdle forgets the tables without live leases, and keeps the others.
func TestDropIdle(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.subscribe(t, 7)
	g.publish(t, "a")
	if _, err := s.Fetch(ctx, 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	other := s.sub(7)
	if _, err := other.Fetch(ctx, 10, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	s.Leases.DropIdle(time.Now())
	if s.Leases.existing(0) == nil || s.Leases.existing(7) != nil {
		t.Errorf("after DropIdle: default table kept %v, 7's kept %v; want the default one alone, which holds a lease",
			s.Leases.existing(0) != nil, s.Leases.existing(7) != nil)
	}
	if got, err := other.Fetch(ctx, 10, time.Hour); err != nil || !slices.Equal(offsets(got), []uint64{0}) {
		t.Errorf("fetch of 7 after its table was dropped = %v, %v; want 0", offsets(got), err)
	}
}

// A fetch costs what it hands out in each subscription: one subscription
// far behind another does not make the other's fetches read its backlog,
// and its own index it without reading the log: the shard records each
// event's key.
func TestFetchCostIsPerSubscription(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	g.subscribe(t, 7)
	const backlog = 3000
	for i := range backlog {
		g.publish(t, fmt.Sprint("k", i))
	}
	def, other := s, s.sub(7)
	for {
		got, err := def.Fetch(ctx, 1000, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		g.ack(t, offsets(got)...)
	}

	reads := func(f func()) int {
		g.mu.Lock()
		before := g.reads
		g.mu.Unlock()
		f()
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.reads - before
	}
	fetch := func(s Shard, want int) {
		t.Helper()
		if got, err := s.Fetch(ctx, 10, time.Hour); err != nil || len(got) != want {
			t.Fatalf("fetch of subscription %d = %d events, %v; want %d", s.Sub, len(got), err, want)
		}
	}
	g.publish(t, "new")
	if n := reads(func() { fetch(def, 1) }); n > 1 {
		t.Errorf("the default subscription, drained, read %d log entries to fetch the one new event; want 1 at most (hand it out)", n)
	}
	if n := reads(func() { fetch(other, 10) }); n > 10 {
		t.Errorf("subscription 7 read %d log entries to index its backlog of %d and fetch 10 events; want 10 at most", n, backlog+1)
	}
	if n := reads(func() { fetch(other, 10) }); n > 10 {
		t.Errorf("subscription 7, indexed, read %d log entries to fetch 10 events; want 10 at most", n)
	}
}

// Events of a snapshot that did not record keys (written by an older
// release) are indexed by their keys all the same, read from the log, and
// go out in order per key, before and after the events appended since,
// whose keys the shard records.
func TestFetchKeysOfOldSnapshot(t *testing.T) {
	ctx := context.Background()
	s, g := newShard()
	for i := range 60 {
		g.publish(t, fmt.Sprint("k", i%3), fmt.Sprint("k", i%3))
	}
	g.ack(t, 0, 1, 5)
	g.restoreKeyless(t)
	for i := range 30 {
		g.publish(t, fmt.Sprint("k", i%4))
	}
	got := make(map[string][]uint64) // offsets handed out, by key
	var all []uint64
	for {
		leases, err := s.Fetch(ctx, 7, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(leases) == 0 {
			break
		}
		checkIndex(t, s, g)
		for _, l := range leases {
			got[l.Event.Key] = append(got[l.Event.Key], l.Offset)
			all = append(all, l.Offset)
		}
		g.ack(t, offsets(leases)...)
	}
	if len(all) != 120-3+30 {
		t.Fatalf("%d events handed out, want %d", len(all), 120-3+30)
	}
	for key, offs := range got {
		if !slices.IsSorted(offs) {
			t.Errorf("key %s handed out out of order: %v", key, offs)
		}
	}
}
