package shard

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// model is a deliberately naive shard, to check State against: it keeps
// every event ever appended, never compacts anything, and recomputes every
// answer by scanning.
type model struct {
	applied uint64
	lastID  uint64
	res     map[uint64]modelReservation
	events  []modelEvent // indexed by offset
	retried uint64       // attempts ever recorded
	acked   uint64       // acks ever recorded, an event acked again after a seek each time
	deadN   uint64       // dead letters ever made

	// retaining: a Retain started retention, and the events from
	// retainFrom on whose retained flag is set are retained.
	retaining  bool
	retainFrom uint64

	lro uint64 // the highest index a TierAdvance went to
}

type modelReservation struct {
	bytes int64
	count int
	time  int64
}

// The life of a model event: pending, then acked, or dead and perhaps
// later gone (replayed under a new offset, or purged).
const (
	modelPending = iota
	modelAcked
	modelDead
	modelGone
)

type modelEvent struct {
	event    Event // kept to replay it
	size     int64
	time     int64
	index    uint64
	slot     int
	state    int
	attempts uint32 // while pending; then in the dead letter
	dead     DeadLetter
	retained bool // a seek may make it pending again, while retaining
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
		if e.state == modelPending {
			return uint64(i)
		}
	}
	return uint64(len(m.events))
}

// logStart is the lowest offset the shard locates.
func (m *model) logStart() uint64 {
	if m.retaining {
		return m.retainFrom
	}
	return m.head()
}

func (m *model) bytesIn(state int) int64 {
	var n int64
	for _, e := range m.events {
		if e.state == state {
			n += e.size
		}
	}
	return n
}

func (m *model) pendingBytes() int64 { return m.bytesIn(modelPending) }

func (m *model) isPending(o uint64) bool {
	return o < uint64(len(m.events)) && m.events[o].state == modelPending
}

func (m *model) isDead(o uint64) bool {
	return o < uint64(len(m.events)) && m.events[o].state == modelDead
}

// deadOffsets returns the offsets of the dead letters, ascending.
func (m *model) deadOffsets() []uint64 {
	var offs []uint64
	for o, e := range m.events {
		if e.state == modelDead {
			offs = append(offs, uint64(o))
		}
	}
	return offs
}

// modelClip cuts t as clipText does, by stepping through it rune by rune.
func modelClip(t string) string {
	n := 0
	for n < len(t) {
		_, w := utf8.DecodeRuneInString(t[n:])
		if n+w > MaxDeadLetterText {
			break
		}
		n += w
	}
	return t[:n]
}

func (m *model) reservedBytes() int64 {
	var n int64
	for _, r := range m.res {
		n += r.bytes
	}
	return n
}

func (m *model) full(n, limit int64) bool {
	return limit > 0 && m.pendingBytes()+m.reservedBytes()+m.bytesIn(modelDead)+n > limit
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
			if m.events[o].state == modelPending {
				m.events[o].state = modelAcked
				m.events[o].attempts = 0
				n++
			}
		}
		m.acked += uint64(n)
		return Result{Count: n}
	case OpAttempt:
		n := 0
		for _, o := range c.Offsets {
			if m.isPending(o) {
				if m.events[o].attempts != math.MaxUint32 {
					m.events[o].attempts++
				}
				n++
			}
		}
		m.retried += uint64(n)
		return Result{Count: n}
	case OpDeadLetter:
		n := 0
		for _, d := range c.Dead {
			if !m.isPending(d.Offset) {
				continue
			}
			e := &m.events[d.Offset]
			e.state = modelDead
			e.dead = DeadLetter{Offset: d.Offset, Index: e.index, Slot: e.slot,
				Reason: modelClip(d.Reason), LastError: modelClip(d.LastError),
				Attempts: e.attempts, Time: c.Time, PublishTime: e.time}
			e.attempts = 0
			n++
		}
		m.deadN += uint64(n)
		return Result{Count: n}
	case OpReplayDead:
		if len(c.Offsets) != len(c.Events) {
			return Result{Err: ErrInvalidCommand}
		}
		for i, o := range c.Offsets {
			switch {
			case !m.isDead(o):
				return Result{Err: ErrUnknownOffset}
			case i > 0 && o <= c.Offsets[i-1], modelSize(c.Events[i]) != m.events[o].size:
				return Result{Err: ErrInvalidCommand}
			}
		}
		if len(c.Offsets) == 0 {
			return Result{}
		}
		for _, o := range c.Offsets {
			m.events[o].state = modelGone
		}
		return m.append(index, c)
	case OpPurgeDead:
		n := 0
		for o := range m.events {
			if m.events[o].state == modelDead && (len(c.Offsets) == 0 || contains(c.Offsets, uint64(o))) {
				m.events[o].state = modelGone
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
	case OpRetain:
		return m.retain(c)
	case OpSeek:
		return m.seek(c)
	case OpTierAdvance:
		if c.From > index {
			return Result{Err: ErrInvalidCommand}
		}
		m.lro = max(m.lro, c.From)
		return Result{}
	}
	return Result{Err: ErrInvalidCommand}
}

func (m *model) retain(c *Command) Result {
	if c.OlderThan == RetainNone {
		if !m.retaining {
			return Result{}
		}
		n := m.head() - m.retainFrom
		m.retaining, m.retainFrom = false, 0
		return Result{Count: int(n)}
	}
	if !m.retaining {
		// What is pending is retained; what is done is freed already.
		m.retaining, m.retainFrom = true, m.head()
		for o := m.retainFrom; o < uint64(len(m.events)); o++ {
			m.events[o].retained = m.events[o].state == modelPending
		}
	}
	h, from := m.head(), m.retainFrom
	for m.retainFrom < h && m.events[m.retainFrom].time < c.OlderThan {
		m.retainFrom++
	}
	return Result{Count: int(m.retainFrom - from)}
}

func (m *model) seek(c *Command) Result {
	n := uint64(len(m.events))
	from := max(min(c.From, n), m.logStart())
	if c.Time != 0 {
		for from < n && m.events[from].time < c.Time {
			from++
		}
	}
	for o := m.head(); o < from; o++ {
		if m.events[o].state == modelPending {
			m.events[o].state, m.events[o].attempts = modelAcked, 0 // passed over
		}
	}
	replayed := 0
	for o := from; o < n; o++ {
		e := &m.events[o]
		switch {
		case e.state == modelPending:
			e.attempts = 0
		case e.state == modelDead:
			// A dead letter stays one.
		case m.retaining && o >= m.retainFrom && e.retained:
			e.state, e.attempts = modelPending, 0
			replayed++
		}
	}
	r := Result{FirstOffset: from, Count: replayed}
	if from < n {
		r.Time = m.events[from].time
	}
	return r
}

func contains(offs []uint64, o uint64) bool {
	for _, x := range offs {
		if x == o {
			return true
		}
	}
	return false
}

func (m *model) append(index uint64, c *Command) Result {
	first := uint64(len(m.events))
	for i, e := range c.Events {
		m.events = append(m.events, modelEvent{event: e, size: modelSize(e), time: c.Time, index: index, slot: i,
			retained: m.retaining && c.Op != OpReplayDead}) // a replayed copy is its subscription's alone
	}
	return Result{FirstOffset: first, Count: len(c.Events)}
}

func (m *model) stats() Stats {
	st := Stats{
		Bytes:           m.pendingBytes(),
		ReservedBytes:   m.reservedBytes(),
		Reservations:    len(m.res),
		Published:       uint64(len(m.events)),
		NextOffset:      uint64(len(m.events)),
		Head:            m.head(),
		DeadLetterBytes: m.bytesIn(modelDead),
		Retried:         m.retried,
		Acked:           m.acked,
		DeadLettered:    m.deadN,
	}
	for _, e := range m.events {
		switch e.state {
		case modelPending:
			st.Events++
		case modelDead:
			st.DeadLetters++
		}
	}
	st.Delivered = st.Acked
	if st.Head < st.NextOffset {
		st.OldestEventTime = m.events[st.Head].time
	}
	return st
}

// compactIndex is the lowest log index of a pending, retained or
// dead-lettered event: the shard keeps the entries from the first it
// locates on.
func (m *model) compactIndex() uint64 {
	start := m.logStart()
	for o, e := range m.events {
		if uint64(o) >= start || e.state == modelDead {
			return e.index
		}
	}
	return m.applied + 1
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
	if got, want := s.CompactIndex(), m.compactIndex(); got != want {
		t.Fatalf("CompactIndex = %d, model %d", got, want)
	}
	if got, want := s.Earliest(), m.logStart(); got != want {
		t.Fatalf("Earliest = %d, model %d", got, want)
	}
	if got, want := s.LRO(), m.lro; got != want {
		t.Fatalf("LRO = %d, model %d", got, want)
	}
	start := m.logStart()
	dead := m.deadOffsets()
	if full {
		var want []DeadLetter
		for _, o := range dead {
			want = append(want, m.events[o].dead)
		}
		if got := s.DeadLetters(0, 0); !reflect.DeepEqual(got, want) {
			t.Fatalf("DeadLetters(0, 0) = %+v\n                model %+v", got, want)
		}
	} else if len(dead) > 0 {
		// A page from the middle.
		from := dead[len(dead)/2]
		want := []DeadLetter{m.events[from].dead}
		if len(dead) > len(dead)/2+1 {
			want = append(want, m.events[dead[len(dead)/2+1]].dead)
		}
		if got := s.DeadLetters(from, 2); !reflect.DeepEqual(got, want) {
			t.Fatalf("DeadLetters(%d, 2) = %+v\n                model %+v", from, got, want)
		}
	}
	n := uint64(len(m.events))
	if full || n <= 64 {
		for o := uint64(0); o < n+2; o++ {
			compareOffset(t, s, m, start, o)
		}
	} else {
		// Looking at every offset after every step makes long inputs
		// quadratic; between full checks, look where things change.
		for o := max(start, 2) - 2; o < start+4; o++ {
			compareOffset(t, s, m, start, o)
		}
		for o := max(want.Head, 2) - 2; o < want.Head+16; o++ {
			compareOffset(t, s, m, start, o)
		}
		for o := n - 8; o < n+2; o++ {
			compareOffset(t, s, m, start, o)
		}
	}
	for _, o := range dead[max(len(dead), 4)-4:] {
		compareOffset(t, s, m, start, o)
		compareOffset(t, s, m, start, o+1)
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

func compareOffset(t *testing.T, s *State, m *model, start, o uint64) {
	t.Helper()
	var wi uint64
	var ws int
	wok := false
	if (o >= start && o < uint64(len(m.events))) || m.isDead(o) {
		wi, ws, wok = m.events[o].index, m.events[o].slot, true
	}
	if i, slot, ok := s.Locate(o); i != wi || slot != ws || ok != wok {
		t.Fatalf("Locate(%d) = %d, %d, %v; model %d, %d, %v", o, i, slot, ok, wi, ws, wok)
	}
	wacked := o < uint64(len(m.events)) && !m.isPending(o)
	if got := s.IsAcked(o); got != wacked {
		t.Fatalf("IsAcked(%d) = %v, model %v", o, got, wacked)
	}
	var wattempts uint32
	if m.isPending(o) {
		wattempts = m.events[o].attempts
	}
	if got := s.Attempts(o); got != wattempts {
		t.Fatalf("Attempts(%d) = %d, model %d", o, got, wattempts)
	}
	var wdead DeadLetter
	if m.isDead(o) {
		wdead = m.events[o].dead
	}
	if got, ok := s.DeadLetter(o); got != wdead || ok != m.isDead(o) {
		t.Fatalf("DeadLetter(%d) = %+v, %v; model %+v, %v", o, got, ok, wdead, m.isDead(o))
	}
	// A key recorded is the event's; every event appended since the
	// state was last restored is recorded (a snapshot of version 3 records
	// none, and checkKeyInvariants holds the rest).
	held := o >= start && o < uint64(len(m.events))
	got, ok := s.KeyHashOf(o)
	if ok && (!held || got != KeyHash(m.events[o].event.Key)) {
		t.Fatalf("KeyHashOf(%d) = %#x, %v; model holds it: %v", o, got, ok, held)
	}
	if held && !ok && o >= s.keysFrom {
		t.Fatalf("KeyHashOf(%d) unknown, but keys are recorded from %d", o, s.keysFrom)
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

// Selectors for the kinds of step the fuzz program can take; the low five
// bits of each step's first byte pick one.
const (
	stepReserve     = 0
	stepCommit      = 2
	stepAbort       = 5
	stepPublish     = 6
	stepAck         = 8
	stepExpire      = 11
	stepSnapshot    = 12
	stepBad         = 13 // a nil command, an unknown op, or a tier advance (rare, like these)
	stepCommit2     = 14 // commit the newest reservation, sized to fit
	stepAckHead     = 15 // ack the event at the head
	stepAttempt     = 16
	stepAttemptHead = 18 // a failed attempt of the event at the head
	stepDead        = 19
	stepDeadHead    = 21 // dead-letter the event at the head
	stepReplay      = 23 // replay some dead letters, sometimes wrongly
	stepPurge       = 25
	stepPurgeAll    = 26
	stepPublish2    = 27 // more publishes and acks, so that the queue
	stepRetain      = 28 // start retaining, trim, or stop
	stepAck2        = 29 // does not drain too fast
	stepSeek        = 30
	stepAckDead     = 31 // ack a dead letter: a no-op
)

// The top three bits of a step's selector pick no step. Two of their
// values add something to it: selCapture captures a snapshot with
// SnapshotFunc before the step, selCheck checks the oldest one held, which
// must encode as MarshalBinary did when it was captured.
const (
	selCapture = 7 << 5
	selCheck   = 6 << 5
	maxHeld    = 16 // captures held at once; more check the oldest
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

// text returns a reason or error: usually short, sometimes longer than
// MaxDeadLetterText, with multi-byte and invalid UTF-8 near the cut.
func (p *fuzzProgram) text() string {
	b := p.r.next()
	if b < 250 {
		return strings.Repeat("e", int(b%4))
	}
	return strings.Repeat("x", MaxDeadLetterText-4+int(b-250)) + "é€\xff\x80😀tail"
}

// deadOffset picks a current dead letter, or anything when there is none
// or b says so.
func (p *fuzzProgram) deadOffset() uint64 {
	dead := p.m.deadOffsets()
	b := p.r.next()
	if len(dead) == 0 || b < 32 {
		return uint64(b) % (uint64(len(p.m.events)) + 2)
	}
	return dead[int(b)%len(dead)]
}

// replay builds a ReplayDead of a run of dead letters; b>>5 below 4
// spoils it in one of four ways.
func (p *fuzzProgram) replay(c *Command) {
	c.Op = OpReplayDead
	dead := p.m.deadOffsets()
	b, start := p.r.next(), int(p.r.next())
	if len(dead) > 0 {
		for i := start % len(dead); i < len(dead) && len(c.Offsets) < int(b%4)+1; i++ {
			c.Offsets = append(c.Offsets, dead[i])
			c.Events = append(c.Events, p.m.events[dead[i]].event)
		}
	}
	switch b >> 5 {
	case 0: // one event short
		if len(c.Events) > 0 {
			c.Events = c.Events[:len(c.Events)-1]
		}
	case 1: // an offset that may not be a dead letter
		c.Offsets = append(c.Offsets, p.offset())
		c.Events = append(c.Events, Event{})
	case 2: // out of order
		if len(c.Offsets) > 1 {
			c.Offsets[0], c.Offsets[1] = c.Offsets[1], c.Offsets[0]
			c.Events[0], c.Events[1] = c.Events[1], c.Events[0]
		}
	case 3: // not a copy
		if len(c.Events) > 0 {
			c.Events[0].Key += "x"
		}
	}
	if len(c.Events) == 0 {
		c.Events = nil
	}
}

// command returns the next step's command. ok=false means a snapshot step;
// a nil command with ok=true applies nothing.
func (p *fuzzProgram) command(sel byte) (c *Command, ok bool) {
	p.clock += int64(p.r.next()%8) - 1 // usually forward, sometimes back
	c = &Command{Time: p.clock}
	switch sel % 32 {
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
	case stepPublish, stepPublish + 1, stepPublish2:
		c.Op = OpPublish
		c.MaxQueueBytes = p.limit()
		c.Events = p.events()
	case stepAck, stepAck + 1, stepAck + 2, stepAck2:
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
	case stepAttempt, stepAttempt + 1:
		c.Op = OpAttempt
		for range p.r.next() % 5 {
			c.Offsets = append(c.Offsets, p.offset())
		}
	case stepAttemptHead:
		c.Op = OpAttempt
		c.Offsets = []uint64{p.m.head()}
	case stepDead, stepDead + 1:
		c.Op = OpDeadLetter
		for range p.r.next() % 4 {
			c.Dead = append(c.Dead, DeadInfo{Offset: p.offset(), Reason: p.text(), LastError: p.text()})
		}
	case stepDeadHead, stepDeadHead + 1:
		c.Op = OpDeadLetter
		c.Dead = []DeadInfo{{Offset: p.m.head(), Reason: p.text(), LastError: p.text()}}
	case stepReplay, stepReplay + 1:
		p.replay(c)
	case stepPurge:
		c.Op = OpPurgeDead
		for range p.r.next()%3 + 1 {
			c.Offsets = append(c.Offsets, p.deadOffset())
		}
	case stepPurgeAll:
		c.Op = OpPurgeDead
	case stepAckDead:
		c.Op = OpAck
		c.Offsets = []uint64{p.deadOffset()}
	case stepRetain:
		c.Op = OpRetain
		c.Time = 0
		if b := p.r.next(); b < 16 {
			c.OlderThan = RetainNone
		} else {
			c.OlderThan = p.clock - int64(b%32)
		}
	case stepSeek:
		c.Op = OpSeek
		switch b := p.r.next(); {
		case b < 64:
			c.From = p.offset()
		case b < 128:
			c.From = 0
		case b < 144:
			c.From = FromNow
		default:
			c.From = uint64(b) % (uint64(len(p.m.events)) + 2)
		}
		if b := p.r.next(); b < 128 {
			c.Time = 0
		} else {
			c.Time = p.clock - int64(b%32)
		}
	case stepSnapshot:
		return nil, false
	case stepBad:
		switch b := p.r.next(); b % 3 {
		case 0:
			return nil, true
		case 1:
			c.Op = 0
		default:
			if b < 128 {
				c.Op = OpTierAdvance + 1 + Op(b%8)
				break
			}
			// Usually up to the entry before this one; sometimes to
			// this entry, or beyond it, which is refused.
			c.Op, c.Time = OpTierAdvance, 0
			back := uint64(p.r.next() % 8)
			c.From = max(p.m.applied+2, back) - back
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
	// Short runs append too few events to fill a chunk of pending entries;
	// start near the end of one, so that they cross into the next.
	shiftPending(s, chunkLen-1-len(data)%32)
	var held []capture
	check := func() {
		t.Helper()
		if err := held[0].check(); err != nil {
			t.Fatal(err)
		}
		held = held[1:]
	}
	for step := 0; len(p.r.b) > 0 && step < 1000; step++ {
		sel := p.r.next()
		switch sel &^ 31 {
		case selCapture:
			if len(held) == maxHeld {
				check()
			}
			want := snapshot(t, s)
			held = append(held, capture{f: s.SnapshotFunc(), want: want, index: s.Applied()})
		case selCheck:
			if len(held) > 0 {
				check()
			}
		}
		index := p.index()
		c, ok := p.command(sel)
		if !ok {
			// Captures outlive the state they were taken of.
			s = restore(t, s)
			shiftPending(s, chunkLen-1-int(s.Applied()%32))
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
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: %+v at index %d: %+v, model %+v", step, c, index, got, want)
		}
		compare(t, s, m, step%32 == 0)
	}
	for len(held) > 0 {
		check()
	}
	s = restore(t, s)
	compare(t, s, m, true)
}

// shiftPending moves the entries of s's pending list so that the first is
// at position start of its first chunk. The shard stays the same.
func shiftPending(s *State, start int) {
	l := pendingList{chunks: []pendingChunk{{size: new([chunkLen]int64)}}, start: start}
	for i := range s.def.pending.len() {
		l.push(s.def.pending.size(i))
	}
	s.def.pending.eachAttempt(l.setAttempts)
	s.def.pending = l
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
