package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"herald/internal/node"
	"herald/internal/topic"
	heraldv1 "herald/proto/herald/v1"
)

// SeekSubscription takes one target of the request's oneof; none is
// refused by the node, as a request that says nowhere to go.

func (s *service) SeekSubscription(ctx context.Context, req *connect.Request[heraldv1.SeekSubscriptionRequest]) (*connect.Response[heraldv1.SeekSubscriptionResponse], error) {
	m := req.Msg
	var to node.SeekTarget
	switch t := m.Target.(type) {
	case *heraldv1.SeekSubscriptionRequest_Time:
		if err := t.Time.CheckValid(); err != nil {
			return nil, toConnect(fmt.Errorf("%w: seek time: %v", topic.ErrInvalid, err))
		}
		to.Time = t.Time.AsTime()
	case *heraldv1.SeekSubscriptionRequest_EventId:
		to.EventID = t.EventId
	case *heraldv1.SeekSubscriptionRequest_Earliest:
		to.Earliest = t.Earliest
	}
	res, err := s.node.SeekSubscription(ctx, m.Topic, m.Subscription, to)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.SeekSubscriptionResponse{Replayed: int64(res.Replayed)}), nil
}
