package client

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	heraldv1 "herald/proto/herald/v1"
)

// SeekTarget is where SeekSubscription moves a subscription: set exactly
// one field.
type SeekTarget struct {
	// Time goes, on every shard, to the first event published at or
	// after it.
	Time time.Time
	// EventID goes to that event (as Publish returns its id) on its
	// shard and, on the others, to the first event published at or after
	// it.
	EventID string
	// Earliest goes, on every shard, to the earliest event the shard
	// holds: retained (see the topic's retention), or still pending for
	// some subscription.
	Earliest bool
}

// SeekSubscription moves a subscription's cursor on every shard of its
// topic to the target, as Pub/Sub's seek does: the events held from
// there on are delivered again, in order, acknowledged ones included;
// those before it are passed over. It returns the number of events made
// pending again. How far back a subscription can seek is the topic's
// retention.
func (c *Client) SeekSubscription(ctx context.Context, topic, name string, to SeekTarget) (replayed int64, err error) {
	req := &heraldv1.SeekSubscriptionRequest{Topic: topic, Subscription: name}
	switch {
	case !to.Time.IsZero() && to.EventID == "" && !to.Earliest:
		req.Target = &heraldv1.SeekSubscriptionRequest_Time{Time: timestamppb.New(to.Time)}
	case to.Time.IsZero() && to.EventID != "" && !to.Earliest:
		req.Target = &heraldv1.SeekSubscriptionRequest_EventId{EventId: to.EventID}
	case to.Time.IsZero() && to.EventID == "" && to.Earliest:
		req.Target = &heraldv1.SeekSubscriptionRequest_Earliest{Earliest: true}
	default:
		return 0, errors.New("herald: seek to one of a time, an event id or the earliest event")
	}
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := c.svc.SeekSubscription(ctx, connect.NewRequest(req))
	if err != nil {
		return 0, err
	}
	return resp.Msg.GetReplayed(), nil
}
