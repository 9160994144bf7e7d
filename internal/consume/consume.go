// Package consume is the consumer side of a shard on the node that leads
// it: the pull leases (Leases), and the local reads that hand events out
// under them. Pull leases live in the leader's memory, so these operations
// run on the shard's leader; the node forwards those made elsewhere to it,
// and turns what they return into its API's deliveries.
//
// It reads the shard only through Group, which the node's shard runtime
// implements.
package consume

import (
	"context"
	"time"

	"herald/internal/delivery"
	"herald/internal/shard"
)

// DefaultVisibility is how long a fetched event stays leased unless the
// fetch says otherwise; an ack held for commit (Leases.HoldForAck) is
// held as long.
const DefaultVisibility = 30 * time.Second

// MaxScan is how many pending events Shard.Fetch looks at per shard and
// fetch.
const MaxScan = 20000

// Group is a shard's Raft group as this node holds it. Its errors are the
// node's, ready to return.
type Group interface {
	// View runs f on the shard's state as this node has applied it, on
	// the group's goroutine.
	View(ctx context.Context, f func(m *shard.Machine)) error
	// Entry returns the command of the log entry at index, which holds
	// the event at offset (for the error).
	Entry(offset, index uint64) (shard.Command, error)
	// ReadBarrier confirms that this node still leads the group, and has
	// applied every entry committed before the call.
	ReadBarrier(ctx context.Context) error
}

// Shard is one shard of a topic, as its consumers' side on this node
// reads it.
type Shard struct {
	Topic  string
	Index  int // within the topic
	Group  Group
	Leases *Leases
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

// ReadPending returns up to limit pending events of a shard — neither
// acknowledged nor dead-lettered — with offsets >= from, in offset order,
// and the offset to continue from. It is how both pull consumers and push
// dispatchers read the queue.
func (s Shard) ReadPending(ctx context.Context, from uint64, limit int) ([]delivery.Event, uint64, error) {
	type loc struct {
		offset, index uint64
		slot          int
		attempts      uint32
	}
	var locs []loc
	next := from
	err := s.Group.View(ctx, func(m *shard.Machine) {
		o := max(from, m.Head())
		for ; o < m.NextOffset() && len(locs) < limit; o++ {
			if m.IsAcked(o) { // acknowledged or dead-lettered
				continue
			}
			if idx, slot, ok := m.Locate(o); ok {
				locs = append(locs, loc{o, idx, slot, m.Attempts(o)})
			}
		}
		next = o
	})
	if err != nil {
		return nil, from, err
	}
	out := make([]delivery.Event, 0, len(locs))
	entries := make(map[uint64]shard.Command)
	for _, l := range locs {
		cmd, ok := entries[l.index]
		if !ok {
			var err error
			if cmd, err = s.Group.Entry(l.offset, l.index); err != nil {
				return nil, from, err
			}
			entries[l.index] = cmd
		}
		if l.slot >= len(cmd.Events) {
			continue
		}
		out = append(out, delivery.Event{Offset: l.offset, Event: cmd.Events[l.slot], Time: time.Unix(0, cmd.Time), Attempts: l.attempts})
	}
	return out, next, nil
}

// Fetch leases up to max events of the shard for visibility, scanning
// pending events from the delivery head in offset order. A key's next
// event is not handed out while an earlier one is leased or
// unacknowledged ahead of it.
func (s Shard) Fetch(ctx context.Context, max int, visibility time.Duration) ([]Lease, error) {
	pending, _, err := s.ReadPending(ctx, 0, MaxScan)
	if err != nil {
		return nil, err
	}
	if len(pending) > 0 {
		// A leader replaced without knowing it yet misses the acks its
		// successor commits: confirm the leadership, and so see every ack
		// committed until now, before leasing anything. Concurrent
		// fetches share the confirmation.
		if err := s.Group.ReadBarrier(ctx); err != nil {
			return nil, err
		}
	}
	t := s.Leases
	t.fetching.Lock()
	defer t.fetching.Unlock()
	if len(pending) == 0 {
		t.mu.Lock()
		t.forgetBelow(pending)
		t.mu.Unlock()
		return nil, nil
	}
	// pending was read before this fetch's turn. Since then an earlier
	// fetch may have handed out a key's next event, its event in pending
	// being acknowledged meanwhile: leasing that one again would hand a
	// consumer an acknowledged event after its key's next one. A view
	// taken now sees every such ack. An ack applied after the view drops
	// its lease (see Leases.Acked) and would make its event look free
	// to lease again: then look once more.
	var acked map[uint64]bool
	for {
		t.mu.Lock()
		drops := t.drops
		t.mu.Unlock()
		acked, err = s.AckedNow(ctx, pending)
		if err != nil {
			return nil, err
		}
		t.mu.Lock()
		if t.drops == drops {
			break
		}
		t.mu.Unlock()
	}
	defer t.mu.Unlock()
	t.forgetBelow(pending)
	now := time.Now()
	blocked := make(map[string]bool) // keys with an earlier event still out
	var out []Lease
	for _, p := range pending {
		if len(out) >= max {
			break
		}
		if blocked[p.Event.Key] || acked[p.Offset] {
			continue
		}
		blocked[p.Event.Key] = true
		if u, ok := t.until[p.Offset]; ok && u.After(now) {
			continue
		}
		number := t.lease(p.Offset, now.Add(visibility))
		out = append(out, Lease{Offset: p.Offset, Number: number, Event: p.Event, Time: p.Time, Attempt: t.attempts[p.Offset]})
	}
	return out, nil
}

// AckedNow returns which of pending are acknowledged (or dead-lettered)
// in the shard's state as it is now.
func (s Shard) AckedNow(ctx context.Context, pending []delivery.Event) (map[uint64]bool, error) {
	acked := make(map[uint64]bool)
	err := s.Group.View(ctx, func(m *shard.Machine) {
		for _, p := range pending {
			if m.IsAcked(p.Offset) {
				acked[p.Offset] = true
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return acked, nil
}
