package client

import (
	"context"
	"time"

	"connectrpc.com/connect"

	heraldv1 "herald/proto/herald/v1"
)

// DeadLetter is an event a push topic gave up on.
type DeadLetter struct {
	Delivery
	// Reason is "expired" (older than time_to_live), "max_retries" or
	// "rejected" (the endpoint refused it for good).
	Reason    string    `json:"reason"`
	LastError string    `json:"last_error,omitempty"`
	DeadAt    time.Time `json:"dead_at,omitzero"`
}

// ListDeadLetters returns up to max dead letters of topic's default
// subscription (0: the server's default of 100).
func (c *Client) ListDeadLetters(ctx context.Context, topic string, max int) ([]DeadLetter, error) {
	return c.ListSubscriptionDeadLetters(ctx, topic, "", max)
}

// ListSubscriptionDeadLetters returns up to max dead letters of a
// subscription of topic; "" is the default subscription.
func (c *Client) ListSubscriptionDeadLetters(ctx context.Context, topic, subscription string, max int) ([]DeadLetter, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := c.svc.ListDeadLetters(ctx, connect.NewRequest(&heraldv1.ListDeadLettersRequest{Topic: topic, Subscription: subscription, Max: toUint32(max)}))
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, 0, len(resp.Msg.GetDeadLetters()))
	for _, dl := range resp.Msg.GetDeadLetters() {
		out = append(out, DeadLetter{
			Delivery:  deliveryFromProto(dl.GetEvent()),
			Reason:    dl.GetReason(),
			LastError: dl.GetLastError(),
			DeadAt:    timeOf(dl.GetDeadAt()),
		})
	}
	return out, nil
}

// ReplayDeadLetters puts dead letters of topic's default subscription back
// into its queue, in order, as new events; with no ids, all of them. It
// returns how many were replayed.
func (c *Client) ReplayDeadLetters(ctx context.Context, topic string, ids ...string) (int, error) {
	return c.ReplaySubscriptionDeadLetters(ctx, topic, "", ids...)
}

// ReplaySubscriptionDeadLetters is ReplayDeadLetters for a subscription of
// topic: the events are queued again for it alone.
func (c *Client) ReplaySubscriptionDeadLetters(ctx context.Context, topic, subscription string, ids ...string) (int, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := c.svc.ReplayDeadLetters(ctx, connect.NewRequest(&heraldv1.ReplayDeadLettersRequest{Topic: topic, Subscription: subscription, Ids: ids}))
	if err != nil {
		return 0, err
	}
	return int(resp.Msg.GetReplayed()), nil
}

// PurgeDeadLetters deletes dead letters of topic's default subscription
// for good; with no ids, all of them. It returns how many were deleted.
func (c *Client) PurgeDeadLetters(ctx context.Context, topic string, ids ...string) (int, error) {
	return c.PurgeSubscriptionDeadLetters(ctx, topic, "", ids...)
}

// PurgeSubscriptionDeadLetters is PurgeDeadLetters for a subscription of
// topic.
func (c *Client) PurgeSubscriptionDeadLetters(ctx context.Context, topic, subscription string, ids ...string) (int, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := c.svc.PurgeDeadLetters(ctx, connect.NewRequest(&heraldv1.PurgeDeadLettersRequest{Topic: topic, Subscription: subscription, Ids: ids}))
	if err != nil {
		return 0, err
	}
	return int(resp.Msg.GetPurged()), nil
}
