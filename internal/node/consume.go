package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"herald/internal/consume"
	"herald/internal/protocol"
	"herald/internal/shard"
	"herald/internal/topic"
)

// Limits of Fetch.
const (
	MaxFetchEvents           = 10000
	DefaultVisibility        = consume.DefaultVisibility
	MaxFetchWait             = 60 * time.Second
	fetchRecheckWhileWaiting = 200 * time.Millisecond
)

// Delivery is an event handed to a pull consumer.
type Delivery struct {
	ID string
	// Receipt names this delivery: the id and the lease's number
	// (topic.Receipt). Acking it rather than ID acts only while the lease
	// is the event's; see consume.Leases.
	Receipt string
	Shard   int
	Offset  uint64
	Event   Event
	Time    time.Time // publish time
	Attempt uint32
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

	tr, err := n.reg.lookup(topicName)
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
		res, err := n.relay.fetchRound(ctx, tr, shards, max, visibility)
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

// fetchShard leases up to max events of one shard this node leads
// (consume.Shard.Fetch), as deliveries.
func (n *Node) fetchShard(ctx context.Context, s *shardRuntime, max int, visibility time.Duration) ([]Delivery, error) {
	leases, err := shardLog{n, s}.consumer().Fetch(ctx, max, visibility)
	if err != nil || len(leases) == 0 {
		return nil, err
	}
	out := make([]Delivery, len(leases))
	for i, l := range leases {
		id := topic.EventID(s.topic, s.index, l.Offset)
		out[i] = Delivery{
			ID: id, Receipt: topic.Receipt(id, l.Number), Shard: s.index, Offset: l.Offset,
			Event: eventOf(l.Event), Time: l.Time, Attempt: l.Attempt,
		}
	}
	return out, nil
}

// Ack marks events done, named by their ids or by receipts of their
// deliveries. Events already acknowledged are accepted and not counted; an
// id that names no event (unknown topic, shard or an offset never
// assigned) fails the whole call, and nothing is acknowledged in that id's
// shard. A receipt whose lease lapsed (the event was handed out again) is
// not acted on: the others are, and the error is a *LapsedError naming it.
func (n *Node) Ack(ctx context.Context, ids []string) (_ int, err error) {
	defer classify(&err)

	groups, err := n.reg.groupIDs(ids)
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
			res, err := n.relay.ack(ctx, s.rt, g.leased, g.numbers)
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

// ackLeasedHere is relay.ack on the shard's leader: the receipts whose
// leases allow it are held (consume.Leases.HoldForAck) and acknowledged by a
// proposal that only this leader may make, so that no other leader, which
// may have handed the events out again since, applies it unchecked.
func (n *Node) ackLeasedHere(ctx context.Context, s *shardRuntime, offsets, numbers []uint64) (ackResult, error) {
	held, fresh, lapsed := s.leases.HoldForAck(offsets, numbers, time.Now())
	res := ackResult{Lapsed: lapsed}
	if len(held) == 0 {
		return res, nil
	}
	sr, err := n.proposeAsLeader(ctx, s, &shard.Command{Op: shard.OpAck, Offsets: held})
	if err == nil {
		res.Count = sr.Count
		return res, nil
	}
	// The holds this ack made end with it (an offset never assigned must
	// not stay leased); a consumer's own leases stay, for it to ack again.
	s.leases.Nack(fresh, nil)
	return res, ackError(s, err)
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

	groups, err := n.reg.groupIDs(ids)
	if err != nil {
		return err
	}
	for s, g := range groups {
		call := shardCall{Topic: s.rt.topic, Shard: s.rt.index, Offsets: g.offsets}
		if len(g.leased) > 0 {
			call.Offsets = append(slices.Clone(g.offsets), g.leased...)
			call.Leases = append(make([]uint64, len(g.offsets)), g.numbers...)
		}
		if err := n.relay.nack(ctx, s.rt, call); err != nil {
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

// groupIDs resolves the ids and receipts of an ack or a nack to their
// shards.
func (r *registry) groupIDs(ids []string) (map[resolvedShard]*shardIDs, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: no event ids given", errInvalidRequest)
	}
	groups := make(map[resolvedShard]*shardIDs)
	for _, id := range ids {
		topicName, idx, offset, lease, err := topic.ParseAckID(id)
		if err != nil {
			return nil, err
		}
		s, err := r.shardOf(topicName, idx)
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
