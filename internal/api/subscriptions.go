package api

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/internal/node"
	heraldv1 "herald/proto/herald/v1"
)

func (s *service) CreateSubscription(ctx context.Context, req *connect.Request[heraldv1.CreateSubscriptionRequest]) (*connect.Response[heraldv1.CreateSubscriptionResponse], error) {
	m := req.Msg
	sub, err := s.node.CreateSubscription(ctx, m.Topic, m.Name, m.Attributes)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.CreateSubscriptionResponse{Subscription: subscriptionProto(sub)}), nil
}

func (s *service) GetSubscription(ctx context.Context, req *connect.Request[heraldv1.GetSubscriptionRequest]) (*connect.Response[heraldv1.GetSubscriptionResponse], error) {
	m := req.Msg
	sub, err := s.node.GetSubscription(ctx, m.Topic, m.Name)
	if err != nil {
		return nil, toConnect(err)
	}
	p := subscriptionProto(sub)
	if m.WithStats {
		st, err := s.node.SubscriptionStats(ctx, m.Topic, m.Name)
		if err != nil {
			return nil, toConnect(err)
		}
		setSubscriptionStats(p, st)
	}
	return connect.NewResponse(&heraldv1.GetSubscriptionResponse{Subscription: p}), nil
}

func (s *service) ListSubscriptions(ctx context.Context, req *connect.Request[heraldv1.ListSubscriptionsRequest]) (*connect.Response[heraldv1.ListSubscriptionsResponse], error) {
	m := req.Msg
	subs, err := s.node.ListSubscriptions(ctx, m.Topic)
	if err != nil {
		return nil, toConnect(err)
	}
	resp := &heraldv1.ListSubscriptionsResponse{Subscriptions: make([]*heraldv1.Subscription, len(subs))}
	for i, sub := range subs {
		resp.Subscriptions[i] = subscriptionProto(sub)
	}
	if m.WithStats {
		// One read of each shard for every subscription, not one each.
		stats, err := s.node.SubscriptionsStats(ctx, m.Topic, subs)
		if err != nil {
			return nil, toConnect(err)
		}
		for i, st := range stats {
			setSubscriptionStats(resp.Subscriptions[i], st)
		}
	}
	return connect.NewResponse(resp), nil
}

// setSubscriptionStats adds a subscription's statistics to p, in the
// messages TopicStats answers with.
func setSubscriptionStats(p *heraldv1.Subscription, st node.TopicStats) {
	p.Stats = shardStatsProto(st.Total)
	p.ShardStats = make([]*heraldv1.ShardStats, len(st.Shards))
	for i, sh := range st.Shards {
		p.ShardStats[i] = shardStatsProto(sh)
	}
}

func (s *service) SetSubscriptionAttributes(ctx context.Context, req *connect.Request[heraldv1.SetSubscriptionAttributesRequest]) (*connect.Response[heraldv1.SetSubscriptionAttributesResponse], error) {
	m := req.Msg
	sub, err := s.node.SetSubscriptionAttributes(ctx, m.Topic, m.Name, m.Attributes)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.SetSubscriptionAttributesResponse{Subscription: subscriptionProto(sub)}), nil
}

func (s *service) DeleteSubscription(ctx context.Context, req *connect.Request[heraldv1.DeleteSubscriptionRequest]) (*connect.Response[heraldv1.DeleteSubscriptionResponse], error) {
	if err := s.node.DeleteSubscription(ctx, req.Msg.Topic, req.Msg.Name); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.DeleteSubscriptionResponse{}), nil
}

func (s *service) EnableSubscription(ctx context.Context, req *connect.Request[heraldv1.EnableSubscriptionRequest]) (*connect.Response[heraldv1.EnableSubscriptionResponse], error) {
	sub, err := s.node.EnableSubscription(ctx, req.Msg.Topic, req.Msg.Name)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.EnableSubscriptionResponse{Subscription: subscriptionProto(sub)}), nil
}

func (s *service) DisableSubscription(ctx context.Context, req *connect.Request[heraldv1.DisableSubscriptionRequest]) (*connect.Response[heraldv1.DisableSubscriptionResponse], error) {
	m := req.Msg
	sub, err := s.node.DisableSubscription(ctx, m.Topic, m.Name, m.Reason)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.DisableSubscriptionResponse{Subscription: subscriptionProto(sub)}), nil
}

func subscriptionProto(sub node.Subscription) *heraldv1.Subscription {
	return &heraldv1.Subscription{
		Topic:          sub.Topic,
		Name:           sub.Name,
		Id:             sub.ID,
		Attributes:     sub.Attributes,
		Disabled:       sub.Disabled,
		DisabledReason: sub.DisabledReason,
		DisabledAt:     timestampOrNil(sub.DisabledAt),
		CreatedAt:      timestamppb.New(sub.CreatedAt),
		UpdatedAt:      timestamppb.New(sub.UpdatedAt),
	}
}
