package fakeherald

import (
	"context"

	"connectrpc.com/connect"

	heraldv1 "herald/proto/herald/v1"
)

// SeekReplayed is what the fake's SeekSubscription answers replayed: it
// keeps no events.
const SeekReplayed = 7

func (s *Server) SeekSubscription(ctx context.Context, req *connect.Request[heraldv1.SeekSubscriptionRequest]) (*connect.Response[heraldv1.SeekSubscriptionResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.SeekSubscriptionRequest) (*heraldv1.SeekSubscriptionResponse, error) {
		if _, err := s.subscription(r.GetTopic(), r.GetSubscription()); err != nil {
			return nil, err
		}
		return &heraldv1.SeekSubscriptionResponse{Replayed: SeekReplayed}, nil
	})
}
