package shard

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// model is a deliberately naive shard, to check State against: it keeps
// every event ever appended, never compacts anything, and recomputes every
// answer by scanning.
type model struct {
	applied uint64
	lastID  uint64
	res     map[uint64]modelReservation
	events  []modelEvent // indexed by offset
}

type modelReservation struct {
	bytes int64
	count int
	time  int64
}

type modelEvent struct {
	size  int64
	time  int64
	index uint64
	slot  int
	acked bool
}

func newModel() *model { return &model{res: map[uint64]modelReservation{}} }

func modelSize(e Event) int64 {
	n := len(e.Key) + len(e.Payload)
	for _, h := range e.Headers {
		n += len(h.Name) + len(h.Value)
	}
	return int64(n)
}

func (m *model) head() uint64 {
	for i, e := range m.events {
		if !e.acked {
			return uint64(i)
		}
	}
	return uint64(len(m.events))
}

func (m *model) pendingBytes() int64 {
	var n int64
	for _, e := range m.events {
		if !e.acked {
			n += e.size
		}
	}
	return n
}

func (m *model) reservedBytes() int64 {
	var n int64
	for _, r := range m.res {
		n += r.bytes
	}
	return n
}

func (m *model) full(n, limit int64) bool {
	return limit > 0 && m.pendingBytes()+m.reservedBytes()+n > limit
}

// apply returns the Result State should return, with a bare sentinel error.
func (m *model) apply(index uint64, c *Command) Result {
	if index <= m.applied {
		return Result{Err: ErrInvalidCommand}
	}
	m.applied = index
	if c == nil {
		return Result{}
	}
	switch c.Op {
	case OpReserve:
		if c.Bytes < 0 || c.Count < 0 || c.MaxQueueBytes < 0 {
			return Result{Err: ErrInvalidCommand}
		}
		if m.full(c.Bytes, c.MaxQueueBytes) {
			return Result{Err: ErrQueueFull}
		}
		m.lastID++
		m.res[m.lastID] = modelReservation{c.Bytes, c.Count, c.Time}
		return Result{ReservationID: m.lastID}
	case OpCommit:
		if len(c.Events) == 0 {
			return Result{Err: ErrInvalidCommand}
		}
		r, ok := m.res[c.ReservationID]
		if !ok {
			return Result{Err: ErrUnknownReservation}
		}
		var total int64
		for _, e := range c.Events {
			total += modelSize(e)
		}
		if (r.count != 0 && len(c.Events) > r.count) || total > r.bytes {
			return Result{Err: ErrReservationTooSmall}
		}
		delete(m.res, c.ReservationID)
		return m.append(index, c)
	case OpAbort:
		if _, ok := m.res[c.ReservationID]; ok {
			delete(m.res, c.ReservationID)
			return Result{Count: 1}
		}
		return Result{}
	case OpPublish:
		if len(c.Events) == 0 || c.MaxQueueBytes < 0 {
			return Result{Err: ErrInvalidCommand}
		}
		var total int64
		for _, e := range c.Events {
			total += modelSize(e)
		}
		if m.full(total, c.MaxQueueBytes) {
			return Result{Err: ErrQueueFull}
		}
		return m.append(index, c)
	case OpAck:
		for _, o := range c.Offsets {
			if o >= uint64(len(m.events)) {
				return Result{Err: ErrUnknownOffset}
			}
		}
		n := 0
		for _, o := range c.Offsets {
			if !m.events[o].acked {
				m.events[o].acked = true
				n++
			}
		}
		return Result{Count: n}
	case OpExpire:
		n := 0
		for id, r := range m.res {
			if r.time < c.OlderThan {
				delete(m.res, id)
				n++
			}
		}
		return Result{Count: n}
	}
	return Result{Err: ErrInvalidCommand}
}

func (m *model) append(index uint64, c *Command) Result {
	first := uint64(len(m.events))
	for i, e := range c.Events {
		m.events = append(m.events, modelEvent{size: modelSize(e), time: c.Time, index: index, slot: i})
	}
	return Result{FirstOffset: first, Count: len(c.Events)}
}

func (m *model) stats() Stats {
	st := Stats{
		Bytes:         m.pendingBytes(),
		ReservedBytes: m.reservedBytes(),
		Reservations:  len(m.res),
		Published:     uint64(len(m.events)),
		NextOffset:    uint64(len(m.events)),
		Head:          m.head(),
	}
	for _, e := range m.events {
		if e.acked {
			st.Acked++
		} else {
			st.Events++
		}
	}
	if st.Head < st.NextOffset {
		st.OldestEventTime = m.events[st.Head].time
	}
	return st
}

// compare fails the test unless s answers every query as m does. Unless
// full is set, it checks only some offsets when there are many.
func compare(t *testing.T, s *State, m *model, full bool) {
	t.Helper()
	if s.Applied() != m.applied {
		t.Fatalf("Applied = %d, model %d", s.Applied(), m.applied)
	}
	want := m.stats()
	if got := s.Stats(); got != want {
		t.Fatalf("Stats = %+v\n      model %+v", got, want)
	}
	if s.Head() != want.Head || s.NextOffset() != want.NextOffset {
		t.Fatalf("Head, NextOffset = %d, %d; model %d, %d", s.Head(), s.NextOffset(), want.Head, want.NextOffset)
	}
	wantCompact := m.applied + 1
	if want.Head < want.NextOffset {
		wantCompact = m.events[want.Head].index
	}
	if got := s.CompactIndex(); got != wantCompact {
		t.Fatalf("CompactIndex = %d, model %d", got, wantCompact)
	}
	n := uint64(len(m.events))
	if full || n <= 64 {
		for o := uint64(0); o < n+2; o++ {
			compareOffset(t, s, m, want.Head, o)
		}
	} else {
		// Looking at every offset after every step makes long inputs
		// quadratic; between full checks, look where things change.
		for o := max(want.Head, 2) - 2; o < want.Head+16; o++ {
			compareOffset(t, s, m, want.Head, o)
		}
		for o := n - 8; o < n+2; o++ {
			compareOffset(t, s, m, want.Head, o)
		}
	}
	if full {
		// Every reservation the model holds is held, and Stats agreed on
		// how many there are, so the sets are equal.
		for id := range m.res {
			compareReservation(t, s, m, id)
		}
		checkInvariants(t, s)
	}
	for id := max(m.lastID, 8) - 8; id <= m.lastID+1; id++ {
		compareReservation(t, s, m, id)
	}
}

func compareReservation(t *testing.T, s *State, m *model, id uint64) {
	t.Helper()
	r, ok := s.Reservation(id)
	mr, mok := m.res[id]
	if ok != mok || (ok && r != Reservation{ID: id, Bytes: mr.bytes, Count: mr.count, Time: mr.time}) {
		t.Fatalf("Reservation(%d) = %+v, %v; model %+v, %v", id, r, ok, mr, mok)
	}
}

func compareOffset(t *testing.T, s *State, m *model, head, o uint64) {
	t.Helper()
	var wi uint64
	var ws int
	wok := false
	if o >= head && o < uint64(len(m.events)) {
		wi, ws, wok = m.events[o].index, m.events[o].slot, true
	}
	if i, slot, ok := s.Locate(o); i != wi || slot != ws || ok != wok {
		t.Fatalf("Locate(%d) = %d, %d, %v; model %d, %d, %v", o, i, slot, ok, wi, ws, wok)
	}
	wacked := o < uint64(len(m.events)) && m.events[o].acked
	if got := s.IsAcked(o); got != wacked {
		t.Fatalf("IsAcked(%d) = %v, model %v", o, got, wacked)
	}
}

// fuzzReader doles out fuzz input, then zeros once it runs out.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// Selectors for the kinds of step the fuzz program can take; the low four
// bits of each step's first byte pick one.
const (
	stepReserve  = 0
	stepCommit   = 2
	stepAbort    = 5
	stepPublish  = 6
	stepAck      = 8
	stepExpire   = 11
	stepSnapshot = 12
	stepBad      = 13
	stepCommit2  = 14 // commit the newest reservation, sized to fit
	stepAckHead  = 15 // ack the event at the head
)

// fuzzProgram turns fuzz input into commands. Each step reads a selector, an
// index byte, a clock byte and then whatever the step needs. Sizes and
// limits are small so that queues fill up and reservations run out often.
type fuzzProgram struct {
	r     fuzzReader
	m     *model
	clock int64
}

func (p *fuzzProgram) limit() int64 {
	switch b := p.r.next(); {
	case b < 64:
		return 0
	case b == 255:
		return -1
	default:
		return int64(b)
	}
}

func (p *fuzzProgram) events() []Event {
	n := p.r.next() % 4
	if n == 0 {
		return nil
	}
	es := make([]Event, n)
	for i := range es {
		kb, pb, hb := p.r.next(), p.r.next(), p.r.next()
		es[i].Key = strings.Repeat("k", int(kb%4))
		if n := int(pb % 40); n > 0 {
			es[i].Payload = bytes.Repeat([]byte{pb}, n)
		}
		for j := range int(hb % 3) {
			es[i].Headers = append(es[i].Headers, Header{Name: "h" + string(rune('0'+j)), Value: strings.Repeat("v", int(hb>>4)%4)})
		}
	}
	return es
}

// recentID picks a recent reservation id, or one just past the newest.
func (p *fuzzProgram) recentID() uint64 {
	b := p.r.next()
	if b >= 250 {
		return p.m.lastID + 1
	}
	return p.m.lastID - uint64(b%4) // may wrap: an unknown id
}

func (p *fuzzProgram) offset() uint64 {
	next := uint64(len(p.m.events))
	head := p.m.head()
	b := p.r.next()
	if b < 40 || head == next {
		return uint64(b) % (next + 2) // anywhere, including unassigned offsets
	}
	return head + uint64(b-40)%(next-head)
}

// command returns the next step's command. ok=false means a snapshot step;
// a nil command with ok=true applies nothing.
func (p *fuzzProgram) command(sel byte) (c *Command, ok bool) {
	p.clock += int64(p.r.next()%8) - 1 // usually forward, sometimes back
	c = &Command{Time: p.clock}
	switch sel % 16 {
	case stepReserve, stepReserve + 1:
		c.Op = OpReserve
		c.Bytes = int64(p.r.next()%64) - 2
		cb := p.r.next()
		c.Count = int(cb % 4)
		if cb == 255 {
			c.Count = -1
		}
		c.MaxQueueBytes = p.limit()
	case stepCommit, stepCommit + 1, stepCommit + 2:
		c.Op = OpCommit
		c.ReservationID = p.recentID()
		c.Events = p.events()
	case stepCommit2:
		c.Op = OpCommit
		c.ReservationID = p.m.lastID
		c.Events = []Event{{}}
		if n := p.m.res[c.ReservationID].bytes; n > 0 {
			c.Events[0].Payload = make([]byte, n)
		}
	case stepAbort:
		c.Op = OpAbort
		c.ReservationID = p.recentID()
	case stepPublish, stepPublish + 1:
		c.Op = OpPublish
		c.MaxQueueBytes = p.limit()
		c.Events = p.events()
	case stepAck, stepAck + 1, stepAck + 2:
		c.Op = OpAck
		for range p.r.next() % 5 {
			c.Offsets = append(c.Offsets, p.offset())
		}
	case stepAckHead:
		c.Op = OpAck
		c.Offsets = []uint64{p.m.head()} // unknown if nothing is pending
	case stepExpire:
		c.Op = OpExpire
		c.OlderThan = p.clock - int64(p.r.next()%32)
	case stepSnapshot:
		return nil, false
	case stepBad:
		switch b := p.r.next(); b % 3 {
		case 0:
			return nil, true
		case 1:
			c.Op = 0
		default:
			c.Op = OpExpire + 1 + Op(b%8)
		}
	}
	return c, true
}

// index returns the log index for the next step: usually the next one,
// sometimes after a gap, rarely a stale one.
func (p *fuzzProgram) index() uint64 {
	switch b := p.r.next(); {
	case b < 8:
		return p.m.applied - uint64(b%2)
	case b >= 248:
		return p.m.applied + 1 + uint64(b-247)
	default:
		return p.m.applied + 1
	}
}

// FuzzStateMachine runs State and the naive model side by side on commands
// drawn from the fuzz input, passing each command through its encoding on
// the way to State, and checks that they agree after every step.
func FuzzStateMachine(f *testing.F) {
	// Seeds are in testdata/fuzz/FuzzStateMachine; see TestFuzzSeeds.
	f.Fuzz(runStateMachine)
}

// runStateMachine is the body of FuzzStateMachine.
func runStateMachine(t *testing.T, data []byte) {
	m := newModel()
	p := &fuzzProgram{r: fuzzReader{data}, m: m, clock: 1_000}
	s := New()
	for step := 0; len(p.r.b) > 0 && step < 1000; step++ {
		sel := p.r.next()
		index := p.index()
		c, ok := p.command(sel)
		if !ok {
			s = restore(t, s)
			compare(t, s, m, true)
			continue
		}
		sc := c
		if c != nil && c.Op.valid() {
			sc = roundTrip(t, c)
		}
		got := s.Apply(index, sc)
		want := m.apply(index, c)
		if !errors.Is(got.Err, want.Err) {
			t.Fatalf("step %d: %+v at index %d: error %v, model %v", step, c, index, got.Err, want.Err)
		}
		got.Err, want.Err = nil, nil
		if got != want {
			t.Fatalf("step %d: %+v at index %d: %+v, model %+v", step, c, index, got, want)
		}
		compare(t, s, m, step%32 == 0)
	}
	s = restore(t, s)
	compare(t, s, m, true)
}

// restore passes s through a snapshot and checks nothing was lost.
func restore(t *testing.T, s *State) *State {
	t.Helper()
	data := snapshot(t, s)
	var r State
	if err := r.UnmarshalBinary(data); err != nil {
		t.Fatalf("UnmarshalBinary of a fresh snapshot: %v", err)
	}
	if again := snapshot(t, &r); !bytes.Equal(again, data) {
		t.Fatalf("restored state marshals differently:\n%x\n%x", data, again)
	}
	return &r
}

// roundTrip encodes c and decodes it again, checking that nothing changed
// and that EventAt agrees.
func roundTrip(t *testing.T, c *Command) *Command {
	t.Helper()
	data := c.AppendBinary(nil)
	d, err := UnmarshalCommand(data)
	if err != nil {
		t.Fatalf("UnmarshalCommand(%+v): %v", c, err)
	}
	if !reflect.DeepEqual(&d, c) {
		t.Fatalf("round trip changed the command:\n got %+v\nwant %+v", d, *c)
	}
	for i := range c.Events {
		e, err := EventAt(data, i)
		if err != nil || !reflect.DeepEqual(e, c.Events[i]) {
			t.Fatalf("EventAt(%d) = %+v, %v; want %+v", i, e, err, c.Events[i])
		}
	}
	return &d
}

// FuzzUnmarshalCommand checks that decoding never panics, and that what
// decodes re-encodes to exactly the same bytes (encodings are unique).
func FuzzUnmarshalCommand(f *testing.F) {
	// Seeds are in testdata/fuzz/FuzzUnmarshalCommand; see TestFuzzSeeds.
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := UnmarshalCommand(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidCommand) {
				t.Fatalf("error %v does not wrap ErrInvalidCommand", err)
			}
			// EventAt must not panic either; it may accept a prefix.
			for slot := range 3 {
				EventAt(data, slot)
			}
			return
		}
		again := c.AppendBinary(nil)
		if !bytes.Equal(again, data) {
			t.Fatalf("decoded %+v re-encodes differently:\n%x\n%x", c, data, again)
		}
		d, err := UnmarshalCommand(again)
		if err != nil || !reflect.DeepEqual(c, d) {
			t.Fatalf("second decode: %+v, %v; want %+v", d, err, c)
		}
		for i := range c.Events {
			e, err := EventAt(data, i)
			if err != nil || !reflect.DeepEqual(e, c.Events[i]) {
				t.Fatalf("EventAt(%d) = %+v, %v; want %+v", i, e, err, c.Events[i])
			}
		}
		if _, err := EventAt(data, len(c.Events)); err == nil {
			t.Fatalf("EventAt(%d) of %d events succeeded", len(c.Events), len(c.Events))
		}
	})
}
