package fakeherald

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	heraldv1 "herald/proto/herald/v1"
)

// subscriptions are the fake's subscriptions, by topic and name, and the
// last id given. The fake keeps no default subscription unless a test puts
// one, and checks no attribute.
type subscriptions struct {
	byTopic map[string]map[string]*heraldv1.Subscription
	lastID  uint64
}

// PutSubscription adds or replaces a subscription as given; its topic
// need not exist. Its Stats and ShardStats are answered only to requests
// with_stats, as the server does.
func (s *Server) PutSubscription(sub *heraldv1.Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putSubscription(proto.Clone(sub).(*heraldv1.Subscription))
}

// putSubscription stores sub. The caller holds s.mu.
func (s *Server) putSubscription(sub *heraldv1.Subscription) {
	if s.subs.byTopic == nil {
		s.subs.byTopic = map[string]map[string]*heraldv1.Subscription{}
	}
	if s.subs.byTopic[sub.GetTopic()] == nil {
		s.subs.byTopic[sub.GetTopic()] = map[string]*heraldv1.Subscription{}
	}
	s.subs.byTopic[sub.GetTopic()][sub.GetName()] = sub
}

// subscription returns the named subscription or the server's not-found
// error. The caller holds s.mu.
func (s *Server) subscription(topicName, name string) (*heraldv1.Subscription, error) {
	sub, ok := s.subs.byTopic[topicName][name]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound,
			fmt.Errorf("subscription %q of topic %q does not exist; herald subscription list %s lists them", name, topicName, topicName))
	}
	return sub, nil
}

func (s *Server) CreateSubscription(ctx context.Context, req *connect.Request[heraldv1.CreateSubscriptionRequest]) (*connect.Response[heraldv1.CreateSubscriptionResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.CreateSubscriptionRequest) (*heraldv1.CreateSubscriptionResponse, error) {
		if _, err := s.topic(r.GetTopic()); err != nil {
			return nil, err
		}
		if _, err := s.subscription(r.GetTopic(), r.GetName()); err == nil {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("subscription %q of topic %q already exists", r.GetName(), r.GetTopic()))
		}
		s.subs.lastID++
		sub := &heraldv1.Subscription{Topic: r.GetTopic(), Name: r.GetName(), Id: s.subs.lastID,
			Attributes: maps.Clone(r.GetAttributes()), CreatedAt: timestamppb.New(s.now), UpdatedAt: timestamppb.New(s.now)}
		s.putSubscription(sub)
		return &heraldv1.CreateSubscriptionResponse{Subscription: sub}, nil
	})
}

func (s *Server) GetSubscription(ctx context.Context, req *connect.Request[heraldv1.GetSubscriptionRequest]) (*connect.Response[heraldv1.GetSubscriptionResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.GetSubscriptionRequest) (*heraldv1.GetSubscriptionResponse, error) {
		sub, err := s.subscription(r.GetTopic(), r.GetName())
		if err != nil {
			return nil, err
		}
		return &heraldv1.GetSubscriptionResponse{Subscription: statsIf(sub, r.GetWithStats())}, nil
	})
}

// statsIf returns sub, without its statistics unless withStats.
func statsIf(sub *heraldv1.Subscription, withStats bool) *heraldv1.Subscription {
	if withStats || sub.Stats == nil && sub.ShardStats == nil {
		return sub
	}
	sub = proto.Clone(sub).(*heraldv1.Subscription)
	sub.Stats, sub.ShardStats = nil, nil
	return sub
}

// ListSubscriptions lists a topic's subscriptions as the server does: a
// default one (id 0) first, then the others by name.
func (s *Server) ListSubscriptions(ctx context.Context, req *connect.Request[heraldv1.ListSubscriptionsRequest]) (*connect.Response[heraldv1.ListSubscriptionsResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.ListSubscriptionsRequest) (*heraldv1.ListSubscriptionsResponse, error) {
		if _, err := s.topic(r.GetTopic()); err != nil {
			return nil, err
		}
		subs := slices.Collect(maps.Values(s.subs.byTopic[r.GetTopic()]))
		slices.SortFunc(subs, func(a, b *heraldv1.Subscription) int {
			return cmp.Or(cmp.Compare(min(a.GetId(), 1), min(b.GetId(), 1)), strings.Compare(a.GetName(), b.GetName()))
		})
		for i, sub := range subs {
			subs[i] = statsIf(sub, r.GetWithStats())
		}
		return &heraldv1.ListSubscriptionsResponse{Subscriptions: subs}, nil
	})
}

func (s *Server) SetSubscriptionAttributes(ctx context.Context, req *connect.Request[heraldv1.SetSubscriptionAttributesRequest]) (*connect.Response[heraldv1.SetSubscriptionAttributesResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.SetSubscriptionAttributesRequest) (*heraldv1.SetSubscriptionAttributesResponse, error) {
		sub, err := s.subscription(r.GetTopic(), r.GetName())
		if err != nil {
			return nil, err
		}
		if sub.Attributes == nil {
			sub.Attributes = map[string]string{}
		}
		maps.Copy(sub.Attributes, r.GetAttributes())
		sub.UpdatedAt = timestamppb.New(s.now)
		return &heraldv1.SetSubscriptionAttributesResponse{Subscription: sub}, nil
	})
}

func (s *Server) DeleteSubscription(ctx context.Context, req *connect.Request[heraldv1.DeleteSubscriptionRequest]) (*connect.Response[heraldv1.DeleteSubscriptionResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.DeleteSubscriptionRequest) (*heraldv1.DeleteSubscriptionResponse, error) {
		if _, err := s.subscription(r.GetTopic(), r.GetName()); err != nil {
			return nil, err
		}
		delete(s.subs.byTopic[r.GetTopic()], r.GetName())
		return &heraldv1.DeleteSubscriptionResponse{}, nil
	})
}

func (s *Server) EnableSubscription(ctx context.Context, req *connect.Request[heraldv1.EnableSubscriptionRequest]) (*connect.Response[heraldv1.EnableSubscriptionResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.EnableSubscriptionRequest) (*heraldv1.EnableSubscriptionResponse, error) {
		sub, err := s.subscription(r.GetTopic(), r.GetName())
		if err != nil {
			return nil, err
		}
		sub.Disabled, sub.DisabledReason, sub.DisabledAt = false, "", nil
		return &heraldv1.EnableSubscriptionResponse{Subscription: sub}, nil
	})
}

func (s *Server) DisableSubscription(ctx context.Context, req *connect.Request[heraldv1.DisableSubscriptionRequest]) (*connect.Response[heraldv1.DisableSubscriptionResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.DisableSubscriptionRequest) (*heraldv1.DisableSubscriptionResponse, error) {
		sub, err := s.subscription(r.GetTopic(), r.GetName())
		if err != nil {
			return nil, err
		}
		if !sub.Disabled {
			sub.Disabled, sub.DisabledReason, sub.DisabledAt = true, r.GetReason(), timestamppb.New(s.now)
		}
		return &heraldv1.DisableSubscriptionResponse{Subscription: sub}, nil
	})
}
