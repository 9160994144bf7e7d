// Package consume is the consumer side of a shard on the node that leads
// it: the pull leases (Leases), and the local reads that hand events out
// under them. Every read is of one subscription (Shard.Sub): the events
// it has still to deliver, by its own cursor, under its own leases. Pull
// leases live in the leader's memory, so these operations run on the
// shard's leader; the node forwards those made elsewhere to it, and turns
// what they return into its API's deliveries.
//
// It reads the shard only through Group, which the node's shard runtime
// implements.
package consume

import (
	"context"
	"errors"
	"fmt"
	"time"

	"herald/internal/delivery"
	"herald/internal/shard"
)

// DefaultVisibility is how long a fetched event stays leased unless the
// fetch says otherwise; an ack held for commit (Leases.HoldForAck) is
// held as long.
const DefaultVisibility = 30 * time.Second

// MaxScan is how many pending events a fetch indexes at most, of those
// appended since the fetch before (see keyIndex): it bounds the first
// fetches of a new leader over a long backlog.
const MaxScan = 20000

// Group is a shard's Raft group as this node holds it. Its errors are the
// node's, ready to return.
type Group interface {
	// View runs f on the shard's state as this node has applied it, on
	// the group's loop.
	View(ctx context.Context, f func(m *shard.Machine)) error
	// Entry returns the command of the log entry at index, which holds
	// the event at offset (for the error).
	Entry(offset, index uint64) (shard.Command, error)
	// ReadBarrier confirms that this node still leads the group, and has
	// applied every entry committed before the call.
	ReadBarrier(ctx context.Context) error
}

// Shard is one shard of a topic, as the consumers of one of its
// subscriptions on this node read it.
type Shard struct {
	Topic string
	Index int // within the topic
	// Sub is the subscription read: 0 is the topic's default one. A
	// subscription whose cursor the shard does not hold (yet: a node
	// starts it moments after the subscription is created) has nothing
	// to read.
	Sub    uint64
	Group  Group
	Leases *Leases // the shard's, of every subscription
}

// Lease is an event handed to a pull consumer: the event at Offset,
// leased under lease number Number.
type Lease struct {
	Offset  uint64
	Number  uint64
	Event   shard.Event
	Time    time.Time // publish time
	Attempt uint32    // times handed out, this one included
}

// ErrNoCursor is returned by ReadPending for a subscription that has no
// cursor on the shard: it was created a moment ago, and the shard has not
// started it yet (a retry soon finds it), or it was deleted.
var ErrNoCursor = errors.New("the subscription has not started on this shard yet")

// ReadPending returns up to limit pending events of the subscription —
// neither acknowledged, skipped nor dead-lettered — with offsets >= from,
// in offset order, and the offset to continue from; ErrNoCursor if the
// shard holds no cursor of the subscription. It is how push dispatchers
// read the queue.
//
// A push dispatcher takes ErrNoCursor as it takes any failure to read:
// it tries again a little later. So one started when its subscription was
// recorded, before the shard's leader started its cursor, begins once it
// has, wherever the leader is.
func (s Shard) ReadPending(ctx context.Context, from uint64, limit int) (evs []delivery.Event, next uint64, err error) {
	var locs []location
	next = from
	verr := s.Group.View(ctx, func(m *shard.Machine) {
		c, ok := m.Cursor(s.Sub)
		if !ok {
			// The reader stays where it is: a cursor started from the
			// earliest event will have events before the next offset.
			err = ErrNoCursor
			return
		}
		o := max(from, c.Head())
		for ; o < m.NextOffset() && len(locs) < limit; o++ {
			if c.IsAcked(o) { // done, or never the subscription's
				continue
			}
			if idx, slot, ok := m.Locate(o); ok {
				locs = append(locs, location{o, idx, slot, c.Attempts(o)})
			}
		}
		next = o
	})
	if verr != nil {
		return nil, from, verr
	}
	if err != nil {
		return nil, from, err
	}
	entries := s.entries(false)
	evs = make([]delivery.Event, 0, len(locs))
	for _, l := range locs {
		ev, at, ok, err := entries.event(l)
		if err != nil {
			return nil, from, err
		}
		if ok {
			evs = append(evs, delivery.Event{Offset: l.offset, Event: ev, Time: at, Attempts: l.attempts})
		}
	}
	return evs, next, nil
}

// A location is where a pending event is in the shard's log.
type location struct {
	offset, index uint64
	slot          int
	attempts      uint32
}

// Fetch leases up to max events of the shard for visibility, in offset
// order: of each key whose first pending event is not leased, oldest
// first, a run of its next pending events (see Spread for how long), all
// leased until the same time. So a key is held by one fetch's leases at a
// time, and its events go out in order: none is handed out while an
// earlier one is leased to another fetch. A nack of an event of a run,
// or the run's expiry, ends the leases of the run's later events too (see
// run).
//
// It reads the shard through the index of its keys (keyIndex), so that
// its cost is that of the keys it visits, not of the backlog.
func (s Shard) Fetch(ctx context.Context, max int, visibility time.Duration) ([]Lease, error) {
	t := s.Leases.table(s.Sub)
	waiting, err := s.index(ctx, t)
	if err != nil || !waiting {
		return nil, err
	}
	// A leader replaced without knowing it yet misses the acks its
	// successor commits: confirm the leadership, and so see every ack
	// committed until now, before leasing anything. Concurrent fetches
	// share the confirmation.
	if err := s.Group.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	// The leases are chosen in a view of the shard, with the table
	// locked: acks are applied, and drop their leases (Leases.Applied), on
	// the goroutine that runs the view, so the view sees every ack of an
	// event whose lease the table no longer holds.
	now := time.Now()
	var picks []pick
	err = s.Group.View(ctx, func(m *shard.Machine) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if c, ok := m.Cursor(s.Sub); ok {
			picks = t.handOut(m, c, max, now, now.Add(visibility))
		}
	})
	if err != nil {
		return nil, err
	}
	out, err := s.read(picks)
	if err != nil {
		t.unlease(picks)
		return nil, err
	}
	return out, nil
}

// index brings t's index up to date with the shard's log: it indexes the
// events appended since the last fetch, after rebuilding the index from
// the subscription's head if it is stale or wasteful. It reports whether
// any key is waiting to hand out an event.
func (s Shard) index(ctx context.Context, t *table) (bool, error) {
	t.indexing.Lock()
	defer t.indexing.Unlock()
	for {
		t.mu.Lock()
		from := t.index.indexed
		t.mu.Unlock()
		evs, next, head, err := s.pendingKeys(ctx, from, MaxScan)
		if errors.Is(err, ErrNoCursor) {
			return false, nil // nothing to hand out here yet
		}
		if err != nil {
			return false, err
		}
		t.mu.Lock()
		t.forgetBelow(head)
		if x := t.index; x.stale || x.wasteful(head) {
			t.index = newKeyIndex(head)
			t.mu.Unlock()
			continue // and read from the head
		}
		t.index.add(evs, next)
		waiting := len(t.index.keys) > 0
		t.mu.Unlock()
		return waiting, nil
	}
}

// pendingKeys returns up to limit pending events of the subscription with
// offsets >= from, in offset order, as the index knows them: offsets and
// key hashes; the offset to continue from; and the subscription's head
// as it read. It is ReadPending without reading the log, but for the
// events whose keys the shard did not record (those of a snapshot written
// before it did), whose keys it reads from their entries. Without a
// cursor it reads nothing, the head is from, and the error ErrNoCursor.
func (s Shard) pendingKeys(ctx context.Context, from uint64, limit int) (evs []keyedOffset, next, head uint64, err error) {
	var unknown []location // of events whose keys are not recorded
	var at []int           // their places in evs
	next, head = from, from
	verr := s.Group.View(ctx, func(m *shard.Machine) {
		c, ok := m.Cursor(s.Sub)
		if !ok {
			err = ErrNoCursor
			return
		}
		head = c.Head()
		o := max(from, head)
		for ; o < m.NextOffset() && len(evs) < limit; o++ {
			if c.IsAcked(o) { // done, or never the subscription's
				continue
			}
			if h, ok := m.KeyHashOf(o); ok {
				evs = append(evs, keyedOffset{o, h})
			} else if idx, slot, ok := m.Locate(o); ok {
				unknown = append(unknown, location{offset: o, index: idx, slot: slot})
				at = append(at, len(evs))
				evs = append(evs, keyedOffset{offset: o})
			}
		}
		next = o
	})
	if verr != nil {
		return nil, from, 0, verr
	}
	if err != nil {
		return nil, from, head, err
	}
	if len(unknown) == 0 {
		return evs, next, head, nil
	}
	entries := s.entries(false)
	kept := evs[:0]
	for i, e := range evs {
		if len(at) > 0 && at[0] == i {
			ev, _, ok, err := entries.event(unknown[0])
			if err != nil {
				return nil, from, 0, err
			}
			at, unknown = at[1:], unknown[1:]
			if !ok {
				continue // as ReadPending: an entry without the slot holds no event
			}
			e.key = shard.KeyHash(ev.Key)
		}
		kept = append(kept, e)
	}
	return kept, next, head, nil
}

// read reads the events of picks from the log, as leases, through the
// node's cache of entries: the fetches that follow, handing out the runs
// of other keys, read the same entries again.
func (s Shard) read(picks []pick) ([]Lease, error) {
	entries := s.entries(true)
	out := make([]Lease, len(picks))
	for i, p := range picks {
		ev, at, ok, err := entries.event(location{offset: p.offset, index: p.index, slot: p.slot})
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("consume: event %d of shard %d of %s: log entry %d has no slot %d", p.offset, s.Index, s.Topic, p.index, p.slot)
		}
		out[i] = Lease{Offset: p.offset, Number: p.number, Event: ev, Time: at, Attempt: p.attempt}
	}
	return out, nil
}

// AckedNow returns which of pending are done for the subscription
// (acknowledged, skipped or dead-lettered) in the shard's state as it is
// now. Without a cursor, every event is: the subscription is gone.
func (s Shard) AckedNow(ctx context.Context, pending []delivery.Event) (map[uint64]bool, error) {
	acked := make(map[uint64]bool)
	err := s.Group.View(ctx, func(m *shard.Machine) {
		c, ok := m.Cursor(s.Sub)
		for _, p := range pending {
			if !ok || c.IsAcked(p.Offset) { // done, or its subscription is gone
				acked[p.Offset] = true
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return acked, nil
}
