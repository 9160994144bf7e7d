package shard

import (
	"cmp"
	"fmt"
	"slices"
)

// A cursor is one subscription's progress through the shard's log: which
// of the events from its head on it has still to deliver, the failed
// attempts of each, and its dead letters. The events themselves are the
// shard's, appended once and shared by every cursor; the log keeps them
// until every cursor is past them (see State.minHead). That is how one
// log serves many subscriptions, each at its own pace.
//
// Like State, a cursor keeps what grows with its queue in memory that a
// frozen copy can share (see State.freeze).
type cursor struct {
	id   uint64 // the subscription; 0 is the topic's default one
	head uint64 // lowest offset still pending

	// Entry i of pending is the event at offset head+i: its Size, or acked
	// if it is done (acknowledged, skipped or dead-lettered, out of
	// order), and its failed attempts, which go when it is done. Entry 0
	// is never acked: the head advances past done events as soon as it
	// can.
	pending       pendingList
	pendingEvents int64 // entries of pending that are not acked
	pendingBytes  int64 // sum of those entries

	// dead holds the dead letters, in offset order. Their log entries are
	// kept (see CompactIndex), so they carry their own location. The
	// array may be shared with a frozen copy if deadShared is set: then
	// only appends write it in place.
	dead        []deadLetter
	deadShared  bool
	deadBytes   int64 // sum of their sizes
	deadDropped int   // see dropFront

	deadLettered uint64 // events ever dead-lettered
	retried      uint64 // failed delivery attempts ever recorded
	skipped      uint64 // events ever skipped: the subscription's filter rejected them

	// excluded counts the offsets below the next offset that were never
	// this cursor's to deliver: those before it started, events replayed
	// from another subscription's dead letters, and pending events a seek
	// passed over. Every other offset is pending, acknowledged, skipped
	// or dead-lettered (see replayed for seeks), so the acknowledged ones
	// need no counter of their own.
	excluded uint64

	// replayed counts the events a Seek made pending again, each time it
	// did. With it the identity behind acked holds across seeks: every
	// offset below the next one entered the pending list once at its
	// append (or is excluded) plus once per replay, and left it once per
	// ack, skip, dead letter or forward seek (which counts as excluded).
	replayed uint64
}

// isPending reports whether the event at offset is this cursor's to
// deliver and neither acknowledged, skipped nor dead-lettered; next is the
// shard's next offset.
func (c *cursor) isPending(offset, next uint64) bool {
	return offset >= c.head && offset < next && c.pending.size(int(offset-c.head)) != acked
}

// push appends an entry for the next offset: the event's size, or acked
// for an event that is not the cursor's.
func (c *cursor) push(size int64) {
	c.pending.push(size)
	if size == acked {
		c.excluded++
		return
	}
	c.pendingBytes += size
	c.pendingEvents++
}

// markDone marks the pending entry i done and returns its size.
func (c *cursor) markDone(i int) int64 {
	if c.pending.attempts(i) != 0 {
		c.pending.setAttempts(i, 0)
	}
	size := c.pending.ack(i)
	c.pendingEvents--
	c.pendingBytes -= size
	return size
}

// advance moves the head past done entries at the front and reports
// whether it moved.
func (c *cursor) advance() bool {
	k := c.pending.leadingAcked()
	if k == 0 {
		return false
	}
	c.head += uint64(k)
	c.pending.dropFront(k)
	return true
}

// freeze returns a copy of c that c does not change from now on: see
// State.freeze.
func (c *cursor) freeze() cursor {
	f := *c
	f.pending = c.pending.freeze()
	c.deadShared = true
	return f
}

// acked returns the number of events the cursor has acknowledged, given
// the shard's next offset.
func (c *cursor) acked(next uint64) uint64 {
	return next + c.replayed - c.excluded - uint64(c.pendingEvents) - c.deadLettered - c.skipped
}

func compareCursor(c *cursor, id uint64) int { return cmp.Compare(c.id, id) }

// cursorFor returns the cursor of subscription id.
func (s *State) cursorFor(id uint64) (*cursor, error) {
	if id == 0 {
		if s.detached {
			return nil, fmt.Errorf("%w: the topic's default subscription was deleted", ErrUnknownSubscription)
		}
		return &s.def, nil
	}
	i, ok := slices.BinarySearchFunc(s.subs, id, compareCursor)
	if !ok {
		return nil, fmt.Errorf("%w: subscription %d has no cursor on this shard", ErrUnknownSubscription, id)
	}
	return s.subs[i], nil
}

// active yields the cursors of the shard's subscriptions: the default
// one's unless it was deleted, then the others in id order.
func (s *State) active(yield func(*cursor) bool) {
	if !s.detached && !yield(&s.def) {
		return
	}
	for _, c := range s.subs {
		if !yield(c) {
			return
		}
	}
}

// minHead returns the lowest head of all cursors: the log holds the
// events from there on. With no cursor at all it is the next offset:
// events published to a topic without subscriptions go nowhere.
func (s *State) minHead() uint64 {
	if len(s.subs) == 0 && !s.detached {
		return s.def.head // the common shard, on the hot path of every ack
	}
	h := s.nextOffset
	for c := range s.active {
		h = min(h, c.head)
	}
	return h
}

// advance moves c's head past its done events, and the log's start with
// it if c was the furthest behind.
func (s *State) advance(c *cursor) {
	if c.advance() {
		s.dropRuns()
	}
}

// dropRuns drops the runs wholly below every cursor's head and the
// retained events, and the key hashes of the events below them.
func (s *State) dropRuns() {
	h := s.logStart()
	j := 0
	for j < len(s.runs) && s.runs[j].end() <= h {
		j++
	}
	s.runs = dropFront(s.runs, &s.runsDead, j)
	s.dropKeys(h)
}

// heldSize returns the size of the event at offset if some cursor still
// has it pending.
func (s *State) heldSize(offset uint64) (int64, bool) {
	for c := range s.active {
		if c.isPending(offset, s.nextOffset) {
			return c.pending.size(int(offset - c.head)), true
		}
	}
	return 0, false
}

// subscribe starts the cursor of a subscription. Its events are those the
// shard still holds for some cursor or retains, from c.From on: with no
// retention, an event every subscription is done with is freed, so a new
// subscription starting "from the earliest" starts with what is still
// undelivered somewhere.
func (s *State) subscribe(c *Command) Result {
	if _, err := s.cursorFor(c.Subscription); err == nil {
		return Result{} // a retried subscribe changes nothing
	}
	from := max(min(c.From, s.nextOffset), s.logStart())
	cur := cursor{id: c.Subscription, head: from, excluded: from}
	for o := from; o < s.nextOffset; o++ {
		if size, ok := s.sizeOf(o); ok {
			cur.push(size)
		} else {
			cur.push(acked)
		}
	}
	if c.Subscription == 0 {
		s.def, s.detached = cur, false
		s.advance(&s.def)
		return Result{Count: 1}
	}
	p := &cur
	i, _ := slices.BinarySearchFunc(s.subs, c.Subscription, compareCursor)
	s.subs = slices.Insert(s.subs, i, p)
	s.advance(p)
	return Result{Count: 1}
}

// unsubscribe drops a subscription's cursor, its dead letters with it;
// the log lets go of what only it held.
func (s *State) unsubscribe(c *Command) Result {
	if _, err := s.cursorFor(c.Subscription); err != nil {
		return Result{} // unsubscribing is idempotent
	}
	if c.Subscription == 0 {
		// A deleted default subscription stays a cursor that is never
		// behind, so that the State methods that read it need no case of
		// their own.
		s.def, s.detached = cursor{head: s.nextOffset, excluded: s.nextOffset}, true
	} else {
		i, _ := slices.BinarySearchFunc(s.subs, c.Subscription, compareCursor)
		// A frozen copy has a slice of its own: this one may change in
		// place.
		s.subs = slices.Delete(s.subs, i, i+1)
	}
	s.dropRuns()
	return Result{Count: 1}
}

// A Cursor is a read-only view of one subscription's progress on a shard,
// valid until the state next changes.
type Cursor struct {
	s *State
	c *cursor
}

// Cursor returns the view of subscription sub's cursor, if the shard has
// one.
func (s *State) Cursor(sub uint64) (Cursor, bool) {
	c, err := s.cursorFor(sub)
	if err != nil {
		return Cursor{}, false
	}
	return Cursor{s, c}, true
}

// Subscriptions returns the ids of the subscriptions with a cursor on the
// shard, in id order: 0 first, unless the default subscription was
// deleted.
func (s *State) Subscriptions() []uint64 {
	var ids []uint64
	for c := range s.active {
		ids = append(ids, c.id)
	}
	return ids
}

// Head returns the lowest offset the subscription has still to deliver:
// every offset below it is done. It equals the next offset when nothing
// is pending.
func (v Cursor) Head() uint64 { return v.c.head }

// IsAcked reports whether the event at offset is done for the
// subscription: acknowledged, skipped, dead-lettered, or never its to
// deliver. It reports false for pending events and for offsets not yet
// assigned.
func (v Cursor) IsAcked(offset uint64) bool {
	switch {
	case offset < v.c.head:
		return true
	case offset >= v.s.nextOffset:
		return false
	}
	return v.c.pending.size(int(offset-v.c.head)) == acked
}

// Attempts returns the failed delivery attempts recorded for the pending
// event at offset; 0 for events not pending.
func (v Cursor) Attempts(offset uint64) uint32 {
	if offset < v.c.head || offset >= v.s.nextOffset {
		return 0
	}
	return v.c.pending.attempts(int(offset - v.c.head))
}

// DeadLetter returns the subscription's dead letter at offset, if there is
// one.
func (v Cursor) DeadLetter(offset uint64) (DeadLetter, bool) {
	if j, ok := v.c.findDead(offset); ok {
		return v.c.dead[j].DeadLetter, true
	}
	return DeadLetter{}, false
}

// DeadLetters returns the subscription's dead letters at offsets from on,
// in offset order, at most max of them; max <= 0 means all. To page
// through them, pass the last offset returned plus one as the next from.
func (v Cursor) DeadLetters(from uint64, max int) []DeadLetter {
	c := v.c
	j, _ := c.findDead(from)
	n := len(c.dead) - j
	if max > 0 && max < n {
		n = max
	}
	if n == 0 {
		return nil
	}
	out := make([]DeadLetter, n)
	for i := range out {
		out[i] = c.dead[j+i].DeadLetter
	}
	return out
}

// Stats returns a summary of the shard as the subscription sees it.
// Reservations are the shard's, shared by all subscriptions.
func (v Cursor) Stats() Stats {
	s, c := v.s, v.c
	acked := c.acked(s.nextOffset)
	st := Stats{
		Events:          c.pendingEvents,
		Bytes:           c.pendingBytes,
		ReservedBytes:   s.reservedBytes,
		Reservations:    len(s.reservations),
		Published:       s.nextOffset,
		Acked:           acked,
		NextOffset:      s.nextOffset,
		Head:            c.head,
		DeadLetters:     int64(len(c.dead)),
		DeadLetterBytes: c.deadBytes,
		Delivered:       acked,
		DeadLettered:    c.deadLettered,
		Retried:         c.retried,
		Skipped:         c.skipped,
	}
	if c.head < s.nextOffset {
		st.OldestEventTime = s.runOf(c.head).time
	}
	return st
}
