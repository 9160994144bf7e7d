package shard

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
)

// mixer makes a random mix of commands for a shard with a backlog of
// many chunks: publishes, acks out of order anywhere in the backlog and
// in order from the head, attempts, dead letters, replays, purges and
// reservations. Some of the commands are rejected.
type mixer struct {
	rng     *rand.Rand
	s       *State // the shard the commands are for; only read
	clock   int64
	backlog int // pending events to keep at least
}

// offset picks an offset: usually near the head, sometimes anywhere in
// the backlog, rarely anywhere at all (which may be unassigned).
func (m *mixer) offset() uint64 {
	head, next := m.s.Head(), m.s.NextOffset()
	switch pending := next - head; {
	case pending == 0 || m.rng.IntN(200) == 0:
		return m.rng.Uint64N(next + 2)
	case m.rng.IntN(4) == 0:
		return head + m.rng.Uint64N(pending)
	default:
		return head + m.rng.Uint64N(min(pending, 2*chunkLen))
	}
}

func (m *mixer) events(n, maxSize int) []Event {
	es := make([]Event, n)
	for i := range es {
		es[i] = Event{Key: "k", Payload: make([]byte, m.rng.IntN(maxSize))}
	}
	return es
}

func (m *mixer) next() Command {
	s := m.s
	m.clock += int64(m.rng.IntN(3))
	c := Command{Time: m.clock}
	pending := int(s.NextOffset() - s.Head())
	switch r := m.rng.IntN(100); {
	case r < 20 || pending < m.backlog:
		c.Op = OpPublish
		c.Events = m.events(1+m.rng.IntN(32), 200)
		if m.rng.IntN(30) == 0 {
			c.MaxQueueBytes = 100 // full
		}
	case r < 40:
		c.Op = OpAck
		for range 1 + m.rng.IntN(16) {
			c.Offsets = append(c.Offsets, m.offset())
		}
	case r < 45:
		// A stretch from the head, so that it crosses chunks.
		c.Op = OpAck
		for o := range uint64(m.rng.IntN(min(pending, 3000) + 1)) {
			c.Offsets = append(c.Offsets, s.Head()+o)
		}
	case r < 53:
		c.Op = OpAttempt
		for range 1 + m.rng.IntN(8) {
			c.Offsets = append(c.Offsets, m.offset())
		}
	case r < 60:
		c.Op = OpDeadLetter
		for range 1 + m.rng.IntN(4) {
			c.Dead = append(c.Dead, DeadInfo{Offset: m.offset(), Reason: fmt.Sprint("reason ", m.rng.IntN(10)), LastError: "HTTP 503"})
		}
	case r < 66:
		c.Op = OpReplayDead
		if len(s.def.dead) > 0 {
			j := m.rng.IntN(len(s.def.dead))
			for _, d := range s.def.dead[j:min(j+1+m.rng.IntN(2), len(s.def.dead))] {
				c.Offsets = append(c.Offsets, d.Offset)
				c.Events = append(c.Events, Event{Payload: make([]byte, d.size)})
			}
		}
	case r < 70:
		c.Op = OpPurgeDead
		if m.rng.IntN(50) > 0 {
			for range 1 + m.rng.IntN(4) {
				if len(s.def.dead) > 0 && m.rng.IntN(4) > 0 {
					c.Offsets = append(c.Offsets, s.def.dead[m.rng.IntN(len(s.def.dead))].Offset)
				} else {
					c.Offsets = append(c.Offsets, m.offset())
				}
			}
		}
	case r < 80:
		c.Op = OpReserve
		c.Bytes = int64(m.rng.IntN(500))
		c.Count = m.rng.IntN(4)
	case r < 88:
		c.Op = OpCommit
		c.ReservationID = s.lastReservation - uint64(m.rng.IntN(4))
		c.Events = m.events(1+m.rng.IntN(3), 150)
	case r < 92:
		c.Op = OpAbort
		c.ReservationID = s.lastReservation - uint64(m.rng.IntN(8))
	default:
		c.Op = OpExpire
		c.OlderThan = m.clock - int64(m.rng.IntN(200))
	}
	return c
}

// twin applies the same commands to two shards, one of which takes
// snapshots with SnapshotFunc while the other never does, and checks that
// they agree.
type twin struct {
	t      *testing.T
	s, ref *State
	m      *mixer
	index  uint64
}

func newTwin(t *testing.T, seed uint64, backlog int) *twin {
	w := &twin{t: t, s: New(), ref: New()}
	w.m = &mixer{rng: rand.New(rand.NewPCG(seed, 1)), s: w.s, clock: 1000, backlog: backlog}
	for w.s.NextOffset() < uint64(2*backlog) {
		w.apply(Command{Op: OpPublish, Time: w.m.clock, Events: w.m.events(32, 200)})
	}
	return w
}

func (w *twin) apply(c Command) {
	w.t.Helper()
	w.index++
	got, want := w.s.Apply(w.index, &c), w.ref.Apply(w.index, &c)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		w.t.Fatalf("%v at index %d: %+v, without snapshots %+v", c.Op, w.index, got, want)
	}
}

// check fails unless the two shards are the same.
func (w *twin) check() {
	w.t.Helper()
	if !bytes.Equal(snapshot(w.t, w.s), snapshot(w.t, w.ref)) {
		w.t.Fatalf("at index %d, the shard that took snapshots differs from the one that did not", w.index)
	}
	checkInvariants(w.t, w.s)
}

// A capture is a SnapshotFunc with what MarshalBinary returned when it
// was taken.
type capture struct {
	f     func() ([]byte, error)
	want  []byte
	index uint64
}

func (w *twin) capture() capture {
	want := snapshot(w.t, w.s)
	return capture{f: w.s.SnapshotFunc(), want: want, index: w.index}
}

func (c capture) check() error {
	got, err := c.f()
	if err != nil {
		return fmt.Errorf("snapshot captured at index %d: %w", c.index, err)
	}
	if !bytes.Equal(got, c.want) {
		return fmt.Errorf("snapshot captured at index %d: %d bytes differ from MarshalBinary's %d then", c.index, len(got), len(c.want))
	}
	return nil
}

// TestSnapshotFuncConcurrent captures snapshots and encodes each of them
// over and over on another goroutine while the shard goes on applying a
// mix of every kind of command: run it with -race. Each encoder runs
// through the next capture too, so that two overlap.
func TestSnapshotFuncConcurrent(t *testing.T) {
	rounds, perRound := 30, 1000
	if testing.Short() {
		rounds = 5
	}
	w := newTwin(t, 1, 5*chunkLen)
	type encoder struct {
		stop chan struct{}
		errc chan error
	}
	start := func(c capture) encoder {
		e := encoder{stop: make(chan struct{}), errc: make(chan error, 1)}
		go func() {
			for {
				if err := c.check(); err != nil {
					e.errc <- err
					return
				}
				select {
				case <-e.stop:
					e.errc <- nil
					return
				default:
				}
			}
		}()
		return e
	}
	var prev *encoder
	var held []capture
	full := 0 // captures with dead letters and reservations
	for range rounds {
		if len(w.s.def.dead) > 0 && len(w.s.reservations) > 0 {
			full++
		}
		c := w.capture()
		e := start(c)
		for i := range perRound {
			w.apply(w.m.next())
			if i%200 == 0 {
				w.check()
			}
		}
		if prev != nil {
			close(prev.stop)
			if err := <-prev.errc; err != nil {
				t.Fatal(err)
			}
		}
		prev = &e
		// Captures stay good however many follow them.
		held = append(held, c)
		for _, c := range held {
			if err := c.check(); err != nil {
				t.Fatal(err)
			}
		}
		held = held[max(len(held), 4)-4:]
	}
	close(prev.stop)
	if err := <-prev.errc; err != nil {
		t.Fatal(err)
	}
	w.check()
	st := w.s.Stats()
	t.Logf("%d commands; head %d, next offset %d, %d dead letters, %d reservations; %d of %d captures with both",
		w.index, st.Head, st.NextOffset, st.DeadLetters, st.Reservations, full, rounds)
	if st.Head < 10*chunkLen || full < rounds/2 {
		t.Fatalf("the mix did not move the head across many chunks: %+v", st)
	}
}

// TestSnapshotFuncMany takes snapshots at random moments, many of them
// outstanding at once, and checks each at a random later moment.
func TestSnapshotFuncMany(t *testing.T) {
	w := newTwin(t, 2, 3*chunkLen)
	var held []capture
	steps := 20_000
	if testing.Short() {
		steps = 3000
	}
	for i := range steps {
		if w.m.rng.IntN(20) == 0 {
			held = append(held, w.capture())
		}
		if len(held) > 0 && w.m.rng.IntN(15) == 0 {
			j := w.m.rng.IntN(len(held))
			if err := held[j].check(); err != nil {
				t.Fatal(err)
			}
			held = append(held[:j], held[j+1:]...)
		}
		w.apply(w.m.next())
		if i%500 == 0 {
			w.check()
		}
	}
	for _, c := range held {
		if err := c.check(); err != nil {
			t.Fatal(err)
		}
	}
	w.check()
}

// TestSnapshotFuncCopiesOnWrite checks that after a capture the shard
// copies just the chunks it writes, and leaves alone those it appends to.
func TestSnapshotFuncCopiesOnWrite(t *testing.T) {
	h := newHarness(t)
	for range 3 * chunkLen / 64 {
		h.ok(Command{Op: OpPublish, Events: events(make([]int, 64)...)})
	}
	h.ok(Command{Op: OpPublish, Events: events(1, 2, 3)}) // into a fourth chunk
	h.ok(Command{Op: OpAttempt, Offsets: []uint64{5}})
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 6}}})
	h.ok(Command{Op: OpReserve, Bytes: 10})
	want := snapshot(t, h.s)
	frozen := slices.Clone(h.s.def.pending.chunks) // as the capture sees them
	f := h.s.SnapshotFunc()
	arrays := func() []*[chunkLen]int64 {
		var a []*[chunkLen]int64
		for _, c := range h.s.def.pending.chunks {
			a = append(a, c.size)
		}
		return a
	}
	before := arrays()

	// Appending, also into the shared last chunk, copies nothing.
	h.ok(Command{Op: OpPublish, Events: events(4, 5)})
	if got := arrays(); len(got) != 4 || got[3] != before[3] {
		t.Fatalf("an append copied the last chunk")
	}
	// An ack in the middle of chunk 1 copies chunk 1 alone, once.
	h.ok(Command{Op: OpAck, Offsets: []uint64{chunkLen + 7}})
	after := arrays()
	h.ok(Command{Op: OpAck, Offsets: []uint64{chunkLen + 8}})
	if got := arrays(); got[0] != before[0] || got[1] == before[1] || got[1] != after[1] || got[2] != before[2] || got[3] != before[3] {
		t.Fatalf("an ack in chunk 1 copied chunks %v", changed(before, got))
	}
	if frozen[1].size[8] != 0 || h.s.def.pending.chunks[1].size[8] != acked {
		t.Fatalf("the ack reached the capture")
	}
	// Attempts, dead letters, reservations.
	h.ok(Command{Op: OpAttempt, Offsets: []uint64{5, 2*chunkLen + 1}})
	h.ok(Command{Op: OpDeadLetter, Dead: []DeadInfo{{Offset: 7}}})
	h.ok(Command{Op: OpPurgeDead, Offsets: []uint64{6}})
	h.ok(Command{Op: OpCommit, ReservationID: 1, Events: events(10)})
	// Dropping chunks from the front copies nothing.
	var offs []uint64
	for o := range uint64(2*chunkLen + 5) {
		offs = append(offs, o)
	}
	h.ok(Command{Op: OpAck, Offsets: offs})
	if got := arrays(); len(got) != 2 || got[1] != before[3] {
		t.Fatalf("dropping chunks from the front copied the last")
	}
	if got, err := f(); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("capture changed: %v", err)
	}
	checkInvariants(t, h.s)
}

func changed(a, b []*[chunkLen]int64) []int {
	var c []int
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			c = append(c, i)
		}
	}
	return c
}

func TestMachineSnapshotFunc(t *testing.T) {
	m := NewMachine()
	publish := (&Command{Op: OpPublish, Events: events(1, 2, 3)}).AppendBinary(nil)
	m.Apply(1, publish)
	want, _ := m.Snapshot()
	f := m.SnapshotFunc()
	m.Apply(2, (&Command{Op: OpAck, Offsets: []uint64{1}}).AppendBinary(nil))
	m.Apply(3, publish)
	if err := m.Restore(nil); err != nil {
		t.Fatal(err)
	}
	m.Apply(1, publish)
	got, err := f()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("SnapshotFunc's bytes differ from Snapshot's at capture: %v", err)
	}
	r := NewMachine()
	if err := r.Restore(got); err != nil || r.Applied() != 1 || r.NextOffset() != 3 {
		t.Fatalf("restore of a captured snapshot: %v, applied %d, next offset %d", err, r.Applied(), r.NextOffset())
	}
}

// BenchmarkSnapshotCapture measures what SnapshotFunc costs the apply
// loop; BenchmarkMarshalBinary has the cost of encoding the same states.
func BenchmarkSnapshotCapture(b *testing.B) {
	for _, batch := range []int{16, 1} {
		b.Run(fmt.Sprintf("1M-batch%d", batch), func(b *testing.B) {
			s, _ := backlogState(b, 1_000_000, batch)
			b.ReportAllocs()
			for b.Loop() {
				s.SnapshotFunc()
			}
		})
	}
}

// BenchmarkApplyAckCaptures acknowledges events a little out of order
// from the head of a large backlog, as BenchmarkApplyAck/SwappedPairs,
// capturing a snapshot every so many commands: the copies the captures
// cause show against the run that never captures.
func BenchmarkApplyAckCaptures(b *testing.B) {
	for _, every := range []int{0, 10_000, 1000} {
		b.Run(fmt.Sprintf("every=%d", every), func(b *testing.B) {
			s, index := filledState(b, b.N+1)
			c := Command{Op: OpAck, Offsets: make([]uint64, 1)}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if every > 0 && i%every == 0 {
					s.SnapshotFunc()
				}
				c.Offsets[0] = uint64(i ^ 1)
				index++
				if r := s.Apply(index, &c); r.Err != nil || r.Count != 1 {
					b.Fatal(r)
				}
			}
		})
	}
}

// A capture's encoding gives up its processor between blocks, so that
// on a busy machine the goroutines that answer publishes need not wait
// for the whole of a large shard's snapshot: with one processor, a
// goroutine waiting to run gets to while the encoding is still under way.
// The encoding still returns MarshalBinary's bytes.
func TestSnapshotFuncYieldsWhileEncoding(t *testing.T) {
	s := New()
	events := make([]Event, 4096)
	for i := uint64(1); s.NextOffset() < 200_000; i++ {
		if r := s.Apply(i, &Command{Op: OpPublish, Events: events}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	want, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	encode := s.SnapshotFunc()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var encoded atomic.Bool
	var got []byte
	done := make(chan error)
	go func() {
		var err error
		got, err = encode()
		encoded.Store(true)
		done <- err
	}()
	runtime.Gosched() // the encoding runs, and lets this goroutine run again only if it yields
	ranDuring := !encoded.Load()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !ranDuring {
		t.Error("the goroutine waiting to run ran only once the snapshot was encoded: the encoding does not yield its processor")
	}
	if !bytes.Equal(got, want) {
		t.Error("the capture's encoding differs from MarshalBinary's")
	}
}
