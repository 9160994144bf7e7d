package shard

import (
	"fmt"
	"math"
	"sort"
)

// State is the state machine of one shard. The zero value is an empty
// shard, as is the result of New. A State is not safe for concurrent use.
type State struct {
	applied         uint64 // log index of the last applied command
	nextOffset      uint64 // offset the next appended event gets
	head            uint64 // lowest offset not yet acknowledged
	lastReservation uint64 // id of the most recent reservation

	reservations  map[uint64]reservation
	reservedBytes int64

	// pending[i] is the Size of the event at offset head+i, or acked if
	// that event was acknowledged out of order. pending[0] is never acked:
	// the head advances past acknowledged events as soon as it can.
	pending       []int64
	pendingEvents int64 // entries of pending that are not acked
	pendingBytes  int64 // sum of those entries
	pendingDead   int   // see dropFront

	// runs map offsets to the log entries holding them, one run per Commit
	// or Publish, in offset order. They cover exactly [head, nextOffset):
	// runs wholly below the head are dropped.
	runs     []run
	runsDead int // see dropFront
}

// acked marks an acknowledged entry of State.pending. Sizes are never
// negative.
const acked = -1

type reservation struct {
	bytes int64
	count int
	time  int64
}

// A run is a block of consecutive offsets appended by one log entry.
type run struct {
	first uint64 // offset of the entry's first event
	count uint64 // number of events in the entry
	index uint64 // log index of the entry
	time  int64  // the entry's Command.Time
}

func (r *run) end() uint64 { return r.first + r.count }

// A Result reports the outcome of applying one command.
type Result struct {
	ReservationID uint64 // Reserve: the new reservation's id

	// FirstOffset is, for Commit and Publish, the offset assigned to the
	// first event; the others follow consecutively, in order.
	FirstOffset uint64

	// Count is, for Commit and Publish, the number of events appended; for
	// Ack, the number of events newly acknowledged; for Abort and Expire,
	// the number of reservations released.
	Count int

	// Err is non-nil if the command was rejected. The state is then
	// unchanged, except that Applied has advanced to the command's index.
	Err error
}

// New returns an empty shard.
func New() *State {
	return &State{reservations: make(map[uint64]reservation)}
}

// Apply applies cmd, carried by the log entry at index, and reports the
// outcome.
//
// Index must be greater than Applied; otherwise Apply rejects the command
// with ErrInvalidCommand and changes nothing, not even Applied. Any other
// rejection still records index as applied. A nil cmd is a no-op that only
// records index as applied, for log entries that carry no command (such as
// the empty entry a new Raft leader appends).
func (s *State) Apply(index uint64, cmd *Command) Result {
	if index <= s.applied {
		return reject(fmt.Errorf("%w: log index %d is not after applied index %d", ErrInvalidCommand, index, s.applied))
	}
	s.applied = index
	if cmd == nil {
		return Result{}
	}
	switch cmd.Op {
	case OpReserve:
		return s.reserve(cmd)
	case OpCommit:
		return s.commit(index, cmd)
	case OpAbort:
		return s.abort(cmd)
	case OpPublish:
		return s.publish(index, cmd)
	case OpAck:
		return s.ack(cmd)
	case OpExpire:
		return s.expire(cmd)
	}
	return reject(fmt.Errorf("%w: unknown op %d", ErrInvalidCommand, cmd.Op))
}

func reject(err error) Result { return Result{Err: err} }

func (s *State) reserve(c *Command) Result {
	switch {
	case c.Bytes < 0:
		return reject(fmt.Errorf("%w: reserve of negative bytes %d", ErrInvalidCommand, c.Bytes))
	case c.Count < 0:
		return reject(fmt.Errorf("%w: reserve of negative count %d", ErrInvalidCommand, c.Count))
	case c.MaxQueueBytes < 0:
		return reject(fmt.Errorf("%w: negative max queue bytes %d", ErrInvalidCommand, c.MaxQueueBytes))
	}
	if err := s.checkSpace(c.Bytes, c.MaxQueueBytes); err != nil {
		return reject(err)
	}
	s.lastReservation++
	id := s.lastReservation
	if s.reservations == nil {
		s.reservations = make(map[uint64]reservation)
	}
	s.reservations[id] = reservation{bytes: c.Bytes, count: c.Count, time: c.Time}
	s.reservedBytes += c.Bytes
	return Result{ReservationID: id}
}

// checkSpace reports whether n more bytes may be held under limit.
//
// It also keeps pendingBytes+reservedBytes from overflowing, which only
// absurd requests against an unlimited queue could cause; everything else
// relies on that sum fitting in an int64.
func (s *State) checkSpace(n, limit int64) error {
	used := s.pendingBytes + s.reservedBytes
	if limit > 0 && n > limit-used {
		return &queueFullError{pending: s.pendingBytes, reserved: s.reservedBytes, requested: n, limit: limit}
	}
	if n > math.MaxInt64-used {
		return fmt.Errorf("%w: %d more bytes overflow the shard's byte count of %d", ErrInvalidCommand, n, used)
	}
	return nil
}

func (s *State) commit(index uint64, c *Command) Result {
	if len(c.Events) == 0 {
		return reject(fmt.Errorf("%w: commit of no events to reservation %d", ErrInvalidCommand, c.ReservationID))
	}
	r, ok := s.reservations[c.ReservationID]
	if !ok {
		return reject(fmt.Errorf("%w: reservation %d", ErrUnknownReservation, c.ReservationID))
	}
	if r.count > 0 && len(c.Events) > r.count {
		return reject(fmt.Errorf("%w: %d events for reservation %d of %d events",
			ErrReservationTooSmall, len(c.Events), c.ReservationID, r.count))
	}
	if size := eventsSize(c.Events); size > r.bytes {
		return reject(fmt.Errorf("%w: %d bytes of events for reservation %d of %d bytes",
			ErrReservationTooSmall, size, c.ReservationID, r.bytes))
	}
	// The reservation's bytes were already counted against the limit, so
	// moving the events into the queue needs no further check: their size
	// is at most what is released here.
	delete(s.reservations, c.ReservationID)
	s.reservedBytes -= r.bytes
	return s.appendEvents(index, c.Time, c.Events)
}

func (s *State) abort(c *Command) Result {
	r, ok := s.reservations[c.ReservationID]
	if !ok {
		// Aborting is idempotent: a retried abort, or one racing an
		// expiry, must not fail.
		return Result{}
	}
	delete(s.reservations, c.ReservationID)
	s.reservedBytes -= r.bytes
	return Result{Count: 1}
}

func (s *State) publish(index uint64, c *Command) Result {
	if len(c.Events) == 0 {
		return reject(fmt.Errorf("%w: publish of no events", ErrInvalidCommand))
	}
	if c.MaxQueueBytes < 0 {
		return reject(fmt.Errorf("%w: negative max queue bytes %d", ErrInvalidCommand, c.MaxQueueBytes))
	}
	if err := s.checkSpace(eventsSize(c.Events), c.MaxQueueBytes); err != nil {
		return reject(err)
	}
	return s.appendEvents(index, c.Time, c.Events)
}

// appendEvents assigns the next offsets to events, carried by the log
// entry at index with the given publish time.
func (s *State) appendEvents(index uint64, time int64, events []Event) Result {
	first := s.nextOffset
	for i := range events {
		size := events[i].Size()
		s.pending = append(s.pending, size)
		s.pendingBytes += size
	}
	n := uint64(len(events))
	s.pendingEvents += int64(n)
	s.runs = append(s.runs, run{first: first, count: n, index: index, time: time})
	s.nextOffset += n
	return Result{FirstOffset: first, Count: len(events)}
}

func (s *State) ack(c *Command) Result {
	// Validate everything first: a rejected command must change nothing.
	for _, o := range c.Offsets {
		if o >= s.nextOffset {
			return reject(fmt.Errorf("%w: offset %d (next offset is %d)", ErrUnknownOffset, o, s.nextOffset))
		}
	}
	n := 0
	for _, o := range c.Offsets {
		if o < s.head {
			continue // acknowledged long ago
		}
		i := o - s.head
		size := s.pending[i]
		if size == acked {
			continue // a repeated ack, within this command or across them
		}
		s.pending[i] = acked
		s.pendingEvents--
		s.pendingBytes -= size
		n++
	}
	s.advance()
	return Result{Count: n}
}

// advance moves the head past acknowledged events at the front of the
// queue and drops the bookkeeping for them.
func (s *State) advance() {
	k := 0
	for k < len(s.pending) && s.pending[k] == acked {
		k++
	}
	if k == 0 {
		return
	}
	s.head += uint64(k)
	s.pending = dropFront(s.pending, &s.pendingDead, k)
	j := 0
	for j < len(s.runs) && s.runs[j].end() <= s.head {
		j++
	}
	s.runs = dropFront(s.runs, &s.runsDead, j)
}

// dropFront drops the first k elements of x, a slice that is appended to
// at the back and consumed from the front. Reslicing alone would keep the
// dropped elements' memory for as long as appends fit in the backing
// array, which after a large backlog drains can be a long time. So *dead
// counts the elements dropped since x was last copied, and once they
// outnumber the live ones twice over, the live ones move to a fresh array.
// Each copy costs less than the drops since the previous one, and the
// memory held stays within a small multiple of the live elements.
func dropFront[T any](x []T, dead *int, k int) []T {
	x = x[k:]
	*dead += k
	if *dead < max(2*len(x), 64) {
		return x
	}
	*dead = 0
	return append(make([]T, 0, len(x)+len(x)/2+8), x...)
}

func (s *State) expire(c *Command) Result {
	n := 0
	// Map order does not matter: the outcome is the same set of deletions.
	for id, r := range s.reservations {
		if r.time < c.OlderThan {
			delete(s.reservations, id)
			s.reservedBytes -= r.bytes
			n++
		}
	}
	return Result{Count: n}
}

// Applied returns the log index of the last applied command, or 0 if none.
func (s *State) Applied() uint64 { return s.applied }

// NextOffset returns the offset the next appended event will get, which is
// also the number of events ever appended.
func (s *State) NextOffset() uint64 { return s.nextOffset }

// Head returns the delivery head: the lowest offset not yet acknowledged.
// Every offset below it is done. Head equals NextOffset when nothing is
// pending.
func (s *State) Head() uint64 { return s.head }

// Locate returns the log index of the entry holding the event at offset,
// and the event's position among that entry's Events. It reports ok=false
// for offsets below Head, whose entries the log may already have dropped,
// and for offsets not yet assigned. An offset above Head that was
// acknowledged out of order is still located.
func (s *State) Locate(offset uint64) (index uint64, slot int, ok bool) {
	if offset < s.head || offset >= s.nextOffset {
		return 0, 0, false
	}
	i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i].end() > offset })
	r := &s.runs[i]
	return r.index, int(offset - r.first), true
}

// IsAcked reports whether the event at offset has been acknowledged. It
// reports false for offsets not yet assigned.
func (s *State) IsAcked(offset uint64) bool {
	if offset < s.head {
		return true
	}
	if offset >= s.nextOffset {
		return false
	}
	return s.pending[offset-s.head] == acked
}

// CompactIndex returns the lowest log index still needed to read an
// unacknowledged event, or Applied()+1 if no event is pending. Entries
// below it are no longer needed by the queue; the host may truncate the
// log below the smaller of this and its latest snapshot's index.
func (s *State) CompactIndex() uint64 {
	if len(s.runs) == 0 {
		return s.applied + 1
	}
	return s.runs[0].index
}

// A Reservation describes a held reservation.
type Reservation struct {
	ID    uint64
	Bytes int64 // bytes held
	Count int   // events it is for; 0 means any number
	Time  int64 // Command.Time of the Reserve
}

// Reservation returns the reservation with the given id, if it is held.
func (s *State) Reservation(id uint64) (Reservation, bool) {
	r, ok := s.reservations[id]
	if !ok {
		return Reservation{}, false
	}
	return Reservation{ID: id, Bytes: r.bytes, Count: r.count, Time: r.time}, true
}

// Stats summarizes a shard.
type Stats struct {
	Events          int64  // pending (committed, not acknowledged) events
	Bytes           int64  // total Size of the pending events
	ReservedBytes   int64  // bytes held by reservations
	Reservations    int    // reservations held
	OldestEventTime int64  // publish time of the event at Head; 0 if none is pending
	Published       uint64 // events ever appended
	Acked           uint64 // events ever acknowledged
	NextOffset      uint64
	Head            uint64
}

// Stats returns a summary of the shard.
func (s *State) Stats() Stats {
	st := Stats{
		Events:        s.pendingEvents,
		Bytes:         s.pendingBytes,
		ReservedBytes: s.reservedBytes,
		Reservations:  len(s.reservations),
		// Offsets are dense from 0, so both totals follow from the offsets
		// and need no counters of their own.
		Published:  s.nextOffset,
		Acked:      s.nextOffset - uint64(s.pendingEvents),
		NextOffset: s.nextOffset,
		Head:       s.head,
	}
	if len(s.runs) > 0 {
		st.OldestEventTime = s.runs[0].time
	}
	return st
}
