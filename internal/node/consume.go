package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"herald/internal/consume"
	"herald/internal/host"
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
	// Receipt names this delivery: the id, the lease's number and the
	// subscription (topic.SubscriptionReceipt). Acking it rather than ID
	// acts only while the lease is the event's, and in the subscription
	// it was fetched from; see consume.Leases.
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
	// Subscription names the pull subscription fetched from ("": the
	// topic's default one). Each has its own progress and leases.
	Subscription string
}

// Fetch leases up to opts.Max events of a topic's subscription
// (opts.Subscription) for opts.Visibility. Of a key it may lease a run of
// consecutive pending events, but none while an earlier one is leased to
// another fetch, so each key is consumed in order (consume.Shard.Fetch). With opts.Wait > 0 and nothing
// available, it waits up to that long for events to arrive.
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
	sub, err := pulledSubscription(tr, opts.Subscription)
	if err != nil {
		return FetchResult{}, err
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
		res, err := n.relay.fetchRound(ctx, tr, shards, sub, max, visibility)
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

// pulledSubscription returns the id of the subscription of tr that a
// pull consumer names. The empty name is the topic's default subscription,
// as it was before topics had others: it cannot be pulled from while the
// topic pushes.
func pulledSubscription(tr *topicRuntime, name string) (uint64, error) {
	if name == "" {
		if ep := tr.info.Attributes.PushEndpoint; ep != "" {
			return 0, fmt.Errorf("%w: topic %q pushes its events to %s; pull consumers are for topics without push_endpoint (unset it with herald topic set %s --attr push_endpoint=)",
				ErrPushTopic, tr.info.Name, redactURL(ep), tr.info.Name)
		}
		return 0, nil
	}
	sub, err := subscriptionOfTopic(tr, name)
	if err != nil {
		return 0, err
	}
	if ep := sub.Attributes.Delivery.PushEndpoint; ep != "" {
		return 0, fmt.Errorf("%w: subscription %q of topic %q pushes to its endpoint %s; pull consumers cannot fetch from it (fetch from a subscription without push_endpoint)",
			ErrPushSubscription, name, tr.info.Name, redactURL(ep))
	}
	return sub.ID, nil
}

// fetchShard leases up to max events of subscription sub of one shard
// this node leads (consume.Shard.Fetch), as deliveries.
func (n *Node) fetchShard(ctx context.Context, s *shardRuntime, sub uint64, max int, visibility time.Duration) ([]Delivery, error) {
	c := shardLog{n, s}.consumer(sub)
	leases, err := c.Fetch(ctx, max, visibility)
	if err != nil || len(leases) == 0 {
		return nil, err
	}
	out := make([]Delivery, len(leases))
	for i, l := range leases {
		id, receipt := topic.DeliveryNames(s.topic, s.index, l.Offset, l.Number, sub)
		out[i] = Delivery{
			ID: id, Receipt: receipt, Shard: s.index, Offset: l.Offset,
			Event: eventOf(l.Event), Time: l.Time, Attempt: l.Attempt,
		}
	}
	return out, nil
}

// forgetLeases tells the shards' leases whether this node leads them
// (consume.Leases.Lead: a leader caches the entries it applies), and
// drops the idle pull lease tables of the shards this node stops leading
// (consume.Leases.DropIdle) until stop: their consumers fetch from the
// new leader, and every subscription's table would otherwise hold its
// index here for as long as the subscription lives.
func (n *Node) forgetLeases(stop <-chan struct{}, w *host.LeadershipWatch) {
	defer w.Stop()
	for {
		select {
		case <-stop:
			return
		case <-w.C():
		}
		now := time.Now()
		for _, group := range w.Changed() {
			s, ok := n.reg.shard(group)
			if !ok {
				continue
			}
			// Whether the group elected this node, serving or not yet: a
			// shard elects its leader while it opens, before it serves,
			// and hears of no change after.
			leader, err := n.host.Leader(group)
			s.leases.Lead(err == nil && leader == n.relay.self)
			if !n.relay.leads(s) {
				s.leases.DropIdle(now)
			}
		}
	}
}

// Ack marks events done in the topics' default subscriptions, named by
// their ids, or by receipts of their deliveries, which name their own
// subscriptions: AckSubscription with no subscription named.
func (n *Node) Ack(ctx context.Context, ids []string) (int, error) {
	return n.AckSubscription(ctx, "", ids)
}

// AckSubscription marks events done in a subscription, named by their
// ids or by receipts of their deliveries. Event ids are acknowledged in
// the subscription named ("": the default one); a receipt is acknowledged
// in the subscription it was fetched from, which the name, if given, must
// be. Events already acknowledged are accepted and not counted; an id that
// names no event (unknown topic, shard or an offset never assigned) fails
// the whole call, and nothing is acknowledged in that id's shard. A
// receipt whose lease lapsed (the event was handed out again) is not acted
// on: the others are, and the error is a *LapsedError naming it.
func (n *Node) AckSubscription(ctx context.Context, subscription string, ids []string) (_ int, err error) {
	defer classify(&err)

	groups, err := n.reg.groupIDs(subscription, ids)
	if err != nil {
		return 0, err
	}
	// Each shard's acks are a proposal to its own group, committed and
	// synced on their own: made one after the other, an ack of a batch
	// fetched from several shards would wait for as many commits in turn.
	// They are made concurrently, and all of them, even once one failed:
	// a proposal abandoned midway would leave its outcome unknown.
	type outcome struct {
		count  int
		lapsed []string
		err    error
	}
	outcomes := make([]outcome, len(groups))
	var wg sync.WaitGroup
	i := 0
	for s, g := range groups {
		o := &outcomes[i]
		i++
		wg.Go(func() {
			if len(g.offsets) > 0 {
				count, err := n.ackOffsets(ctx, s.rt, s.sub, g.offsets)
				if err != nil {
					o.err = err
					return
				}
				o.count += count
			}
			if len(g.leased) > 0 {
				res, err := n.relay.ack(ctx, s.rt, s.sub, g.leased, g.numbers)
				if err != nil {
					o.err = err
					return
				}
				o.count += res.Count
				for _, i := range res.Lapsed {
					o.lapsed = append(o.lapsed, g.receipts[i])
				}
			}
		})
	}
	wg.Wait()
	total := 0
	var lapsed []string
	for _, o := range outcomes {
		total += o.count
		lapsed = append(lapsed, o.lapsed...)
		if o.err != nil && err == nil {
			err = o.err
		}
	}
	if err != nil {
		return total, err
	}
	if len(lapsed) > 0 {
		return total, &LapsedError{Receipts: lapsed}
	}
	return total, nil
}

// ackOffsets acknowledges events of a shard in subscription sub whatever
// their leases.
func (n *Node) ackOffsets(ctx context.Context, s *shardRuntime, sub uint64, offsets []uint64) (int, error) {
	res, err := n.proposeShard(ctx, s, &shard.Command{Op: shard.OpAck, Subscription: sub, Offsets: offsets})
	if err != nil {
		return 0, ackError(s, sub, err)
	}
	return res.Count, nil
}

// ackLeasedHere is relay.ack on the shard's leader: the receipts whose
// leases allow it are held (consume.Leases.HoldForAck) and acknowledged by a
// proposal that only this leader may make, so that no other leader, which
// may have handed the events out again since, applies it unchecked.
func (n *Node) ackLeasedHere(ctx context.Context, s *shardRuntime, sub uint64, offsets, numbers []uint64) (ackResult, error) {
	held, fresh, lapsed := s.leases.HoldForAck(sub, offsets, numbers, time.Now())
	res := ackResult{Lapsed: lapsed}
	if len(held) == 0 {
		return res, nil
	}
	sr, err := n.proposeAsLeader(ctx, s, &shard.Command{Op: shard.OpAck, Subscription: sub, Offsets: held})
	if err == nil {
		res.Count = sr.Count
		return res, nil
	}
	// The holds this ack made end with it (an offset never assigned must
	// not stay leased); a consumer's own leases stay, for it to ack again.
	s.leases.Nack(sub, fresh, nil)
	return res, ackError(s, sub, err)
}

// ackError is the error of an ack in subscription sub of shard s.
func ackError(s *shardRuntime, sub uint64, err error) error {
	if errors.Is(err, shard.ErrUnknownOffset) {
		return fmt.Errorf("ack: %w; ack only ids returned by Fetch or Publish", err)
	}
	if sub != 0 && errors.Is(err, shard.ErrUnknownSubscription) {
		// The shard starts a new subscription's cursor moments after the
		// subscription is created; until then it has nothing to ack.
		return fmt.Errorf("%w: ack in shard %s: the shard has no cursor of subscription %d yet (the subscription was created moments ago) or any more (it was deleted); retry shortly: %w",
			ErrUnavailable, s.name, sub, err)
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

// Nack ends leases early so the events can be fetched again at once:
// NackSubscription with no subscription named.
func (n *Node) Nack(ctx context.Context, ids []string) error {
	return n.NackSubscription(ctx, "", ids)
}

// NackSubscription ends leases of a subscription early so the events can
// be fetched from it again at once. Event ids and receipts name the
// subscription as they do for AckSubscription. A receipt ends only its
// own lease: a nack of a lapsed one does nothing.
func (n *Node) NackSubscription(ctx context.Context, subscription string, ids []string) (err error) {
	defer classify(&err)

	groups, err := n.reg.groupIDs(subscription, ids)
	if err != nil {
		return err
	}
	for s, g := range groups {
		call := shardCall{Topic: s.rt.topic, Shard: s.rt.index, Sub: s.sub, Offsets: g.offsets}
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

// newShardIDs returns a shard's ids with room for n more of the kind of
// the first: most acks name the receipts of one fetch, from one shard, so
// its arrays are made once rather than grown id by id.
func newShardIDs(n int, receipts bool) *shardIDs {
	if !receipts {
		return &shardIDs{offsets: make([]uint64, 0, n)}
	}
	return &shardIDs{leased: make([]uint64, 0, n), numbers: make([]uint64, 0, n), receipts: make([]string, 0, n)}
}

// subscriptionShard is a shard, and a subscription whose cursor in it an
// ack or a nack is about.
type subscriptionShard struct {
	resolvedShard
	sub uint64
}

// groupIDs resolves the ids and receipts of an ack or a nack to their
// shards and subscriptions (see AckSubscription).
func (r *registry) groupIDs(subscription string, ids []string) (map[subscriptionShard]*shardIDs, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: no event ids given", errInvalidRequest)
	}
	groups := make(map[subscriptionShard]*shardIDs)
	for i, id := range ids {
		a, err := topic.ParseAck(id)
		if err != nil {
			return nil, err
		}
		s, err := r.shardOf(a.Topic, a.Shard)
		if err != nil {
			return nil, err
		}
		sub, err := ackedSubscription(s.topic, subscription, id, a)
		if err != nil {
			return nil, err
		}
		key := subscriptionShard{s, sub}
		g := groups[key]
		if g == nil {
			g = newShardIDs(len(ids)-i, a.Lease != 0)
			groups[key] = g
		}
		if a.Lease == 0 {
			g.offsets = append(g.offsets, a.Offset)
			continue
		}
		g.leased = append(g.leased, a.Offset)
		g.numbers = append(g.numbers, a.Lease)
		g.receipts = append(g.receipts, id)
	}
	return groups, nil
}

// ackedSubscription returns the id of the subscription of tr an ack or a
// nack of id, parsed as a, is about: the one named, or for a receipt, its
// own.
func ackedSubscription(tr *topicRuntime, name, id string, a topic.AckID) (uint64, error) {
	if name == "" {
		if a.Subscription != 0 {
			if _, ok := tr.info.SubscriptionByID(a.Subscription); !ok {
				return 0, fmt.Errorf("%w: receipt %s is of subscription %d of topic %q, which no longer exists", ErrNotFound, id, a.Subscription, tr.info.Name)
			}
		}
		return a.Subscription, nil
	}
	sub, err := subscriptionOfTopic(tr, name)
	if err != nil {
		return 0, err
	}
	if a.Lease != 0 && a.Subscription != sub.ID {
		own := fmt.Sprintf("subscription %d", a.Subscription)
		if s, ok := tr.info.SubscriptionByID(a.Subscription); ok {
			own = fmt.Sprintf("subscription %q", s.Name)
		}
		return 0, fmt.Errorf("%w: receipt %s was fetched from %s of topic %q, not from %q; with receipts, name no subscription or the one they were fetched from",
			errInvalidRequest, id, own, tr.info.Name, name)
	}
	return sub.ID, nil
}
