package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"herald/internal/delivery"
	"herald/internal/host"
	"herald/internal/protocol"
	"herald/internal/shard"
	"herald/internal/topic"
)

// Limits of Fetch.
const (
	MaxFetchEvents           = 10000
	DefaultVisibility        = 30 * time.Second
	MaxFetchWait             = 60 * time.Second
	maxScanPerShard          = 20000 // pending events looked at per shard and fetch
	fetchRecheckWhileWaiting = 200 * time.Millisecond
)

// Delivery is an event handed to a pull consumer.
type Delivery struct {
	ID string
	// Receipt names this delivery: the id and the lease's number
	// (topic.Receipt). Acking it rather than ID acts only while the lease
	// is the event's; see leaseTable.
	Receipt string
	Shard   int
	Offset  uint64
	Event   Event
	Time    time.Time // publish time
	Attempt uint32
}

// leaseTable holds a shard's pull leases. Leases live in the memory of the
// node that leads the shard: after a restart or a change of leader they are
// gone and the events are handed out again (at-least-once). Acks, which
// are what must not be lost, go through the shard's log, and every replica
// drops the leases of the events an ack names as it applies it (acked),
// wherever the ack was made: the leader's table holds no lease on an
// acknowledged event.
//
// Each lease has a number, which the delivery's receipt carries
// (topic.Receipt). An ack of a receipt is checked here, on the leader,
// before it is proposed (holdForAck): it may end only its own lease, or
// no lease at all, never the lease of a consumer the event was handed to
// since. An ack that named the event id alone would end any lease, and the
// key's next event could then go to another consumer while the earlier
// one is still on its way to its current holder.
type leaseTable struct {
	// fetching serializes the fetches of the shard, so that each reads
	// which events are acknowledged after the one before has leased; see
	// fetchShard. It is held across reads of the group's state, which is
	// why the group's goroutine, applying acks, takes only mu.
	fetching sync.Mutex

	mu       sync.Mutex
	until    map[uint64]time.Time // offset → lease expiry
	attempts map[uint64]uint32    // offset → times handed out
	number   map[uint64]uint64    // offset → number of its lease
	// last is the number of the latest lease. It starts at random, so that
	// the numbers of leases handed out by different leaders of the shard
	// do not meet.
	last uint64
	// drops counts the applied acks that dropped a lease here.
	drops uint64
}

func newLeaseTable() *leaseTable {
	return &leaseTable{
		until: make(map[uint64]time.Time), attempts: make(map[uint64]uint32), number: make(map[uint64]uint64),
		last: rand.Uint64() >> 2, // room for 2^62 leases before wrapping
	}
}

// lease leases the event at offset until then and returns the lease's
// number. The caller holds t.mu.
func (t *leaseTable) lease(offset uint64, then time.Time) uint64 {
	t.last++
	if t.last == 0 {
		t.last++ // 0 means no lease in a receipt
	}
	t.until[offset] = then
	t.attempts[offset]++
	t.number[offset] = t.last
	return t.last
}

// holdForAck decides which receipts an ack may act on: receipt i names
// the event at offsets[i] and its lease numbers[i]. An ack may act on a
// receipt whose lease is still the event's, and on one of an event that
// no consumer holds now (its lease expired, or was lost with a former
// leader); those events are held for the ack until it applies (acked), so
// that no fetch hands one out meanwhile, and their offsets are returned,
// the ones that were not held by that receipt's lease before in fresh.
// The others lapsed: the event was handed out again, and its holder acks
// it; their positions are returned.
func (t *leaseTable) holdForAck(offsets, numbers []uint64, now time.Time) (held, fresh []uint64, lapsed []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Long enough for the ack to commit, short enough that an ack that
	// never does only delays the event's next delivery.
	hold := now.Add(DefaultVisibility)
	for i, o := range offsets {
		u, leased := t.until[o]
		own := leased && t.number[o] == numbers[i]
		if leased && u.After(now) && !own {
			lapsed = append(lapsed, i)
			continue
		}
		if !own {
			fresh = append(fresh, o)
		}
		if !own || u.Before(hold) {
			t.until[o] = hold
		}
		t.number[o] = numbers[i]
		held = append(held, o)
	}
	return held, fresh, lapsed
}

// nack ends the leases of offsets early. numbers, if not nil, holds the
// lease numbers of the receipts that named them (0 for an event id): a
// receipt ends its own lease only.
func (t *leaseTable) nack(offsets, numbers []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, o := range offsets {
		if numbers != nil && numbers[i] != 0 && t.number[o] != numbers[i] {
			continue
		}
		delete(t.until, o)
		delete(t.number, o)
	}
}

// count returns how many events are leased beyond now.
func (t *leaseTable) count(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, u := range t.until {
		if u.After(now) {
			n++
		}
	}
	return n
}

// forgetBelow drops the leases of events before the first pending one:
// they were acknowledged or dead-lettered. The caller holds t.mu.
func (t *leaseTable) forgetBelow(pending []delivery.Event) {
	for o := range t.until {
		if len(pending) == 0 || o < pending[0].Offset {
			delete(t.until, o)
			delete(t.attempts, o)
			delete(t.number, o)
		}
	}
}

// acked drops the leases of the events an applied ack acknowledged. It
// runs on the group's goroutine.
func (t *leaseTable) acked(offsets []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	dropped := false
	for _, o := range offsets {
		if _, ok := t.until[o]; ok {
			dropped = true
		}
		delete(t.until, o)
		delete(t.number, o)
		delete(t.attempts, o)
	}
	if dropped {
		t.drops++
	}
}

// UnreadableShard is a shard that Fetch could not read: whatever events it
// holds were not looked at.
type UnreadableShard struct {
	Shard int    // index within the topic
	Name  string // "<topic>" for shard 0, "<topic>.<i>" otherwise
	Err   error  // why, and what to do; for a damaged log it names the file and offset
}

// FetchResult is what Fetch hands a pull consumer.
type FetchResult struct {
	Deliveries []Delivery
	// Unreadable lists, by shard index, the shards that could not be read,
	// so that a consumer can tell "nothing to fetch" from "could not look".
	Unreadable []UnreadableShard
}

// UnreadableError is Fetch's error when no shard of a topic could be read.
// It is an ErrUnavailable.
type UnreadableError struct {
	Topic  string
	Shards []UnreadableShard // every shard fetched from (FetchOptions.Shards), by index
}

func (e *UnreadableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: none of the %d shards of topic %q could be read", ErrUnavailable, len(e.Shards), e.Topic)
	sep := ": "
	for _, s := range e.Shards {
		// Each reason is an ErrUnavailable too; say so once.
		b.WriteString(sep + strings.TrimPrefix(s.Err.Error(), ErrUnavailable.Error()+": "))
		sep = "; "
	}
	return b.String()
}

func (e *UnreadableError) Unwrap() error { return ErrUnavailable }

// FetchOptions are the choices of a Fetch; the zero value takes the
// defaults.
type FetchOptions struct {
	Max        int           // events at most (0: protocol.DefaultFetchEvents; capped at MaxFetchEvents)
	Visibility time.Duration // how long the events stay leased (0: DefaultVisibility)
	Wait       time.Duration // how long to wait for events when none is available (capped at MaxFetchWait)
	// Shards limits the fetch to the shards at these indexes (nil: all): a
	// client that routes by leader sends each node the fetch of the shards
	// it leads.
	Shards []int
}

// Fetch leases up to opts.Max events of a topic for opts.Visibility. A
// key's next event is not handed out while an earlier one is leased or
// unacknowledged ahead of it, so each key is consumed in order. With
// opts.Wait > 0 and nothing available, it waits up to that long for events
// to arrive.
//
// Shards that cannot be read are listed in the result, beside the events of
// the others; when no shard can be read, Fetch returns an *UnreadableError
// instead, so that an unreadable topic never looks empty.
func (n *Node) Fetch(ctx context.Context, topicName string, opts FetchOptions) (_ FetchResult, err error) {
	defer classify(&err)

	tr, err := n.lookup(topicName)
	if err != nil {
		return FetchResult{}, err
	}
	shards, err := fetchedShards(tr, opts.Shards)
	if err != nil {
		return FetchResult{}, err
	}
	if ep := tr.info.Attributes.PushEndpoint; ep != "" {
		return FetchResult{}, fmt.Errorf("%w: topic %q pushes its events to %s; pull consumers are for topics without push_endpoint (unset it with herald topic set %s --attr push_endpoint=)",
			ErrPushTopic, topicName, redactURL(ep), topicName)
	}
	max := opts.Max
	if max <= 0 {
		max = protocol.DefaultFetchEvents
	}
	max = min(max, MaxFetchEvents)
	visibility := opts.Visibility
	if visibility <= 0 {
		visibility = DefaultVisibility
	}
	wait := min(opts.Wait, MaxFetchWait)
	deadline := time.Now().Add(wait)
	for {
		woken := tr.events.wait()
		res, err := n.fetchOnce(ctx, tr, shards, max, visibility)
		// The last look decides what is reported: a wait that ends with
		// nothing still names the shards it could not read.
		if err != nil || len(res.Deliveries) > 0 || !time.Now().Before(deadline) {
			return res, err
		}
		// Leases that expire make events available without a signal, so
		// look again now and then even when nothing is published.
		timer := time.NewTimer(min(time.Until(deadline), fetchRecheckWhileWaiting))
		select {
		case <-woken:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return FetchResult{}, ctx.Err()
		case <-n.stop:
			timer.Stop()
			return FetchResult{}, fmt.Errorf("%w: the node is shutting down", ErrUnavailable)
		}
		timer.Stop()
	}
}

// fetchedShards returns the shards of tr at indexes, or all of them when
// indexes is nil.
func fetchedShards(tr *topicRuntime, indexes []int) ([]*shardRuntime, error) {
	if indexes == nil {
		return tr.shards, nil
	}
	var out []*shardRuntime
	for _, i := range indexes {
		if i < 0 || i >= len(tr.shards) {
			return nil, fmt.Errorf("%w: topic %q has no shard %d: it has %d (0 to %d)", errInvalidRequest, tr.info.Name, i, len(tr.shards), len(tr.shards)-1)
		}
		if !slices.Contains(out, tr.shards[i]) {
			out = append(out, tr.shards[i])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no shard of topic %q named to fetch from", errInvalidRequest, tr.info.Name)
	}
	return out, nil
}

// fetchOnce visits shards round-robin, starting one further each call so
// no shard is starved. Every shard that could not be opened is listed as
// unreadable, even once max events are in hand: that costs no I/O, and a
// consumer then hears about it on every fetch.
func (n *Node) fetchOnce(ctx context.Context, tr *topicRuntime, shards []*shardRuntime, max int, visibility time.Duration) (FetchResult, error) {
	var res FetchResult
	start := int(tr.rr.Add(1))
	var ctxErr error
	for i := range shards {
		s := shards[(start+i)%len(shards)]
		if err := s.unservable(); err != nil {
			res.Unreadable = append(res.Unreadable, UnreadableShard{Shard: s.index, Name: s.name, Err: err})
			continue
		}
		if len(res.Deliveries) >= max || ctxErr != nil {
			continue
		}
		got, err := n.fetchFromLeader(ctx, s, max-len(res.Deliveries), visibility)
		switch {
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			// The request ends: that says nothing about the shard.
			ctxErr = err
		case err != nil:
			res.Unreadable = append(res.Unreadable, UnreadableShard{Shard: s.index, Name: s.name, Err: err})
		}
		res.Deliveries = append(res.Deliveries, got...)
	}
	if ctxErr != nil && len(res.Deliveries) == 0 {
		return FetchResult{}, ctxErr
	}
	slices.SortFunc(res.Unreadable, func(a, b UnreadableShard) int { return cmp.Compare(a.Shard, b.Shard) })
	if len(res.Unreadable) == len(shards) {
		return FetchResult{}, &UnreadableError{Topic: tr.info.Name, Shards: res.Unreadable}
	}
	return res, nil
}

// readPending returns up to limit pending events of a shard — neither
// acknowledged nor dead-lettered — with offsets >= from, in offset order,
// and the offset to continue from. It is how both pull consumers and push
// dispatchers read the queue.
func (n *Node) readPending(ctx context.Context, s *shardRuntime, from uint64, limit int) ([]delivery.Event, uint64, error) {
	type loc struct {
		offset, index uint64
		slot          int
		attempts      uint32
	}
	var locs []loc
	next := from
	err := n.host.View(ctx, s.group, func(sm host.StateMachine, _ uint64) {
		m := machineOf(sm)
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
		return nil, from, n.hostError(s.name, err)
	}
	out := make([]delivery.Event, 0, len(locs))
	entries := make(map[uint64]shard.Command)
	for _, l := range locs {
		cmd, ok := entries[l.index]
		if !ok {
			data, err := n.host.Entry(s.group, l.index)
			if err == nil {
				cmd, err = shard.UnmarshalCommand(data)
			}
			if err != nil {
				return nil, from, fmt.Errorf("%w: read event %s: %v", ErrUnavailable, topic.EventID(s.topic, s.index, l.offset), err)
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

// fetchShard leases up to max events of one shard, scanning pending events
// from the delivery head in offset order.
func (n *Node) fetchShard(ctx context.Context, s *shardRuntime, max int, visibility time.Duration) ([]Delivery, error) {
	pending, _, err := n.readPending(ctx, s, 0, maxScanPerShard)
	if err != nil {
		return nil, err
	}
	if len(pending) > 0 {
		// A leader replaced without knowing it yet misses the acks its
		// successor commits: confirm the leadership, and so see every ack
		// committed until now, before leasing anything. Concurrent
		// fetches share the confirmation.
		if err := n.host.ReadBarrier(ctx, s.group); err != nil {
			return nil, n.hostError(s.name, err)
		}
	}
	t := s.leases
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
	// its lease (see leaseTable.acked) and would make its event look free
	// to lease again: then look once more.
	var acked map[uint64]bool
	for {
		t.mu.Lock()
		drops := t.drops
		t.mu.Unlock()
		acked, err = n.ackedNow(ctx, s, pending)
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
	var out []Delivery
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
		id := topic.EventID(s.topic, s.index, p.Offset)
		lease := t.lease(p.Offset, now.Add(visibility))
		out = append(out, Delivery{
			ID: id, Receipt: topic.Receipt(id, lease), Shard: s.index, Offset: p.Offset,
			Event: eventOf(p.Event), Time: p.Time, Attempt: t.attempts[p.Offset],
		})
	}
	return out, nil
}

// ackedNow returns which of pending are acknowledged (or dead-lettered)
// in the shard's state as it is now.
func (n *Node) ackedNow(ctx context.Context, s *shardRuntime, pending []delivery.Event) (map[uint64]bool, error) {
	acked := make(map[uint64]bool)
	err := n.host.View(ctx, s.group, func(sm host.StateMachine, _ uint64) {
		m := machineOf(sm)
		for _, p := range pending {
			if m.IsAcked(p.Offset) {
				acked[p.Offset] = true
			}
		}
	})
	if err != nil {
		return nil, n.hostError(s.name, err)
	}
	return acked, nil
}

// Ack marks events done, named by their ids or by receipts of their
// deliveries. Events already acknowledged are accepted and not counted; an
// id that names no event (unknown topic, shard or an offset never
// assigned) fails the whole call, and nothing is acknowledged in that id's
// shard. A receipt whose lease lapsed (the event was handed out again) is
// not acted on: the others are, and the error is a *LapsedError naming it.
func (n *Node) Ack(ctx context.Context, ids []string) (_ int, err error) {
	defer classify(&err)

	groups, err := n.groupIDs(ids)
	if err != nil {
		return 0, err
	}
	total := 0
	var lapsed []string
	for s, g := range groups {
		if len(g.offsets) > 0 {
			count, err := n.ackOffsets(ctx, s.rt, g.offsets)
			if err != nil {
				return total, err
			}
			total += count
		}
		if len(g.leased) > 0 {
			res, err := n.ackLeased(ctx, s.rt, g.leased, g.numbers)
			if err != nil {
				return total, err
			}
			total += res.Count
			for _, i := range res.Lapsed {
				lapsed = append(lapsed, g.receipts[i])
			}
		}
	}
	if len(lapsed) > 0 {
		return total, &LapsedError{Receipts: lapsed}
	}
	return total, nil
}

// ackOffsets acknowledges events of a shard whatever their leases.
func (n *Node) ackOffsets(ctx context.Context, s *shardRuntime, offsets []uint64) (int, error) {
	res, err := n.proposeShard(ctx, s, &shard.Command{Op: shard.OpAck, Offsets: offsets})
	if err != nil {
		return 0, ackError(s, err)
	}
	return res.Count, nil
}

func ackError(s *shardRuntime, err error) error {
	if errors.Is(err, shard.ErrUnknownOffset) {
		return fmt.Errorf("ack: %w; ack only ids returned by Fetch or Publish", err)
	}
	return fmt.Errorf("ack in shard %s: %w", s.name, err)
}

// LapsedError is Ack's error when some receipts it was given had lapsed:
// their events were handed out again after those deliveries, and the
// consumers holding them now acknowledge them. The ack did not act on
// them; it acted on the others.
type LapsedError struct {
	Receipts []string
}

func (e *LapsedError) Error() string {
	return fmt.Sprintf("ack: %d receipt(s) lapsed, the first %s: the event was handed out again after that delivery (its lease expired, or was lost with a former leader), and its current holder acknowledges it; nothing to do but not to count this ack",
		len(e.Receipts), e.Receipts[0])
}

// Nack ends leases early so the events can be fetched again at once. A
// receipt ends only its own lease: a nack of a lapsed one does nothing.
func (n *Node) Nack(ctx context.Context, ids []string) (err error) {
	defer classify(&err)

	groups, err := n.groupIDs(ids)
	if err != nil {
		return err
	}
	for s, g := range groups {
		call := shardCall{Topic: s.rt.topic, Shard: s.rt.index, Offsets: g.offsets}
		if len(g.leased) > 0 {
			call.Offsets = append(slices.Clone(g.offsets), g.leased...)
			call.Leases = append(make([]uint64, len(g.offsets)), g.numbers...)
		}
		if err := n.nackOnLeader(ctx, s.rt, call); err != nil {
			return fmt.Errorf("nack in shard %s: %w", s.rt.name, err)
		}
		s.topic.events.signal()
	}
	return nil
}

// shardIDs are the ids of one shard an ack or nack names.
type shardIDs struct {
	offsets  []uint64 // events named by id
	leased   []uint64 // events named by receipt,
	numbers  []uint64 // their leases' numbers,
	receipts []string // and the receipts
}

func (n *Node) groupIDs(ids []string) (map[resolvedShard]*shardIDs, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: no event ids given", errInvalidRequest)
	}
	groups := make(map[resolvedShard]*shardIDs)
	for _, id := range ids {
		topicName, idx, offset, lease, err := topic.ParseAckID(id)
		if err != nil {
			return nil, err
		}
		s, err := n.shardOf(topicName, idx)
		if err != nil {
			return nil, err
		}
		g := groups[s]
		if g == nil {
			g = new(shardIDs)
			groups[s] = g
		}
		if lease == 0 {
			g.offsets = append(g.offsets, offset)
			continue
		}
		g.leased = append(g.leased, offset)
		g.numbers = append(g.numbers, lease)
		g.receipts = append(g.receipts, id)
	}
	return groups, nil
}
