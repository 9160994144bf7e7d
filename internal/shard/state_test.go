package shard

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// harness applies commands to a State at consecutive log indexes.
type harness struct {
	t     *testing.T
	s     *State
	index uint64
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return &harness{t: t, s: New()}
}

func (h *harness) apply(c Command) Result {
	h.index++
	return h.s.Apply(h.index, &c)
}

// ok applies c and fails the test if it is rejected.
func (h *harness) ok(c Command) Result {
	h.t.Helper()
	r := h.apply(c)
	if r.Err != nil {
		h.t.Fatalf("apply %v at index %d: %v", c.Op, h.index, r.Err)
	}
	return r
}

// fails applies c and fails the test unless it is rejected with want.
func (h *harness) fails(c Command, want error) {
	h.t.Helper()
	r := h.apply(c)
	if !errors.Is(r.Err, want) {
		h.t.Fatalf("apply %v at index %d: got error %v, want %v", c.Op, h.index, r.Err, want)
	}
	if !reflect.DeepEqual(r, Result{Err: r.Err}) {
		h.t.Fatalf("rejected %v returned %+v, want only Err", c.Op, r)
	}
}

func (h *harness) stats() Stats { return h.s.Stats() }

// events returns events whose sizes are the given numbers of payload bytes.
func events(sizes ...int) []Event {
	es := make([]Event, len(sizes))
	for i, n := range sizes {
		es[i] = Event{Payload: bytes.Repeat([]byte{byte('a' + i%26)}, n)}
	}
	return es
}

func snapshot(t *testing.T, s *State) []byte {
	t.Helper()
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatalf("MarshalBinary: %v", err)
	}
	return b
}

// keyless returns s as a state restored from a snapshot written before
// keys were recorded (version 6 or earlier) would have it: with no key
// hashes. It changes s.
func keyless(s *State) *State {
	s.keys, s.keysFrom = keyList{}, s.nextOffset
	return s
}

func clone(t *testing.T, s *State) *State {
	t.Helper()
	var c State
	if err := c.UnmarshalBinary(snapshot(t, s)); err != nil {
		t.Fatalf("UnmarshalBinary: %v", err)
	}
	return &c
}

func TestEventSize(t *testing.T) {
	tests := []struct {
		e    Event
		want int64
	}{
		{Event{}, 0},
		{Event{Key: "abc"}, 3},
		{Event{Payload: make([]byte, 1024)}, 1024},
		{Event{Key: "k", Payload: []byte("pp"), Headers: []Header{{"n", "vvv"}, {"", ""}, {"nn", ""}}}, 1 + 2 + 4 + 0 + 2},
	}
	for _, tt := range tests {
		if got := tt.e.Size(); got != tt.want {
			t.Errorf("%+v.Size() = %d, want %d", tt.e, got, tt.want)
		}
	}
}

func TestReserve(t *testing.T) {
	h := newHarness(t)
	for want := uint64(1); want <= 3; want++ {
		r := h.ok(Command{Op: OpReserve, Time: int64(100 * want), Bytes: 10, Count: int(want)})
		if r.ReservationID != want {
			t.Fatalf("reservation id = %d, want %d", r.ReservationID, want)
		}
	}
	got, ok := h.s.Reservation(2)
	if want := (Reservation{ID: 2, Bytes: 10, Count: 2, Time: 200}); !ok || got != want {
		t.Errorf("Reservation(2) = %+v, %v; want %+v, true", got, ok, want)
	}
	if _, ok := h.s.Reservation(4); ok {
		t.Error("Reservation(4) found a reservation that was never made")
	}
	if st := h.stats(); st.ReservedBytes != 30 || st.Reservations != 3 {
		t.Errorf("stats = %+v, want 30 reserved bytes in 3 reservations", st)
	}
}

func TestReserveInvalid(t *testing.T) {
	h := newHarness(t)
	h.fails(Command{Op: OpReserve, Bytes: -1}, ErrInvalidCommand)
	h.fails(Command{Op: OpReserve, Bytes: 1, Count: -1}, ErrInvalidCommand)
	h.fails(Command{Op: OpReserve, Bytes: 1, MaxQueueBytes: -1}, ErrInvalidCommand)
	// Rejections consume no reservation ids.
	if r := h.ok(Command{Op: OpReserve}); r.ReservationID != 1 {
		t.Errorf("first successful reservation got id %d, want 1", r.ReservationID)
	}
}

func TestQueueFull(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Events: events(60), MaxQueueBytes: 100})
	h.ok(Command{Op: OpReserve, Bytes: 30, MaxQueueBytes: 100})
	// 60 pending + 30 reserved: 10 bytes are left.
	h.fails(Command{Op: OpReserve, Bytes: 11, MaxQueueBytes: 100}, ErrQueueFull)
	h.fails(Command{Op: OpPublish, Events: events(5, 6), MaxQueueBytes: 100}, ErrQueueFull)
	// An unlimited queue, or a higher limit carried by the command, admits it.
	h.ok(Command{Op: OpReserve, Bytes: 11})
	h.ok(Command{Op: OpReserve, Bytes: 11, MaxQueueBytes: 200})
	// Exactly filling the queue is allowed.
	h2 := newHarness(t)
	h2.ok(Command{Op: OpReserve, Bytes: 40, MaxQueueBytes: 100})
	h2.ok(Command{Op: OpPublish, Events: events(60), MaxQueueBytes: 100})
	h2.fails(Command{Op: OpPublish, Events: events(1), MaxQueueBytes: 100}, ErrQueueFull)
	// The limit is on bytes, so empty events still fit in a full queue.
	h2.ok(Command{Op: OpPublish, Events: events(0, 0), MaxQueueBytes: 100})
}

func TestQueueFullMessage(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpReserve, Bytes: 7})
	r := h.apply(Command{Op: OpPublish, Events: events(5), MaxQueueBytes: 10})
	if !errors.Is(r.Err, ErrQueueFull) {
		t.Fatalf("got %v, want ErrQueueFull", r.Err)
	}
	msg := r.Err.Error()
	for _, want := range []string{"shard queue is full", "0 pending", "7 reserved", "5 requested", "max_queue_bytes 10", "retry later or raise max_queue_bytes"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
}

func TestByteOverflow(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpReserve, Bytes: math.MaxInt64 - 10})
	h.ok(Command{Op: OpPublish, Events: events(10)})
	h.fails(Command{Op: OpReserve, Bytes: 1}, ErrInvalidCommand)
	h.fails(Command{Op: OpPublish, Events: events(1)}, ErrInvalidCommand)
	// With a limit, the same request is simply too big.
	h.fails(Command{Op: OpReserve, Bytes: 1, MaxQueueBytes: math.MaxInt64}, ErrQueueFull)
	if st := h.stats(); st.ReservedBytes != math.MaxInt64-10 || st.Bytes != 10 {
		t.Errorf("stats = %+v after rejected overflows", st)
	}
}

func TestCommit(t *testing.T) {
	h := newHarness(t)
	id := h.ok(Command{Op: OpReserve, Time: 5, Bytes: 100, Count: 3, MaxQueueBytes: 100}).ReservationID
	r := h.ok(Command{Op: OpCommit, Time: 9, ReservationID: id, Events: events(10, 20)})
	if r.FirstOffset != 0 || r.Count != 2 {
		t.Errorf("commit result = %+v, want offsets 0..1", r)
	}
	want := Stats{Events: 2, Bytes: 30, OldestEventTime: 9, Published: 2, NextOffset: 2}
	if st := h.stats(); st != want {
		t.Errorf("stats = %+v, want %+v", st, want)
	}
	if _, ok := h.s.Reservation(id); ok {
		t.Error("reservation still held after commit")
	}
	// Committing twice is an error: the reservation is gone.
	h.fails(Command{Op: OpCommit, ReservationID: id, Events: events(1)}, ErrUnknownReservation)
	h.fails(Command{Op: OpCommit, ReservationID: 99, Events: events(1)}, ErrUnknownReservation)

	// Offsets continue densely from earlier appends.
	h.ok(Command{Op: OpPublish, Events: events(1, 1, 1)})
	id = h.ok(Command{Op: OpReserve, Bytes: 5}).ReservationID
	if r := h.ok(Command{Op: OpCommit, ReservationID: id, Events: events(1, 1, 1, 1, 1)}); r.FirstOffset != 5 || r.Count != 5 {
		t.Errorf("commit result = %+v, want offsets 5..9", r)
	}
}

func TestCommitTooSmall(t *testing.T) {
	h := newHarness(t)
	id := h.ok(Command{Op: OpReserve, Bytes: 10, Count: 2}).ReservationID
	h.fails(Command{Op: OpCommit, ReservationID: id, Events: events(6, 5)}, ErrReservationTooSmall)
	h.fails(Command{Op: OpCommit, ReservationID: id, Events: events(1, 1, 1)}, ErrReservationTooSmall)
	h.fails(Command{Op: OpCommit, ReservationID: id}, ErrInvalidCommand)
	// The rejections left the reservation in place.
	if st := h.stats(); st.Reservations != 1 || st.ReservedBytes != 10 || st.Events != 0 {
		t.Fatalf("stats = %+v after rejected commits", st)
	}
	// Using less than was reserved releases the rest.
	h.ok(Command{Op: OpCommit, ReservationID: id, Events: events(4)})
	if st := h.stats(); st.Reservations != 0 || st.ReservedBytes != 0 || st.Bytes != 4 {
		t.Fatalf("stats = %+v after commit", st)
	}
	// Count 0 allows any number of events.
	id = h.ok(Command{Op: OpReserve, Bytes: 10}).ReservationID
	h.ok(Command{Op: OpCommit, ReservationID: id, Events: events(1, 1, 1, 1, 1, 1, 1, 1, 1, 1)})
}

func TestAbort(t *testing.T) {
	h := newHarness(t)
	a := h.ok(Command{Op: OpReserve, Bytes: 10}).ReservationID
	b := h.ok(Command{Op: OpReserve, Bytes: 20}).ReservationID
	if r := h.ok(Command{Op: OpAbort, ReservationID: a}); r.Count != 1 {
		t.Errorf("abort count = %d, want 1", r.Count)
	}
	// Idempotent: aborting again, or an id never made, is not an error.
	for _, id := range []uint64{a, 0, 77} {
		if r := h.ok(Command{Op: OpAbort, ReservationID: id}); r.Count != 0 {
			t.Errorf("abort of absent %d: count = %d, want 0", id, r.Count)
		}
	}
	if st := h.stats(); st.Reservations != 1 || st.ReservedBytes != 20 {
		t.Errorf("stats = %+v, want only reservation %d", st, b)
	}
	h.fails(Command{Op: OpCommit, ReservationID: a, Events: events(1)}, ErrUnknownReservation)
}

func TestPublish(t *testing.T) {
	h := newHarness(t)
	for i, n := range []int{3, 1, 2} {
		sizes := make([]int, n)
		r := h.ok(Command{Op: OpPublish, Time: int64(i + 1), Events: events(sizes...)})
		if want := uint64([]int{0, 3, 4}[i]); r.FirstOffset != want || r.Count != n {
			t.Errorf("publish %d: result %+v, want first offset %d, count %d", i, r, want, n)
		}
	}
	h.fails(Command{Op: OpPublish}, ErrInvalidCommand)
	h.fails(Command{Op: OpPublish, Events: []Event{}}, ErrInvalidCommand)
	h.fails(Command{Op: OpPublish, Events: events(1), MaxQueueBytes: -5}, ErrInvalidCommand)
	want := Stats{Events: 6, OldestEventTime: 1, Published: 6, NextOffset: 6}
	if st := h.stats(); st != want {
		t.Errorf("stats = %+v, want %+v", st, want)
	}
}

func TestAck(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Time: 10, Events: events(1, 2, 3)})    // offsets 0-2
	h.ok(Command{Op: OpPublish, Time: 20, Events: events(4, 5)})       // offsets 3-4
	h.ok(Command{Op: OpPublish, Time: 30, Events: events(6, 7, 8, 9)}) // offsets 5-8

	steps := []struct {
		offsets []uint64
		count   int
		head    uint64
		bytes   int64
		oldest  int64
	}{
		{[]uint64{1, 2}, 2, 0, 40, 10},    // out of order: head stays at 0
		{[]uint64{4, 4, 2}, 1, 0, 35, 10}, // duplicates count once
		{[]uint64{0}, 1, 3, 34, 20},       // prefix 0-2 done: head jumps to 3
		{[]uint64{0, 1, 2}, 0, 3, 34, 20}, // below the head: ignored
		{nil, 0, 3, 34, 20},               // nothing
		{[]uint64{8, 6, 3}, 3, 5, 14, 30}, // 3, 4 done: head 5, into the last run
		{[]uint64{7, 5}, 2, 9, 0, 0},      // everything done
		{[]uint64{8, 0, 5}, 0, 9, 0, 0},   // all ignored
	}
	var acked uint64
	for i, st := range steps {
		r := h.ok(Command{Op: OpAck, Offsets: st.offsets})
		acked += uint64(r.Count)
		got := h.stats()
		if r.Count != st.count || got.Head != st.head || h.s.Head() != st.head || got.Bytes != st.bytes || got.OldestEventTime != st.oldest {
			t.Errorf("step %d: ack %v: count %d, stats %+v; want count %d, head %d, bytes %d, oldest %d",
				i, st.offsets, r.Count, got, st.count, st.head, st.bytes, st.oldest)
		}
		if got.Acked != acked || got.Events != int64(9-acked) || got.Published != 9 {
			t.Errorf("step %d: stats %+v, want %d acked of 9", i, got, acked)
		}
	}
}

func TestAckIsAcked(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Events: events(1, 1, 1, 1)})
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 2}})
	for o, want := range []bool{true, false, true, false, false, false} {
		if got := h.s.IsAcked(uint64(o)); got != want {
			t.Errorf("IsAcked(%d) = %v, want %v", o, got, want)
		}
	}
}

func TestAckUnknownOffset(t *testing.T) {
	h := newHarness(t)
	h.fails(Command{Op: OpAck, Offsets: []uint64{0}}, ErrUnknownOffset)
	h.ok(Command{Op: OpPublish, Events: events(1, 1, 1)})
	before := snapshot(t, h.s)
	r := h.apply(Command{Op: OpAck, Offsets: []uint64{0, 1, 3, 2}})
	if !errors.Is(r.Err, ErrUnknownOffset) || !strings.Contains(r.Err.Error(), "offset 3") {
		t.Fatalf("ack of offset 3 of 3: got %v, want ErrUnknownOffset naming offset 3", r.Err)
	}
	// Nothing was acked, not even the valid offsets before the bad one.
	after := clone(t, h.s)
	after.applied = 2
	if !bytes.Equal(snapshot(t, after), before) {
		t.Error("rejected ack changed the state")
	}
}

func TestExpire(t *testing.T) {
	h := newHarness(t)
	for _, tm := range []int64{10, 20, 30, 40} {
		h.ok(Command{Op: OpReserve, Time: tm, Bytes: tm})
	}
	tests := []struct {
		olderThan int64
		count     int
		left      int
		bytes     int64
	}{
		{5, 0, 4, 100},
		{20, 1, 3, 90}, // strictly older: 20 stays
		{21, 1, 2, 70},
		{21, 0, 2, 70},
		{math.MaxInt64, 2, 0, 0},
	}
	for _, tt := range tests {
		r := h.ok(Command{Op: OpExpire, OlderThan: tt.olderThan})
		st := h.stats()
		if r.Count != tt.count || st.Reservations != tt.left || st.ReservedBytes != tt.bytes {
			t.Errorf("expire older than %d: count %d, stats %+v; want count %d, %d left holding %d bytes",
				tt.olderThan, r.Count, st, tt.count, tt.left, tt.bytes)
		}
	}
	// Expired reservations cannot be committed, and aborting them is fine.
	h.fails(Command{Op: OpCommit, ReservationID: 1, Events: events(1)}, ErrUnknownReservation)
	h.ok(Command{Op: OpAbort, ReservationID: 1})
}

func TestApplyIndex(t *testing.T) {
	s := New()
	if r := s.Apply(5, &Command{Op: OpPublish, Events: events(1)}); r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, index := range []uint64{0, 4, 5} {
		r := s.Apply(index, &Command{Op: OpPublish, Events: events(1)})
		if !errors.Is(r.Err, ErrInvalidCommand) {
			t.Errorf("Apply at stale index %d: got %v, want ErrInvalidCommand", index, r.Err)
		}
		if s.Applied() != 5 || s.NextOffset() != 1 {
			t.Errorf("Apply at stale index %d changed the state: applied %d, next offset %d", index, s.Applied(), s.NextOffset())
		}
	}
	// Gaps are fine: other entries may not be shard commands.
	if r := s.Apply(9, &Command{Op: OpPublish, Events: events(1)}); r.Err != nil {
		t.Fatal(r.Err)
	}
	// A rejected command still counts as applied.
	if r := s.Apply(10, &Command{Op: 0}); !errors.Is(r.Err, ErrInvalidCommand) || s.Applied() != 10 {
		t.Errorf("op 0: got %v, applied %d; want ErrInvalidCommand, applied 10", r.Err, s.Applied())
	}
	if r := s.Apply(11, &Command{Op: 200}); !errors.Is(r.Err, ErrInvalidCommand) || s.Applied() != 11 {
		t.Errorf("op 200: got %v, applied %d; want ErrInvalidCommand, applied 11", r.Err, s.Applied())
	}
	// A nil command is a no-op.
	if r := s.Apply(12, nil); !reflect.DeepEqual(r, Result{}) || s.Applied() != 12 || s.NextOffset() != 2 {
		t.Errorf("nil command: got %+v, applied %d, next offset %d", r, s.Applied(), s.NextOffset())
	}
}

// TestRejectedCommandsChangeNothing checks each kind of rejection against a
// copy of the state that applied a no-op at the same index instead.
func TestRejectedCommandsChangeNothing(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Time: 1, Events: events(10, 10)})
	h.ok(Command{Op: OpReserve, Time: 2, Bytes: 10, Count: 1})
	h.ok(Command{Op: OpAck, Offsets: []uint64{1}})
	h.ok(Command{Op: OpPublish, Time: 3, Events: events(5, 6, 7)}) // offsets 2-4
	h.ok(Command{Op: OpAttempt, Offsets: []uint64{2, 0}})
	h.ok(Command{Op: OpDeadLetter, Time: 4, Dead: []DeadInfo{{Offset: 2}, {Offset: 3}}})
	base := snapshot(t, h.s)

	tests := []struct {
		cmd  Command
		want error
	}{
		{Command{Op: OpReserve, Bytes: 43, MaxQueueBytes: 80}, ErrQueueFull}, // 10 + 7 pending, 10 reserved, 11 dead: 42 free
		{Command{Op: OpReserve, Bytes: -1}, ErrInvalidCommand},
		{Command{Op: OpReserve, Count: -1}, ErrInvalidCommand},
		{Command{Op: OpReserve, MaxQueueBytes: -1}, ErrInvalidCommand},
		{Command{Op: OpCommit, ReservationID: 1, Events: events(11)}, ErrReservationTooSmall},
		{Command{Op: OpCommit, ReservationID: 1, Events: events(1, 1)}, ErrReservationTooSmall},
		{Command{Op: OpCommit, ReservationID: 2, Events: events(1)}, ErrUnknownReservation},
		{Command{Op: OpCommit, ReservationID: 1}, ErrInvalidCommand},
		{Command{Op: OpPublish, Events: events(40, 3), MaxQueueBytes: 80}, ErrQueueFull},
		{Command{Op: OpPublish}, ErrInvalidCommand},
		{Command{Op: OpPublish, Events: events(1), MaxQueueBytes: -1}, ErrInvalidCommand},
		{Command{Op: OpAck, Offsets: []uint64{0, 5}}, ErrUnknownOffset},
		{Command{Op: OpReplayDead, Offsets: []uint64{2, 3}, Events: events(5)}, ErrInvalidCommand},
		{Command{Op: OpReplayDead, Offsets: []uint64{2}}, ErrInvalidCommand},
		{Command{Op: OpReplayDead, Events: events(5)}, ErrInvalidCommand},
		{Command{Op: OpReplayDead, Offsets: []uint64{2, 4}, Events: events(5, 7)}, ErrUnknownOffset},  // 4 is pending
		{Command{Op: OpReplayDead, Offsets: []uint64{2, 1}, Events: events(5, 10)}, ErrUnknownOffset}, // 1 is acked
		{Command{Op: OpReplayDead, Offsets: []uint64{5}, Events: events(0)}, ErrUnknownOffset},        // never assigned
		{Command{Op: OpReplayDead, Offsets: []uint64{3, 2}, Events: events(6, 5)}, ErrInvalidCommand}, // out of order
		{Command{Op: OpReplayDead, Offsets: []uint64{2, 2}, Events: events(5, 5)}, ErrInvalidCommand}, // twice
		{Command{Op: OpReplayDead, Offsets: []uint64{2, 3}, Events: events(5, 7)}, ErrInvalidCommand}, // not a copy
		{Command{Op: 0}, ErrInvalidCommand},
		{Command{Op: OpTierAdvance + 1}, ErrInvalidCommand},
	}
	for _, tt := range tests {
		rejected, noop := clone(t, h.s), clone(t, h.s)
		r := rejected.Apply(100, &tt.cmd)
		if !errors.Is(r.Err, tt.want) {
			t.Errorf("%+v: got %v, want %v", tt.cmd, r.Err, tt.want)
			continue
		}
		noop.Apply(100, nil)
		if !bytes.Equal(snapshot(t, rejected), snapshot(t, noop)) {
			t.Errorf("%+v: rejected command changed the state", tt.cmd)
		}
	}
	if !bytes.Equal(snapshot(t, h.s), base) {
		t.Error("clones share state with the original")
	}
}

func TestLocate(t *testing.T) {
	h := newHarness(t)
	h.index = 10
	h.ok(Command{Op: OpPublish, Events: events(1, 1, 1)}) // index 11: offsets 0-2
	h.apply(Command{Op: OpPublish})                       // index 12: rejected
	id := h.ok(Command{Op: OpReserve, Bytes: 10}).ReservationID
	h.ok(Command{Op: OpPublish, Events: events(1)})                            // index 14: offset 3
	h.ok(Command{Op: OpCommit, ReservationID: id, Events: events(1, 1, 1, 1)}) // index 15: offsets 4-7

	type loc struct {
		index uint64
		slot  int
		ok    bool
	}
	check := func(want []loc) {
		t.Helper()
		for o, w := range want {
			index, slot, ok := h.s.Locate(uint64(o))
			if got := (loc{index, slot, ok}); got != w {
				t.Errorf("Locate(%d) = %+v, want %+v", o, got, w)
			}
		}
	}
	check([]loc{
		{11, 0, true}, {11, 1, true}, {11, 2, true},
		{14, 0, true},
		{15, 0, true}, {15, 1, true}, {15, 2, true}, {15, 3, true},
		{}, {},
	})
	// Acking out of order keeps events locatable; passing the head does not.
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 1, 2, 3, 5}})
	check([]loc{
		{}, {}, {}, {},
		{15, 0, true}, {15, 1, true}, {15, 2, true}, {15, 3, true},
		{},
	})
}

func TestCompactIndex(t *testing.T) {
	h := newHarness(t)
	if got := h.s.CompactIndex(); got != 1 {
		t.Errorf("empty shard: CompactIndex = %d, want 1", got)
	}
	h.ok(Command{Op: OpPublish, Events: events(1, 1)}) // 1: offsets 0-1
	h.ok(Command{Op: OpReserve, Bytes: 5})             // 2
	h.ok(Command{Op: OpPublish, Events: events(1)})    // 3: offset 2
	h.ok(Command{Op: OpPublish, Events: events(1)})    // 4: offset 3
	steps := []struct {
		ack  []uint64
		want uint64
	}{
		{[]uint64{1}, 1},
		{[]uint64{3}, 1},
		{[]uint64{0}, 3},
		{[]uint64{2}, 0}, // nothing pending: Applied()+1
	}
	for _, st := range steps {
		h.ok(Command{Op: OpAck, Offsets: st.ack})
		if st.want == 0 {
			st.want = h.s.Applied() + 1
		}
		if got := h.s.CompactIndex(); got != st.want {
			t.Errorf("after ack %v at index %d: CompactIndex = %d, want %d", st.ack, h.index, got, st.want)
		}
		h.ok(Command{Op: OpExpire}) // advance the index; changes nothing
	}
	h.ok(Command{Op: OpPublish, Events: events(1)})
	if got := h.s.CompactIndex(); got != h.index {
		t.Errorf("after a new publish at %d: CompactIndex = %d", h.index, got)
	}
}

func TestZeroState(t *testing.T) {
	var s State
	if r := s.Apply(1, &Command{Op: OpReserve, Bytes: 1}); r.Err != nil || r.ReservationID != 1 {
		t.Fatalf("reserve on zero State: %+v", r)
	}
	if !bytes.Equal(snapshot(t, &s), snapshot(t, func() *State {
		n := New()
		n.Apply(1, &Command{Op: OpReserve, Bytes: 1})
		return n
	}())) {
		t.Error("zero State and New differ")
	}
}

// TestDropFrontBoundsMemory drains a large backlog while the producer
// trickles on, and checks that the memory behind the live elements stays
// proportional to them: dropped elements are counted in dead until they
// are copied away, and cap covers the rest of the array.
func TestDropFrontBoundsMemory(t *testing.T) {
	var x []int64
	dead := 0
	for i := range 10_000 {
		x = append(x, int64(i))
	}
	next := int64(10_000)
	for len(x) > 10 {
		x = dropFront(x, &dead, 2)
		x = append(x, next)
		next++
		if bound := 4*len(x) + 80; dead+cap(x) > bound {
			t.Fatalf("%d live elements hold %d dropped and %d capacity, want at most %d in all", len(x), dead, cap(x), bound)
		}
		if x[0] != next-int64(len(x)) {
			t.Fatalf("after drops, x[0] = %d, want %d", x[0], next-int64(len(x)))
		}
	}
}

// TestLongRunningQueue checks offsets and locations stay right across
// many compactions of the internal slices.
func TestLongRunningQueue(t *testing.T) {
	h := newHarness(t)
	for round := range 300 {
		h.ok(Command{Op: OpPublish, Time: int64(round), Events: events(1, 1, 1)})
		next := h.s.NextOffset()
		// Ack all but the newest 20 events, newest first.
		var offs []uint64
		for o := h.s.Head(); o+20 < next; o++ {
			offs = append([]uint64{o}, offs...)
		}
		h.ok(Command{Op: OpAck, Offsets: offs})
		st := h.stats()
		if wantHead := max(int64(next)-20, 0); st.Head != uint64(wantHead) || st.Events != int64(next)-wantHead {
			t.Fatalf("round %d: stats %+v, want head %d", round, st, wantHead)
		}
		for o := st.Head; o < next; o++ {
			index, slot, ok := h.s.Locate(o)
			// Publish of round r is at index 2r+1 and holds offsets 3r..3r+2.
			if r := o / 3; !ok || index != 2*r+1 || slot != int(o%3) {
				t.Fatalf("round %d: Locate(%d) = %d, %d, %v; want %d, %d", round, o, index, slot, ok, 2*r+1, o%3)
			}
		}
		if want := uint64(st.Head/3)*2 + 1; h.s.CompactIndex() != want {
			t.Fatalf("round %d: CompactIndex = %d, want %d", round, h.s.CompactIndex(), want)
		}
	}
}
