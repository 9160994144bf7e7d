package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"herald/internal/shard"
	"herald/internal/topic"
)

// SeekTarget is where SeekSubscription moves a subscription's cursors.
// Exactly one of its fields is set.
type SeekTarget struct {
	// Time goes, on every shard, to the first event published at or
	// after it.
	Time time.Time
	// EventID goes to that event on its shard and, on the others, to the
	// first event published at or after it.
	EventID string
	// Earliest goes, on every shard, to the earliest event the shard
	// holds: retained, or still pending for some subscription.
	Earliest bool
}

// SeekResult says what a seek did.
type SeekResult struct {
	// Replayed is the number of events made pending again: delivered (or
	// skipped) before, they are delivered again, in order.
	Replayed int
}

// SeekSubscription moves a subscription's cursor on every shard of its
// topic, as Pub/Sub's seek does: the events the shard holds from the
// target on become pending again, those the subscription had
// acknowledged or skipped included, and are delivered again in order;
// events before the target are passed over. Its dead letters stay in the
// dead-letter queue. What a shard holds of the past is what the topic's
// retention keeps (with retention 0, only events still pending for some
// subscription): a target before that goes to the earliest it holds.
//
// A push subscription's dispatchers start over from the new place (see
// delivery.Log.Seeks), wherever they run; a pull subscription's leases
// end. Deliveries in
// flight when the seek applies may still be recorded after it: a seek is
// a replay from a point, not a fence.
func (n *Node) SeekSubscription(ctx context.Context, topicName, name string, to SeekTarget) (_ SeekResult, err error) {
	defer classify(&err)

	tr, err := n.reg.lookup(topicName)
	if err != nil {
		return SeekResult{}, err
	}
	sub, err := subscriptionOfTopic(tr, name)
	if err != nil {
		return SeekResult{}, err
	}
	if !tr.info.Attributes.Persistent {
		return SeekResult{}, fmt.Errorf("%w: topic %q is not persistent: it stores no event to seek to", errInvalidRequest, topicName)
	}
	set := 0
	for _, ok := range []bool{!to.Time.IsZero(), to.EventID != "", to.Earliest} {
		if ok {
			set++
		}
	}
	if set != 1 {
		return SeekResult{}, fmt.Errorf("%w: seek to one of a time, an event id or the earliest event, not %d of them", errInvalidRequest, set)
	}

	cmd := shard.Command{Op: shard.OpSeek, Subscription: sub.ID}
	var res SeekResult
	skip := -1 // the shard already sought, if any
	switch {
	case !to.Time.IsZero():
		cmd.Time = to.Time.UnixNano()
	case to.EventID != "":
		eventTopic, idx, offset, err := topic.ParseEventID(to.EventID)
		if err != nil {
			return SeekResult{}, err
		}
		if eventTopic != topicName || idx < 0 || idx >= len(tr.shards) {
			return SeekResult{}, fmt.Errorf("%w: event %s is not of topic %q, which has %d shards", errInvalidRequest, to.EventID, topicName, len(tr.shards))
		}
		// The event's shard first: where its cursor goes tells the
		// others where to go.
		first := cmd
		first.From = offset
		r, err := n.proposeShard(ctx, tr.shards[idx], &first)
		if err != nil {
			return SeekResult{}, fmt.Errorf("seek shard %s: %w", tr.shards[idx].name, err)
		}
		res.Replayed += r.Count
		skip = idx
		switch {
		case r.FirstOffset > offset:
			// The event is no longer held: the others go to their
			// earliest too.
		case r.Time != 0:
			cmd.Time = r.Time
		default:
			cmd.From = shard.FromNow // not published yet: from now on
		}
	}

	waits := make([]func() (shard.Result, error), len(tr.shards))
	for i, s := range tr.shards {
		if i != skip {
			c := cmd
			waits[i] = n.startShard(ctx, s, &c)
		}
	}
	var errs []error
	for i, wait := range waits {
		if wait == nil {
			continue
		}
		r, err := wait()
		if err != nil {
			errs = append(errs, fmt.Errorf("seek shard %s: %w", tr.shards[i].name, err))
			continue
		}
		res.Replayed += r.Count
	}
	// The dispatchers, wherever they run, learn of the seek as their node
	// applies it (delivery.Log.Seeks); pull consumers waiting for events
	// here are told that there are some again.
	tr.events.signal()
	return res, errors.Join(errs...)
}
