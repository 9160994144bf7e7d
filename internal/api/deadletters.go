package api

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	heraldv1 "herald/proto/herald/v1"
)

func (s *service) ListDeadLetters(ctx context.Context, req *connect.Request[heraldv1.ListDeadLettersRequest]) (*connect.Response[heraldv1.ListDeadLettersResponse], error) {
	dls, err := s.node.ListDeadLetters(ctx, req.Msg.Topic, req.Msg.Subscription, int(req.Msg.Max))
	if err != nil {
		return nil, toConnect(err)
	}
	resp := &heraldv1.ListDeadLettersResponse{}
	for _, dl := range dls {
		resp.DeadLetters = append(resp.DeadLetters, &heraldv1.DeadLetter{
			Event:     deliveryProto(req.Msg.Topic, dl.Delivery),
			Reason:    dl.Reason,
			LastError: dl.LastError,
			DeadAt:    timestamppb.New(dl.DeadAt),
		})
	}
	return connect.NewResponse(resp), nil
}

func (s *service) ReplayDeadLetters(ctx context.Context, req *connect.Request[heraldv1.ReplayDeadLettersRequest]) (*connect.Response[heraldv1.ReplayDeadLettersResponse], error) {
	n, err := s.node.ReplayDeadLetters(ctx, req.Msg.Topic, req.Msg.Subscription, req.Msg.Ids)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.ReplayDeadLettersResponse{Replayed: uint32(n)}), nil
}

func (s *service) PurgeDeadLetters(ctx context.Context, req *connect.Request[heraldv1.PurgeDeadLettersRequest]) (*connect.Response[heraldv1.PurgeDeadLettersResponse], error) {
	n, err := s.node.PurgeDeadLetters(ctx, req.Msg.Topic, req.Msg.Subscription, req.Msg.Ids)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.PurgeDeadLettersResponse{Purged: uint32(n)}), nil
}
