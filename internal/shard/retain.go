package shard

import "math"

// Retention and seek.
//
// Without retention the log keeps an event only while some cursor holds
// it (see State.minHead): that is a topic's retention of 0, and it costs
// nothing beyond the cursors. A topic with retention keeps events for a
// time after every subscription is done with them, so that a
// subscription can start from the earliest retained event, or seek back
// and have what it had delivered since delivered again, as Pub/Sub's
// seek does.
//
// The shard learns of retention from the commands alone: it has no
// clock, and the topic's attribute is not part of its state. The leader
// of a shard of a topic with retention proposes OpRetain periodically,
// with the cutoff it computes from its clock, as it proposes OpExpire for
// stale reservations. The first Retain starts retaining, from the lowest
// head on (what is freed already stays freed); each frees the retained
// events published before its cutoff; a Retain with RetainNone stops
// retaining. So a shard of a topic whose retention is 0 never sees a
// Retain, and frees its events exactly as before.
//
// While retaining, the shard keeps each event's size (State.retained),
// because a cursor's pending list forgets the size of a done event and a
// replayed event needs it for the byte accounting, and the runs from the
// first retained offset on, so that Locate and CompactIndex keep the log
// entries that hold the retained events.

// RetainNone is the Command.OlderThan of a Retain that stops retaining:
// it frees every retained event no cursor holds, and the shard frees
// events as soon as every subscription is done with them again.
const RetainNone = math.MaxInt64

// logStart returns the lowest offset the shard holds an event for: the
// first retained one if it retains, else the lowest head. The runs
// cover the offsets from there to the next offset.
func (s *State) logStart() uint64 {
	if s.retaining {
		// retainFrom never passes the lowest head: a Retain frees only
		// events no cursor holds, and no cursor starts or seeks below
		// logStart.
		return s.retainFrom
	}
	return s.minHead()
}

// sizeOf returns the size of the event at offset if the shard holds it
// for a cursor to take: retains it, or, without retention, some cursor
// has it pending.
func (s *State) sizeOf(offset uint64) (int64, bool) {
	if s.retaining && offset >= s.retainFrom {
		size := s.retained.size(int(offset - s.retainFrom))
		return size, size != acked
	}
	return s.heldSize(offset)
}

// retain applies a Retain: it starts retaining if the shard does not
// yet, and frees, in log order, the retained events published before
// c.OlderThan, up to the first one published at or after it or the
// first one a cursor holds. Publish times follow the proposers' clocks,
// which are not quite monotonic across leaders: stopping at the first
// later event keeps what is retained a contiguous range.
func (s *State) retain(c *Command) Result {
	if c.OlderThan == RetainNone {
		if !s.retaining {
			return Result{}
		}
		n := s.minHead() - s.retainFrom
		s.retaining, s.retainFrom, s.retained = false, 0, pendingList{}
		s.dropRuns()
		return Result{Count: int(n)}
	}
	if !s.retaining {
		s.retaining = true
		s.retainFrom = s.minHead()
		for o := s.retainFrom; o < s.nextOffset; o++ {
			size, ok := s.heldSize(o)
			if !ok {
				size = acked // done by every cursor out of order: freed already
			}
			s.retained.push(size)
		}
	}
	h := s.minHead()
	to := s.retainFrom
	for i := 0; i < len(s.runs) && to < h; i++ {
		r := &s.runs[i]
		if r.end() <= to {
			continue
		}
		if r.time >= c.OlderThan {
			break
		}
		to = min(r.end(), h)
	}
	n := to - s.retainFrom
	if n == 0 {
		return Result{}
	}
	s.retained.dropFront(int(n))
	s.retainFrom = to
	s.dropRuns()
	return Result{Count: int(n)}
}

// seek applies a Seek: it moves the subscription's cursor to c.From,
// clamped to [logStart, nextOffset], or, if c.Time is set, to the first
// event from there on published at or after it. Every event the shard holds from
// there on becomes pending again for the subscription, with no failed
// attempts, whether it was pending, acknowledged, skipped or never the
// subscription's; its dead letters stay where they are, in the
// dead-letter queue and not pending. The pending events before c.From
// are passed over, as if never the subscription's.
func (s *State) seek(c *Command) Result {
	cur, err := s.cursorFor(c.Subscription)
	if err != nil {
		return reject(err)
	}
	next := s.nextOffset
	from := max(min(c.From, next), s.logStart())
	if c.Time != 0 {
		from = s.offsetAt(from, c.Time)
	}
	var passed uint64
	for o := cur.head; o < min(from, next); o++ {
		if cur.isPending(o, next) {
			passed++
		}
	}
	// Rebuild the pending list rather than edit it: a seek is rare, and
	// a new list shares nothing with frozen copies.
	var l pendingList
	var events, bytes int64
	var replayed uint64
	for o := from; o < next; o++ {
		size := int64(acked)
		if cur.isPending(o, next) {
			size = cur.pending.size(int(o - cur.head))
		} else if _, dead := cur.findDead(o); !dead {
			if sz, ok := s.sizeOf(o); ok {
				size = sz
				replayed++
			}
		}
		l.push(size)
		if size != acked {
			events++
			bytes += size
		}
	}
	cur.head, cur.pending = from, l
	cur.pendingEvents, cur.pendingBytes = events, bytes
	cur.replayed += replayed
	cur.excluded += passed
	r := Result{FirstOffset: from, Count: int(replayed)}
	if from < next {
		// Before the runs may drop: the cursor may advance past from.
		r.Time = s.runOf(from).time
	}
	cur.advance()
	s.dropRuns()
	return r
}

// Retaining reports whether the shard retains events (see OpRetain).
func (s *State) Retaining() bool { return s.retaining }

// Earliest returns the lowest offset a subscription can start or seek
// at: the first retained event's if the shard retains, else the lowest
// head of its subscriptions. It equals NextOffset when the shard holds
// no event.
func (s *State) Earliest() uint64 { return s.logStart() }

// OffsetAt returns the first offset, from Earliest on, of an event
// published at or after t, in log order; NextOffset if there is none.
// It is where a Seek with Time t goes.
func (s *State) OffsetAt(t int64) uint64 { return s.offsetAt(s.logStart(), t) }

// offsetAt is OffsetAt from start on, which must be at least logStart.
func (s *State) offsetAt(start uint64, t int64) uint64 {
	for i := range s.runs {
		r := &s.runs[i]
		if r.end() > start && r.time >= t {
			return max(r.first, start)
		}
	}
	return s.nextOffset
}

// OldestRetained returns the publish time of the first event the shard
// retains beyond what its cursors hold: a Retain with a later cutoff
// frees it. ok is false if there is none, or the shard does not retain.
func (s *State) OldestRetained() (t int64, ok bool) {
	if !s.retaining || s.retainFrom >= s.minHead() {
		return 0, false
	}
	return s.runOf(s.retainFrom).time, true
}
