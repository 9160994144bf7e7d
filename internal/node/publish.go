package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"herald/internal/shard"
	"herald/internal/topic"
)

// Publish appends events to a topic, each to the shard its key routes to,
// and returns their ids in request order once every shard has committed
// its part. The shards commit independently: if one fails, events routed
// to the others may already be committed, and a retry of the whole batch
// delivers them twice (herald is at-least-once; consumers de-duplicate on
// the event id) — unless the events carry dedup ids: then a retry within
// the dedup window returns the ids of the events already committed and
// appends only the others.
func (n *Node) Publish(ctx context.Context, topicName string, in []Event) ([]string, error) {
	return n.StartPublish(ctx, topicName, in).Wait()
}

// A PendingPublish is a Publish whose events were proposed to their
// shards and may not have committed yet: StartPublish began it, and Wait
// waits for it, which every PendingPublish must be.
type PendingPublish struct {
	ctx   context.Context // the Publish's, for the waits and the proposals made again
	n     *Node
	topic string // as the caller named it
	tr    *topicRuntime
	parts []shardPublish
	ids   []string
	// now, if set, is what Wait returns instead: an error found before
	// anything was proposed, or a non-persistent topic's push, which
	// StartPublish began.
	now func() ([]string, error)
}

// StartPublish proposes events to their shards as Publish does and
// returns without waiting for them to commit, so that a caller with many
// publishes to make proposes them all before it waits for any: they then
// share the shards' rounds, and the caller sleeps once for them all.
func (n *Node) StartPublish(ctx context.Context, topicName string, in []Event) *PendingPublish {
	events := shardEvents(in)
	dedup := dedupIDs(in)
	refuse := func(err error) *PendingPublish {
		return &PendingPublish{now: func() ([]string, error) { return nil, err }}
	}
	tr, err := n.reg.lookup(topicName)
	if err != nil {
		return refuse(err)
	}
	if err := checkEvents(events, n.cfg.MaxPayloadBytes); err != nil {
		return refuse(err)
	}
	if err := n.disk.refusal(); err != nil && tr.info.Attributes.Persistent {
		return refuse(err)
	}
	// The whole request: the same id in events of two shards would pass
	// each shard's check.
	if err := shard.CheckDedupIDs(dedup); err != nil {
		return refuse(fmt.Errorf("%w: %w", errInvalidRequest, err))
	}
	if !tr.info.Attributes.Persistent {
		// The push starts now, as a proposal would: the publishes a caller
		// starts together push side by side.
		var (
			ids     []string
			pushErr error
		)
		done := make(chan struct{})
		go func() {
			defer close(done)
			ids, pushErr = n.pushNow(ctx, tr, events)
		}()
		return &PendingPublish{now: func() ([]string, error) {
			<-done
			return ids, pushErr
		}}
	}
	// Each shard's part is one run of the request's positions ordered by
	// shard (in request order within a shard), and of the events so
	// ordered: a few allocations per request, however many shards it
	// spans.
	shardOf := make([]int, len(events))
	order := make([]int, len(events))
	for i := range events {
		shardOf[i], order[i] = tr.shardFor(events[i].Key).index, i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(shardOf[a], shardOf[b]) })
	ordered, orderedDedup := permute(events, order), permute(dedup, order)
	pp := &PendingPublish{ctx: ctx, n: n, topic: topicName, tr: tr, ids: make([]string, len(events))}
	now := time.Now().UnixNano()
	// Every shard's part is proposed before any is waited for, so the
	// shards commit in parallel.
	for a := 0; a < len(order); {
		idx := shardOf[order[a]]
		b := a + 1
		for b < len(order) && shardOf[order[b]] == idx {
			b++
		}
		p := shardPublish{tr: tr, s: tr.shards[idx], time: now, events: events, dedup: dedup, ids: pp.ids}
		p.start(ctx, n, order[a:b], ordered[a:b], slicePart(orderedDedup, a, b))
		pp.parts = append(pp.parts, p)
		a = b
	}
	return pp
}

// Wait waits until every shard has committed its part of the publish, or
// one failed, and returns what Publish does.
func (pp *PendingPublish) Wait() (_ []string, err error) {
	defer classify(&err)
	if pp.now != nil {
		return pp.now()
	}
	touched := make([]int, len(pp.parts))
	for i := range pp.parts {
		if perr := pp.parts[i].finish(pp.ctx, pp.n); perr != nil && err == nil {
			err = perr
		}
		touched[i] = pp.parts[i].s.index
	}
	pp.n.push.Notify(pp.topic, touched)
	pp.tr.events.signal()
	if err != nil {
		return nil, err
	}
	return pp.ids, nil
}

// A shardPublish is the part of a Publish that goes to one shard.
type shardPublish struct {
	tr     *topicRuntime
	s      *shardRuntime
	time   int64
	events []shard.Event
	dedup  []string // nil if no event has a dedup id
	ids    []string // written at the positions of this shard's events

	positions []int                        // of the events being proposed
	wait      func() (shard.Result, error) // waits for their proposal
}

// start proposes the events at positions to the shard without waiting;
// events and dedup are those events and their dedup ids (nil if none).
func (p *shardPublish) start(ctx context.Context, n *Node, positions []int, events []shard.Event, dedup []string) {
	cmd := shard.Command{Op: shard.OpPublish, Time: p.time, MaxQueueBytes: p.tr.info.Attributes.MaxQueueBytes,
		Events: events, DedupIDs: dedup}
	if dedup != nil {
		cmd.DedupWindow = n.cfg.DedupWindow.Nanoseconds()
	}
	p.positions, p.wait = positions, n.startShard(ctx, p.s, &cmd)
}

// finish waits for the proposal and writes the events' ids. Events whose
// dedup ids repeat ones committed within the window get the earlier ids;
// when only some of them do, the shard refuses the command and the others
// are proposed again on their own.
func (p *shardPublish) finish(ctx context.Context, n *Node) error {
	for {
		res, err := p.wait()
		if err != nil && !errors.Is(err, shard.ErrPartialDuplicate) {
			return fmt.Errorf("publish to shard %s: %w", p.s.name, err)
		}
		for _, d := range res.Duplicates {
			p.ids[p.positions[d.Slot]] = topic.EventID(p.tr.info.Name, p.s.index, d.Offset)
		}
		rest := p.positions[:0:0]
		for _, i := range p.positions {
			if p.ids[i] == "" {
				rest = append(rest, i)
			}
		}
		if err == nil {
			for j, i := range rest {
				p.ids[i] = topic.EventID(p.tr.info.Name, p.s.index, res.FirstOffset+uint64(j))
			}
			return nil
		}
		if len(rest) == 0 {
			return nil
		}
		// Fewer events each time round: the loop ends.
		p.start(ctx, n, rest, permute(p.events, rest), permute(p.dedup, rest))
	}
}

// permute returns s's elements at positions, in that order; nil if s is.
func permute[T any](s []T, positions []int) []T {
	if s == nil {
		return nil
	}
	out := make([]T, len(positions))
	for j, i := range positions {
		out[j] = s[i]
	}
	return out
}

// slicePart returns s[a:b], or nil if s is nil.
func slicePart[T any](s []T, a, b int) []T {
	if s == nil {
		return nil
	}
	return s[a:b]
}

// checkEvents refuses an empty batch and payloads over maxPayload bytes.
func checkEvents(events []shard.Event, maxPayload int) error {
	if len(events) == 0 {
		return fmt.Errorf("%w: no events given; pass at least one", errInvalidRequest)
	}
	for i := range events {
		if len(events[i].Payload) > maxPayload {
			return fmt.Errorf("%w: event %d has a %d-byte payload, over the limit of %d bytes; split it, or store it elsewhere and publish a reference (the server's --max-payload-bytes sets the limit)",
				ErrPayloadTooLarge, i, len(events[i].Payload), maxPayload)
		}
	}
	return nil
}

// Reservation is a space reservation made by Reserve.
type Reservation struct {
	ID        string
	ExpiresAt time.Time
}

// Reserve holds bytes in the shard that key routes to, for a later Commit
// (the transactional-outbox pattern). The reservation expires after the
// node's reservation timeout unless committed or aborted.
func (n *Node) Reserve(ctx context.Context, topicName, key string, bytes int64, count int) (_ Reservation, err error) {
	defer classify(&err)

	tr, err := n.reg.lookup(topicName)
	if err != nil {
		return Reservation{}, err
	}
	if err := n.disk.refusal(); err != nil {
		return Reservation{}, err
	}
	if bytes <= 0 {
		return Reservation{}, fmt.Errorf("%w: reserve at least one byte: the size of the events you will commit (key, payload, header names and values)", errInvalidRequest)
	}
	s := tr.shardFor(key)
	now := time.Now()
	cmd := shard.Command{Op: shard.OpReserve, Time: now.UnixNano(), Bytes: bytes, Count: count, MaxQueueBytes: tr.info.Attributes.MaxQueueBytes}
	res, err := n.proposeShard(ctx, s, &cmd)
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve in shard %s: %w", s.name, err)
	}
	return Reservation{ID: topic.ReservationID(topicName, s.index, res.ReservationID), ExpiresAt: now.Add(n.cfg.ReservationTimeout)}, nil
}

// Commit appends events into a reservation. Every event's key must route
// to the reservation's shard.
func (n *Node) Commit(ctx context.Context, reservationID string, in []Event) (_ []string, err error) {
	defer classify(&err)
	events := shardEvents(in)

	s, rid, err := n.reg.reservationShard(reservationID)
	if err != nil {
		return nil, err
	}
	if err := n.disk.refusal(); err != nil {
		return nil, err
	}
	if err := checkEvents(events, n.cfg.MaxPayloadBytes); err != nil {
		return nil, err
	}
	if dedupIDs(in) != nil {
		return nil, fmt.Errorf("%w: dedup_id is for Publish only; a commit is made once by reservation id, so it needs none", errInvalidRequest)
	}
	for i := range events {
		if got := topic.ShardFor(events[i].Key, s.shardCount); got != s.rt.index {
			return nil, fmt.Errorf("%w: event %d's key %q routes to shard %d, but reservation %s is in shard %d; commit events whose key routes to the reserved shard (for example the key given to Reserve)",
				errInvalidRequest, i, events[i].Key, got, reservationID, s.rt.index)
		}
	}
	cmd := shard.Command{Op: shard.OpCommit, Time: time.Now().UnixNano(), ReservationID: rid, Events: events}
	res, err := n.proposeShard(ctx, s.rt, &cmd)
	if errors.Is(err, shard.ErrUnknownReservation) {
		return nil, fmt.Errorf("commit: %w: reservation %s expired (reservations last %s), or was already committed or aborted; reserve again",
			shard.ErrUnknownReservation, reservationID, n.cfg.ReservationTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("commit reservation %s: %w", reservationID, err)
	}
	ids := make([]string, len(events))
	for i := range events {
		ids[i] = topic.EventID(s.rt.topic, s.rt.index, res.FirstOffset+uint64(i))
	}
	s.topic.events.signal()
	n.push.Notify(s.rt.topic, []int{s.rt.index})
	return ids, nil
}

// Abort releases a reservation. Aborting an unknown or already released
// reservation succeeds: the outcome the caller wants already holds.
func (n *Node) Abort(ctx context.Context, reservationID string) (err error) {
	defer classify(&err)

	s, rid, err := n.reg.reservationShard(reservationID)
	if err != nil {
		return err
	}
	cmd := shard.Command{Op: shard.OpAbort, ReservationID: rid}
	if _, err := n.proposeShard(ctx, s.rt, &cmd); err != nil {
		return fmt.Errorf("abort reservation %s: %w", reservationID, err)
	}
	return nil
}
