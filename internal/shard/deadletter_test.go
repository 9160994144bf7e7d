package shard

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// logHarness is a harness that also keeps the encoded log entries, so that
// tests can read events back the way a host does.
type logHarness struct {
	*harness
	log map[uint64][]byte
}

func newLogHarness(t *testing.T) *logHarness {
	return &logHarness{harness: newHarness(t), log: make(map[uint64][]byte)}
}

func (h *logHarness) ok(c Command) Result {
	h.t.Helper()
	h.log[h.index+1] = c.AppendBinary(nil)
	return h.harness.ok(c)
}

// event reads the event at offset back from the log, through Locate.
func (h *logHarness) event(offset uint64) Event {
	h.t.Helper()
	index, slot, ok := h.s.Locate(offset)
	if !ok {
		h.t.Fatalf("Locate(%d) found nothing", offset)
	}
	e, err := EventAt(h.log[index], slot)
	if err != nil {
		h.t.Fatalf("EventAt(entry %d, %d): %v", index, slot, err)
	}
	return e
}

func keyed(key string, size int) Event {
	return Event{Key: key, Payload: bytes.Repeat([]byte{'p'}, size)}
}

func TestAttempt(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Events: events(1, 1, 1, 1)}) // offsets 0-3
	h.ok(Command{Op: OpAck, Offsets: []uint64{2}})
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 3}}})

	// Acked (2), dead (3) and unassigned (4, 99) offsets are ignored;
	// every mention of a pending one counts.
	r := h.ok(Command{Op: OpAttempt, Offsets: []uint64{0, 1, 0, 2, 3, 4, 99, 0}})
	if r.Count != 4 {
		t.Errorf("attempt count = %d, want 4", r.Count)
	}
	for o, want := range []uint32{3, 1, 0, 0, 0} {
		if got := h.s.Attempts(uint64(o)); got != want {
			t.Errorf("Attempts(%d) = %d, want %d", o, got, want)
		}
	}
	if st := h.stats(); st.Retried != 4 {
		t.Errorf("Retried = %d, want 4", st.Retried)
	}
	// Nothing else changed.
	if st := h.stats(); st.Events != 2 || st.Head != 0 || st.Acked != 1 || st.DeadLetters != 1 {
		t.Errorf("stats = %+v after attempts", st)
	}
	if r := h.ok(Command{Op: OpAttempt}); r.Count != 0 {
		t.Errorf("empty attempt count = %d", r.Count)
	}

	// Counts survive a snapshot.
	restored := clone(t, h.s)
	if restored.Attempts(0) != 3 || restored.Attempts(1) != 1 || restored.Stats().Retried != 4 {
		t.Errorf("after restore: attempts %d, %d, retried %d", restored.Attempts(0), restored.Attempts(1), restored.Stats().Retried)
	}

	// Acking drops the count; the head moving past does not bring it back.
	h.ok(Command{Op: OpAck, Offsets: []uint64{0}})
	if h.s.Attempts(0) != 0 || h.s.Attempts(1) != 1 {
		t.Errorf("after ack: attempts %d, %d", h.s.Attempts(0), h.s.Attempts(1))
	}
	if h.s.def.pending.natt != 1 {
		t.Errorf("attempts kept for %d events, want 1", h.s.def.pending.natt)
	}
	if st := h.stats(); st.Retried != 4 {
		t.Errorf("Retried = %d after ack, want 4 (a total)", st.Retried)
	}
	checkInvariants(t, h.s)
}

func TestAttemptSaturates(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Events: events(1)})
	h.s.def.pending.setAttempts(0, math.MaxUint32-1)
	h.ok(Command{Op: OpAttempt, Offsets: []uint64{0, 0, 0}})
	if got := h.s.Attempts(0); got != math.MaxUint32 {
		t.Errorf("Attempts = %d, want it stuck at %d", got, uint32(math.MaxUint32))
	}
	if st := h.stats(); st.Retried != 3 {
		t.Errorf("Retried = %d, want 3", st.Retried)
	}
}

func TestDeadLetter(t *testing.T) {
	h := newLogHarness(t)
	h.index = 9
	h.ok(Command{Op: OpPublish, Time: 100, Events: []Event{keyed("a", 10), keyed("b", 20)}}) // 10: offsets 0-1
	h.ok(Command{Op: OpPublish, Time: 200, Events: []Event{keyed("a", 30)}})                 // 11: offset 2
	h.ok(Command{Op: OpAttempt, Offsets: []uint64{1, 1, 2}})

	r := h.ok(Command{Op: OpDeadLetter, Time: 500, Dead: []DeadInfo{
		{Offset: 2, Reason: "max_retries", LastError: "HTTP 503"},
		{Offset: 1, Reason: "time_to_live"},
		{Offset: 2, Reason: "again"}, // no longer pending: ignored
		{Offset: 7},                  // never assigned: ignored
	}})
	if r.Count != 2 {
		t.Errorf("dead-letter count = %d, want 2", r.Count)
	}
	want := []DeadLetter{
		{Offset: 1, Index: 10, Slot: 1, Reason: "time_to_live", Attempts: 2, Time: 500, PublishTime: 100},
		{Offset: 2, Index: 11, Slot: 0, Reason: "max_retries", LastError: "HTTP 503", Attempts: 1, Time: 500, PublishTime: 200},
	}
	if got := h.s.DeadLetters(0, 0); !reflect.DeepEqual(got, want) {
		t.Errorf("DeadLetters = %+v\nwant %+v", got, want)
	}
	if d, ok := h.s.DeadLetter(2); !ok || d != want[1] {
		t.Errorf("DeadLetter(2) = %+v, %v", d, ok)
	}
	for _, o := range []uint64{0, 3} {
		if _, ok := h.s.DeadLetter(o); ok {
			t.Errorf("DeadLetter(%d) found one", o)
		}
	}
	// The counts moved into the dead letters.
	if h.s.Attempts(1) != 0 || h.s.Attempts(2) != 0 {
		t.Errorf("attempts still counted for dead letters: %d, %d", h.s.Attempts(1), h.s.Attempts(2))
	}
	wantStats := Stats{Events: 1, Bytes: 11, OldestEventTime: 100, Published: 3, NextOffset: 3, Head: 0,
		DeadLetters: 2, DeadLetterBytes: 21 + 31, DeadLettered: 2, Retried: 3}
	if st := h.stats(); st != wantStats {
		t.Errorf("stats = %+v\nwant    %+v", st, wantStats)
	}
	// Dead letters are done but not pending; their events stay readable.
	for o, acked := range []bool{false, true, true} {
		if h.s.IsAcked(uint64(o)) != acked {
			t.Errorf("IsAcked(%d) = %v, want %v", o, !acked, acked)
		}
	}
	if e := h.event(2); e.Key != "a" || len(e.Payload) != 30 {
		t.Errorf("dead letter 2 reads back as %+v", e)
	}
	// Acking a dead letter changes nothing; neither does dead-lettering
	// it again.
	before := snapshot(t, h.s)
	if r := h.ok(Command{Op: OpAck, Offsets: []uint64{1, 2}}); r.Count != 0 {
		t.Errorf("ack of dead letters counted %d", r.Count)
	}
	if r := h.ok(Command{Op: OpDeadLetter, Time: 600, Dead: []DeadInfo{{Offset: 1}}}); r.Count != 0 {
		t.Errorf("second dead-letter counted %d", r.Count)
	}
	after := clone(t, h.s)
	after.applied -= 2
	if !bytes.Equal(snapshot(t, after), before) {
		t.Error("ack or dead-letter of dead letters changed the state")
	}
	checkInvariants(t, h.s)
}

// TestDeadLetterHead checks that the head treats dead letters as done,
// mixed with acks in any order, so that the next events of a key can go.
func TestDeadLetterHead(t *testing.T) {
	h := newLogHarness(t)
	h.ok(Command{Op: OpPublish, Time: 1, Events: []Event{keyed("k", 1), keyed("j", 1), keyed("k", 2)}}) // 1: offsets 0-2
	h.ok(Command{Op: OpPublish, Time: 2, Events: []Event{keyed("k", 3), keyed("j", 2)}})                // 2: offsets 3-4
	h.ok(Command{Op: OpPublish, Time: 3, Events: []Event{keyed("k", 4)}})                               // 3: offset 5

	steps := []struct {
		cmd    Command
		head   uint64
		oldest int64
	}{
		{Command{Op: OpAck, Offsets: []uint64{1}}, 0, 1},                          // j done out of order
		{Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 3}}}, 0, 1},          // dead above the head
		{Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 0}}}, 2, 1},          // head past 0 (dead) and 1 (acked)
		{Command{Op: OpAck, Offsets: []uint64{2}}, 4, 2},                          // past 2 (acked) and 3 (dead)
		{Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 5}}}, 4, 2},          // dead at the end
		{Command{Op: OpAck, Offsets: []uint64{4}}, 6, 0},                          // drained
		{Command{Op: OpAck, Offsets: []uint64{0, 3, 5}}, 6, 0},                    // dead letters stay dead
		{Command{Op: OpAttempt, Offsets: []uint64{0, 3, 5, 4}}, 6, 0},             // and get no attempts
		{Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 4}}}, 6, 0},          // an acked event stays acked
		{Command{Op: OpPublish, Time: 9, Events: events(1)}, 6, 9},                // offset 6
		{Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 6}}}, 7, 0},          // dead at the head
		{Command{Op: OpPublish, Time: 10, Events: []Event{keyed("k", 5)}}, 7, 10}, // offset 7
	}
	for i, st := range steps {
		h.ok(st.cmd)
		if got := h.stats(); got.Head != st.head || got.OldestEventTime != st.oldest {
			t.Fatalf("step %d (%v): head %d, oldest %d; want %d, %d", i, st.cmd.Op, got.Head, got.OldestEventTime, st.head, st.oldest)
		}
		checkInvariants(t, h.s)
	}
	st := h.stats()
	if st.Acked != 3 || st.Delivered != 3 || st.DeadLettered != 4 || st.DeadLetters != 4 || st.Events != 1 || st.Published != 8 {
		t.Errorf("stats = %+v; want 3 acked, 4 dead, 1 pending of 8", st)
	}
	// The dead letters below the head still read back, from their records.
	for o, key := range map[uint64]string{0: "k", 3: "k", 5: "k", 6: ""} {
		if e := h.event(o); e.Key != key {
			t.Errorf("dead letter %d reads back as %+v", o, e)
		}
	}
	for _, o := range []uint64{1, 2, 4} {
		if _, _, ok := h.s.Locate(o); ok {
			t.Errorf("Locate(%d) found an acked event below the head", o)
		}
	}
}

func TestDeadLetterLocate(t *testing.T) {
	h := newLogHarness(t)
	h.index = 40
	h.ok(Command{Op: OpPublish, Events: []Event{keyed("a", 1), keyed("b", 2), keyed("c", 3)}}) // 41: 0-2
	h.ok(Command{Op: OpPublish, Events: []Event{keyed("d", 4), keyed("e", 5)}})                // 42: 3-4
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 1}, {Offset: 4}}})
	check := func(when string) {
		t.Helper()
		for _, d := range h.s.DeadLetters(0, 0) {
			index, slot, ok := h.s.Locate(d.Offset)
			if !ok || index != d.Index || slot != d.Slot {
				t.Errorf("%s: Locate(%d) = %d, %d, %v; record says %d, %d", when, d.Offset, index, slot, ok, d.Index, d.Slot)
			}
			e, err := EventAt(h.log[d.Index], d.Slot)
			if want := string(rune('a' + d.Offset)); err != nil || e.Key != want {
				t.Errorf("%s: dead letter %d reads back as %+v, %v; want key %s", when, d.Offset, e, err, want)
			}
		}
	}
	check("above the head")
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 2, 3}}) // head passes both
	if h.s.Head() != 5 || len(h.s.runs) != 0 {
		t.Fatalf("head %d with %d runs, want 5 with none", h.s.Head(), len(h.s.runs))
	}
	check("below the head")
	check2 := clone(t, h.s)
	if i, s, ok := check2.Locate(1); !ok || i != 41 || s != 1 {
		t.Errorf("after restore: Locate(1) = %d, %d, %v", i, s, ok)
	}
	h.ok(Command{Op: OpPurgeDead, Offsets: []uint64{1}})
	if _, _, ok := h.s.Locate(1); ok {
		t.Error("Locate(1) still finds a purged dead letter")
	}
	check("after a purge")
}

func TestCompactIndexDeadLetters(t *testing.T) {
	h := newLogHarness(t)
	h.ok(Command{Op: OpPublish, Events: events(1, 1)}) // 1: offsets 0-1
	h.ok(Command{Op: OpPublish, Events: events(2)})    // 2: offset 2
	h.ok(Command{Op: OpPublish, Events: events(3)})    // 3: offset 3
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 2}}})
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 1}})
	if got := h.s.CompactIndex(); got != 2 {
		t.Fatalf("CompactIndex = %d, want 2: the dead letter's entry", got)
	}
	h.ok(Command{Op: OpAck, Offsets: []uint64{3}}) // nothing pending now
	if got := h.s.CompactIndex(); got != 2 {
		t.Fatalf("CompactIndex = %d with nothing pending, want 2: the dead letter's entry", got)
	}
	if got := clone(t, h.s).CompactIndex(); got != 2 {
		t.Fatalf("CompactIndex = %d after restore, want 2", got)
	}

	// A purge releases it.
	h.ok(Command{Op: OpPurgeDead})
	if got := h.s.CompactIndex(); got != h.s.Applied()+1 {
		t.Fatalf("CompactIndex = %d after purge, want %d", got, h.s.Applied()+1)
	}

	// So does a replay: the event moves to the replay's entry.
	h.ok(Command{Op: OpPublish, Events: []Event{keyed("x", 4)}}) // offset 4
	pub := h.index
	h.ok(Command{Op: OpPublish, Events: events(5)}) // offset 5
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 4}}})
	h.ok(Command{Op: OpAck, Offsets: []uint64{5}})
	if got := h.s.CompactIndex(); got != pub {
		t.Fatalf("CompactIndex = %d, want %d: the dead letter's entry", got, pub)
	}
	r := h.ok(Command{Op: OpReplayDead, Offsets: []uint64{4}, Events: []Event{keyed("x", 4)}})
	if got := h.s.CompactIndex(); got != h.index || r.FirstOffset != 6 {
		t.Fatalf("CompactIndex = %d after replay to offset %d, want %d: the replay's entry", got, r.FirstOffset, h.index)
	}
	// The lowest of pending events and dead letters counts, whichever it is.
	h.ok(Command{Op: OpPublish, Events: events(1)}) // offset 7
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 7}}})
	if got, want := h.s.CompactIndex(), h.index-1-1; got != want {
		t.Fatalf("CompactIndex = %d, want %d: the replayed event's entry", got, want)
	}
	h.ok(Command{Op: OpAck, Offsets: []uint64{6}})
	if got, want := h.s.CompactIndex(), h.index-1-1; got != want {
		t.Fatalf("CompactIndex = %d, want %d: the newest dead letter's entry", got, want)
	}
}

func TestReplayDead(t *testing.T) {
	h := newLogHarness(t)
	h.ok(Command{Op: OpPublish, Time: 10, Events: []Event{keyed("a", 1), keyed("b", 2), keyed("c", 3)}}) // offsets 0-2
	h.ok(Command{Op: OpPublish, Time: 20, Events: []Event{keyed("d", 4)}})                               // offset 3
	h.ok(Command{Op: OpAttempt, Offsets: []uint64{0, 2, 2}})
	h.ok(Command{Op: OpDeadLetter, Time: 30, Dead: []DeadInfo{{Offset: 2}, {Offset: 0}, {Offset: 1}}})
	before := h.stats()

	// Replay 0 and 2, in offset order, with copies read from the log.
	offs := []uint64{0, 2}
	evs := []Event{h.event(0), h.event(2)}
	r := h.ok(Command{Op: OpReplayDead, Time: 40, Offsets: offs, Events: evs})
	replay := h.index
	if r.FirstOffset != 4 || r.Count != 2 {
		t.Fatalf("replay result %+v, want offsets 4-5", r)
	}
	for i, key := range []string{"a", "c"} {
		o := uint64(4 + i)
		if index, slot, ok := h.s.Locate(o); !ok || index != replay || slot != i {
			t.Errorf("Locate(%d) = %d, %d, %v; want %d, %d", o, index, slot, ok, replay, i)
		}
		if e := h.event(o); e.Key != key {
			t.Errorf("replayed event %d is %+v, want key %s", o, e, key)
		}
		if h.s.IsAcked(o) || h.s.Attempts(o) != 0 {
			t.Errorf("replayed event %d: acked %v, attempts %d", o, h.s.IsAcked(o), h.s.Attempts(o))
		}
	}
	if got := h.s.DeadLetters(0, 0); len(got) != 1 || got[0].Offset != 1 {
		t.Errorf("dead letters left: %+v, want only 1", got)
	}
	for _, o := range []uint64{0, 2} {
		if _, ok := h.s.DeadLetter(o); ok {
			t.Errorf("dead letter %d still held after replay", o)
		}
	}
	want := before
	want.Events += 2
	want.Bytes += 1 + 1 + 1 + 3
	want.DeadLetters--
	want.DeadLetters--
	want.DeadLetterBytes -= 1 + 1 + 1 + 3
	want.Published += 2
	want.NextOffset += 2
	if st := h.stats(); st != want {
		t.Errorf("stats after replay = %+v\nwant                 %+v", st, want)
	}
	if st := h.stats(); st.Head != 3 || st.OldestEventTime != 20 || st.DeadLettered != 3 {
		t.Errorf("stats after replay = %+v, want head 3 still, 3 ever dead-lettered", st)
	}
	checkInvariants(t, h.s)

	// The replayed events are ordinary events: they can fail and die again.
	h.ok(Command{Op: OpAttempt, Offsets: []uint64{5}})
	h.ok(Command{Op: OpDeadLetter, Time: 50, Dead: []DeadInfo{{Offset: 5, Reason: "again"}}})
	if d, ok := h.s.DeadLetter(5); !ok || d.Index != replay || d.Slot != 1 || d.Attempts != 1 || d.PublishTime != 40 {
		t.Errorf("DeadLetter(5) = %+v, %v", d, ok)
	}
	checkInvariants(t, h.s)
}

func TestReplayDeadRejects(t *testing.T) {
	h := newLogHarness(t)
	h.ok(Command{Op: OpPublish, Events: []Event{keyed("a", 1), keyed("b", 2), keyed("c", 3), keyed("d", 4)}}) // 0-3
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 0}, {Offset: 1}, {Offset: 3}}})
	h.ok(Command{Op: OpAck, Offsets: []uint64{2}})
	a, b, d := h.event(0), h.event(1), h.event(3)
	tests := []struct {
		name string
		cmd  Command
		want error
	}{
		{"fewer events", Command{Offsets: []uint64{0, 1}, Events: []Event{a}}, ErrInvalidCommand},
		{"more events", Command{Offsets: []uint64{0}, Events: []Event{a, b}}, ErrInvalidCommand},
		{"events only", Command{Events: []Event{a}}, ErrInvalidCommand},
		{"acked", Command{Offsets: []uint64{0, 2}, Events: []Event{a, keyed("c", 3)}}, ErrUnknownOffset},
		{"unassigned", Command{Offsets: []uint64{4}, Events: []Event{{}}}, ErrUnknownOffset},
		{"out of order", Command{Offsets: []uint64{1, 0}, Events: []Event{b, a}}, ErrInvalidCommand},
		{"twice", Command{Offsets: []uint64{1, 1}, Events: []Event{b, b}}, ErrInvalidCommand},
		{"not a copy", Command{Offsets: []uint64{0, 3}, Events: []Event{a, b}}, ErrInvalidCommand},
	}
	for _, tt := range tests {
		rejected, noop := clone(t, h.s), clone(t, h.s)
		tt.cmd.Op = OpReplayDead
		r := rejected.Apply(100, &tt.cmd)
		if !errors.Is(r.Err, tt.want) || !reflect.DeepEqual(r, Result{Err: r.Err}) {
			t.Errorf("%s: got %+v, want error %v", tt.name, r, tt.want)
			continue
		}
		noop.Apply(100, nil)
		if !bytes.Equal(snapshot(t, rejected), snapshot(t, noop)) {
			t.Errorf("%s: rejected replay changed the state", tt.name)
		}
	}
	// The message says which offset.
	r := h.apply(Command{Op: OpReplayDead, Offsets: []uint64{2}, Events: []Event{keyed("c", 3)}})
	if !strings.Contains(r.Err.Error(), "offset 2 is not a dead letter") {
		t.Errorf("error %q does not name the offset", r.Err)
	}
	// An empty replay does nothing.
	if r := h.ok(Command{Op: OpReplayDead}); !reflect.DeepEqual(r, Result{}) {
		t.Errorf("empty replay: %+v", r)
	}
	// The dead letters are all still there, and replay fine.
	if r := h.ok(Command{Op: OpReplayDead, Offsets: []uint64{0, 1, 3}, Events: []Event{a, b, d}}); r.Count != 3 || r.FirstOffset != 4 {
		t.Errorf("replay: %+v", r)
	}
}

// TestReplayDeadIgnoresLimit checks that a replay needs no new space: a
// full shard still takes its dead letters back, and its bytes stay put.
func TestReplayDeadIgnoresLimit(t *testing.T) {
	h := newLogHarness(t)
	h.ok(Command{Op: OpPublish, Events: []Event{keyed("k", 59)}, MaxQueueBytes: 100}) // 60 bytes
	h.ok(Command{Op: OpPublish, Events: []Event{keyed("k", 39)}, MaxQueueBytes: 100}) // 40 bytes: full
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 0}}})
	h.fails(Command{Op: OpPublish, Events: events(1), MaxQueueBytes: 100}, ErrQueueFull)
	h.ok(Command{Op: OpReplayDead, Offsets: []uint64{0}, Events: []Event{h.event(0)}})
	if st := h.stats(); st.Bytes != 100 || st.DeadLetterBytes != 0 || st.Events != 2 {
		t.Errorf("stats after replay = %+v, want 100 pending bytes in 2 events", st)
	}
	h.fails(Command{Op: OpPublish, Events: events(1), MaxQueueBytes: 100}, ErrQueueFull)
}

func TestPurgeDead(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Events: events(1, 2, 3, 4, 5, 6)}) // offsets 0-5, sizes 1-6
	if r := h.ok(Command{Op: OpPurgeDead}); r.Count != 0 {
		t.Errorf("purge of nothing counted %d", r.Count)
	}
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 0}, {Offset: 2}, {Offset: 3}, {Offset: 5}}})
	steps := []struct {
		offsets []uint64
		count   int
		left    []uint64
		bytes   int64
	}{
		{[]uint64{3, 1, 9, 3}, 1, []uint64{0, 2, 5}, 1 + 3 + 6}, // pending, unassigned and repeated ignored
		{[]uint64{5}, 1, []uint64{0, 2}, 1 + 3},                 // the last
		{[]uint64{0}, 1, []uint64{2}, 3},                        // the first
		{[]uint64{4}, 0, []uint64{2}, 3},                        // pending
	}
	for i, st := range steps {
		r := h.ok(Command{Op: OpPurgeDead, Offsets: st.offsets})
		var left []uint64
		for _, d := range h.s.DeadLetters(0, 0) {
			left = append(left, d.Offset)
		}
		stats := h.stats()
		if r.Count != st.count || !reflect.DeepEqual(left, st.left) || stats.DeadLetterBytes != st.bytes || stats.DeadLetters != int64(len(st.left)) {
			t.Errorf("step %d: purge %v: count %d, left %v, stats %+v; want count %d, left %v, %d bytes",
				i, st.offsets, r.Count, left, stats, st.count, st.left, st.bytes)
		}
		checkInvariants(t, h.s)
	}
	// Purged dead letters are gone for good: no replay, and they remain
	// done for the queue.
	h.fails(Command{Op: OpReplayDead, Offsets: []uint64{0}, Events: events(1)}, ErrUnknownOffset)
	if !h.s.IsAcked(0) || h.s.Head() != 1 {
		t.Errorf("purged offset 0: IsAcked %v, head %d", h.s.IsAcked(0), h.s.Head())
	}
	// Purging everything.
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 1}, {Offset: 4}}})
	if r := h.ok(Command{Op: OpPurgeDead}); r.Count != 3 {
		t.Errorf("purge of all counted %d, want 3", r.Count)
	}
	st := h.stats()
	if st.DeadLetters != 0 || st.DeadLetterBytes != 0 || st.DeadLettered != 6 || st.Events != 0 || st.Acked != 0 || st.Head != 6 {
		t.Errorf("stats after purging all = %+v", st)
	}
	if d := h.s.DeadLetters(0, 0); d != nil {
		t.Errorf("DeadLetters after purging all = %+v", d)
	}
	checkInvariants(t, h.s)
}

// TestDeadLettersOrder dead-letters events out of offset order, in one
// command and across commands, and removes them from the middle, the front
// and the back.
func TestDeadLettersOrder(t *testing.T) {
	h := newHarness(t)
	var sizes []int
	for i := range 100 {
		sizes = append(sizes, i%7)
	}
	h.ok(Command{Op: OpPublish, Events: events(sizes...)})
	var want []uint64
	add := func(offs ...uint64) {
		var dead []DeadInfo
		for _, o := range offs {
			dead = append(dead, DeadInfo{Offset: o})
			want = append(want, o)
		}
		h.ok(Command{Op: OpDeadLetter, Dead: dead})
	}
	check := func(when string) {
		t.Helper()
		slices.Sort(want)
		var got []uint64
		for _, d := range h.s.DeadLetters(0, 0) {
			got = append(got, d.Offset)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: dead letters %v, want %v", when, got, want)
		}
		checkInvariants(t, h.s)
	}
	add(50, 10, 30)
	add(60, 70)
	add(20, 65, 99, 0)
	check("after adding")
	h.ok(Command{Op: OpPurgeDead, Offsets: []uint64{30, 65}})
	want = remove(want, 30, 65)
	check("after purging from the middle")
	h.ok(Command{Op: OpPurgeDead, Offsets: []uint64{10, 0}})
	want = remove(want, 0, 10)
	check("after purging from the front")
	h.ok(Command{Op: OpReplayDead, Offsets: []uint64{20, 50}, Events: events(20%7, 50%7)})
	want = remove(want, 20, 50)
	check("after replaying from the front")
	h.ok(Command{Op: OpReplayDead, Offsets: []uint64{70, 99}, Events: events(70%7, 99%7)})
	want = remove(want, 70, 99)
	check("after replaying from the back")
	add(1, 2, 3)
	check("after adding in front")
}

func remove(x []uint64, drop ...uint64) []uint64 {
	var out []uint64
	for _, v := range x {
		keep := true
		for _, d := range drop {
			keep = keep && v != d
		}
		if keep {
			out = append(out, v)
		}
	}
	return out
}

func TestDeadLettersPaging(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Events: events(1, 1, 1, 1, 1, 1, 1, 1, 1, 1)})
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 1}, {Offset: 2}, {Offset: 4}, {Offset: 7}, {Offset: 9}}})
	offsets := func(ds []DeadLetter) []uint64 {
		var o []uint64
		for _, d := range ds {
			o = append(o, d.Offset)
		}
		return o
	}
	var pages [][]uint64
	for from := uint64(0); ; {
		page := h.s.DeadLetters(from, 2)
		if page == nil {
			break
		}
		pages = append(pages, offsets(page))
		from = page[len(page)-1].Offset + 1
	}
	if want := [][]uint64{{1, 2}, {4, 7}, {9}}; !reflect.DeepEqual(pages, want) {
		t.Errorf("pages %v, want %v", pages, want)
	}
	for _, tt := range []struct {
		from uint64
		max  int
		want []uint64
	}{
		{0, 0, []uint64{1, 2, 4, 7, 9}},
		{0, -1, []uint64{1, 2, 4, 7, 9}},
		{3, 0, []uint64{4, 7, 9}},
		{4, 1, []uint64{4}},
		{9, 10, []uint64{9}},
		{10, 0, nil},
		{math.MaxUint64, 0, nil},
	} {
		if got := offsets(h.s.DeadLetters(tt.from, tt.max)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DeadLetters(%d, %d) = %v, want %v", tt.from, tt.max, got, tt.want)
		}
	}
	// The result is a copy.
	page := h.s.DeadLetters(0, 1)
	page[0].Reason = "changed"
	if d, _ := h.s.DeadLetter(1); d.Reason != "" {
		t.Error("changing a returned dead letter changed the state")
	}
}

// TestDeadLetterQueueFull checks that dead letters keep counting towards
// max_queue_bytes until they are purged, so that a shard whose endpoint is
// dead fills up rather than growing without bound.
func TestDeadLetterQueueFull(t *testing.T) {
	h := newHarness(t)
	const limit = 100
	for i := range 10 {
		h.ok(Command{Op: OpPublish, Events: events(10), MaxQueueBytes: limit})
		h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: uint64(i), Reason: "max_retries"}}})
	}
	if st := h.stats(); st.Events != 0 || st.DeadLetterBytes != 100 || st.Head != 10 {
		t.Fatalf("stats = %+v, want 100 bytes of dead letters and nothing pending", st)
	}
	r := h.apply(Command{Op: OpPublish, Events: events(1), MaxQueueBytes: limit})
	if !errors.Is(r.Err, ErrQueueFull) {
		t.Fatalf("publish into a shard full of dead letters: %v", r.Err)
	}
	for _, want := range []string{"100 dead-letter", "1 requested", "max_queue_bytes 100", "purge or replay the shard's dead letters"} {
		if !strings.Contains(r.Err.Error(), want) {
			t.Errorf("error %q does not contain %q", r.Err, want)
		}
	}
	h.fails(Command{Op: OpReserve, Bytes: 1, MaxQueueBytes: limit}, ErrQueueFull)
	// Empty events still fit, as ever.
	h.ok(Command{Op: OpPublish, Events: events(0), MaxQueueBytes: limit})

	// Purging some makes exactly that much room.
	h.ok(Command{Op: OpPurgeDead, Offsets: []uint64{3, 4}})
	h.ok(Command{Op: OpReserve, Bytes: 15, MaxQueueBytes: limit})
	h.fails(Command{Op: OpPublish, Events: events(6), MaxQueueBytes: limit}, ErrQueueFull)
	h.ok(Command{Op: OpPublish, Events: events(5), MaxQueueBytes: limit})
	if st := h.stats(); st.Bytes+st.ReservedBytes+st.DeadLetterBytes != limit {
		t.Errorf("stats = %+v, want the shard exactly full", st)
	}
	// Dead-lettering does not change the total, so it never fails for space.
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 11}}})
	if st := h.stats(); st.Bytes != 0 || st.DeadLetterBytes != 85 {
		t.Errorf("stats = %+v after dead-lettering the last event", st)
	}
	h.ok(Command{Op: OpPurgeDead})
	h.ok(Command{Op: OpPublish, Events: events(85), MaxQueueBytes: limit})
}

func TestDeadLetterOverflow(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Events: events(10)})
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 0}}})
	h.ok(Command{Op: OpReserve, Bytes: math.MaxInt64 - 10})
	h.fails(Command{Op: OpPublish, Events: events(1)}, ErrInvalidCommand)
	h.fails(Command{Op: OpReserve, Bytes: 1}, ErrInvalidCommand)
}

func TestDeadLetterText(t *testing.T) {
	h := newHarness(t)
	h.ok(Command{Op: OpPublish, Events: events(1, 1, 1, 1)})
	fits := strings.Repeat("x", MaxDeadLetterText)
	long := strings.Repeat("y", MaxDeadLetterText-1) + "€uro" // € takes three bytes across the limit
	huge := strings.Repeat("z", 1<<20)
	invalid := strings.Repeat("w", MaxDeadLetterText-1) + "\x80\x80\x80"
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{
		{Offset: 0, Reason: fits, LastError: long},
		{Offset: 1, Reason: huge, LastError: invalid},
	}})
	tests := []struct {
		offset  uint64
		reason  string
		lastErr string
	}{
		{0, fits, strings.Repeat("y", MaxDeadLetterText-1)},
		{1, strings.Repeat("z", MaxDeadLetterText), strings.Repeat("w", MaxDeadLetterText-1) + "\x80"},
	}
	for _, tt := range tests {
		d, _ := h.s.DeadLetter(tt.offset)
		if d.Reason != tt.reason || d.LastError != tt.lastErr {
			t.Errorf("dead letter %d: reason of %d bytes, error %q...; want %d bytes, %q...", tt.offset,
				len(d.Reason), d.LastError[max(len(d.LastError), 8)-8:], len(tt.reason), tt.lastErr[max(len(tt.lastErr), 8)-8:])
		}
		if tt.offset == 0 && !utf8.ValidString(d.LastError) {
			t.Errorf("cut split a rune: %q", d.LastError[len(d.LastError)-4:])
		}
	}
	checkInvariants(t, h.s)
	clone(t, h.s) // and the snapshot takes them
}
