package client

import (
	"context"
	"time"

	"connectrpc.com/connect"

	heraldv1 "herald/proto/herald/v1"
)

// DefaultSubscription names a topic's default subscription, whose
// settings are the topic's own attributes (push_endpoint and the rest).
const DefaultSubscription = "default"

// Subscription is one delivery of a topic's events: a push endpoint or
// pull, a filter and delivery settings. The topic's default subscription
// is named DefaultSubscription and has ID 0.
type Subscription struct {
	Topic string `json:"topic"`
	Name  string `json:"name"`
	// ID identifies the subscription in its topic's shards; never reused.
	ID uint64 `json:"id"`
	// Attributes holds every attribute as a string, defaults included,
	// secrets redacted: "push_endpoint", "filter_policy", "max_in_flight"
	// and so on.
	Attributes     map[string]string `json:"attributes"`
	Disabled       bool              `json:"disabled"`
	DisabledReason string            `json:"disabled_reason,omitempty"`
	DisabledAt     time.Time         `json:"disabled_at,omitzero"`
	CreatedAt      time.Time         `json:"created_at,omitzero"`
	UpdatedAt      time.Time         `json:"updated_at,omitzero"`

	// Stats and ShardStats are set only by GetSubscriptionWithStats and
	// ListSubscriptionsWithStats: the subscription's counters summed over
	// its topic's shards and per shard, as TopicStats gives the default
	// subscription's. Events and OldestEventTime are its lag; Delivered,
	// Skipped (its filter rejected them), Retried and DeadLetters count its
	// own deliveries; Delivery is its push health on the shards the
	// answering node leads.
	Stats      *ShardStats  `json:"stats,omitempty"`
	ShardStats []ShardStats `json:"shard_stats,omitempty"`
}

// CreateSubscription adds subscription name to topic. attrs sets
// attributes such as "push_endpoint", "filter_policy" or "start"; the
// others take their defaults. Creating DefaultSubscription, without
// attributes, attaches the topic's default subscription again after
// DeleteSubscription detached it.
func (c *Client) CreateSubscription(ctx context.Context, topic, name string, attrs map[string]string) (*Subscription, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	req := &heraldv1.CreateSubscriptionRequest{Topic: topic, Name: name, Attributes: attrs}
	resp, err := c.svc.CreateSubscription(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return subscriptionFromProto(resp.Msg.GetSubscription()), nil
}

// GetSubscription returns subscription name of topic.
func (c *Client) GetSubscription(ctx context.Context, topic, name string) (*Subscription, error) {
	return c.getSubscription(ctx, &heraldv1.GetSubscriptionRequest{Topic: topic, Name: name})
}

// GetSubscriptionWithStats is GetSubscription with the subscription's
// statistics (Stats, ShardStats), which cost the server a read of each of
// the topic's shards.
func (c *Client) GetSubscriptionWithStats(ctx context.Context, topic, name string) (*Subscription, error) {
	return c.getSubscription(ctx, &heraldv1.GetSubscriptionRequest{Topic: topic, Name: name, WithStats: true})
}

func (c *Client) getSubscription(ctx context.Context, req *heraldv1.GetSubscriptionRequest) (*Subscription, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := c.svc.GetSubscription(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return subscriptionFromProto(resp.Msg.GetSubscription()), nil
}

// ListSubscriptions returns the subscriptions of topic: the default one
// first, unless detached, then the others by name.
func (c *Client) ListSubscriptions(ctx context.Context, topic string) ([]*Subscription, error) {
	return c.listSubscriptions(ctx, &heraldv1.ListSubscriptionsRequest{Topic: topic})
}

// ListSubscriptionsWithStats is ListSubscriptions with each
// subscription's statistics (Stats, ShardStats); the server reads each of
// the topic's shards once for all of them.
func (c *Client) ListSubscriptionsWithStats(ctx context.Context, topic string) ([]*Subscription, error) {
	return c.listSubscriptions(ctx, &heraldv1.ListSubscriptionsRequest{Topic: topic, WithStats: true})
}

func (c *Client) listSubscriptions(ctx context.Context, req *heraldv1.ListSubscriptionsRequest) ([]*Subscription, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := c.svc.ListSubscriptions(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	subs := make([]*Subscription, 0, len(resp.Msg.GetSubscriptions()))
	for _, s := range resp.Msg.GetSubscriptions() {
		subs = append(subs, subscriptionFromProto(s))
	}
	return subs, nil
}

// SetSubscriptionAttributes changes the attributes in attrs, leaving the
// others as they are, and returns the updated subscription. Start cannot
// change, and the default subscription's settings are the topic's
// (SetTopicAttributes).
func (c *Client) SetSubscriptionAttributes(ctx context.Context, topic, name string, attrs map[string]string) (*Subscription, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	req := &heraldv1.SetSubscriptionAttributesRequest{Topic: topic, Name: name, Attributes: attrs}
	resp, err := c.svc.SetSubscriptionAttributes(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return subscriptionFromProto(resp.Msg.GetSubscription()), nil
}

// DeleteSubscription removes subscription name of topic; deleting
// DefaultSubscription detaches it.
func (c *Client) DeleteSubscription(ctx context.Context, topic, name string) error {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	_, err := c.svc.DeleteSubscription(ctx, connect.NewRequest(&heraldv1.DeleteSubscriptionRequest{Topic: topic, Name: name}))
	return err
}

// EnableSubscription lets a disabled subscription deliver again.
func (c *Client) EnableSubscription(ctx context.Context, topic, name string) (*Subscription, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := c.svc.EnableSubscription(ctx, connect.NewRequest(&heraldv1.EnableSubscriptionRequest{Topic: topic, Name: name}))
	if err != nil {
		return nil, err
	}
	return subscriptionFromProto(resp.Msg.GetSubscription()), nil
}

// DisableSubscription stops a subscription's delivery until it is
// enabled, recording reason.
func (c *Client) DisableSubscription(ctx context.Context, topic, name, reason string) (*Subscription, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	req := &heraldv1.DisableSubscriptionRequest{Topic: topic, Name: name, Reason: reason}
	resp, err := c.svc.DisableSubscription(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return subscriptionFromProto(resp.Msg.GetSubscription()), nil
}

func subscriptionFromProto(s *heraldv1.Subscription) *Subscription {
	if s == nil {
		return nil
	}
	attrs := s.GetAttributes()
	if attrs == nil {
		attrs = map[string]string{}
	}
	out := &Subscription{
		Topic:          s.GetTopic(),
		Name:           s.GetName(),
		ID:             s.GetId(),
		Attributes:     attrs,
		Disabled:       s.GetDisabled(),
		DisabledReason: s.GetDisabledReason(),
		DisabledAt:     timeOf(s.GetDisabledAt()),
		CreatedAt:      timeOf(s.GetCreatedAt()),
		UpdatedAt:      timeOf(s.GetUpdatedAt()),
	}
	if st := s.GetStats(); st != nil {
		total := shardStatsFromProto(st)
		out.Stats = &total
		out.ShardStats = make([]ShardStats, 0, len(s.GetShardStats()))
		for _, sh := range s.GetShardStats() {
			out.ShardStats = append(out.ShardStats, shardStatsFromProto(sh))
		}
	}
	return out
}
