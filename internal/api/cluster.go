package api

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"herald/internal/node"
	"herald/internal/protocol"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// The cluster's administration: its status, adding, draining and
// rebalancing nodes; and where each shard's leader is, for clients.

func (s *service) ClusterStatus(ctx context.Context, _ *connect.Request[heraldv1.ClusterStatusRequest]) (*connect.Response[heraldv1.ClusterStatusResponse], error) {
	st, err := s.node.ClusterStatus(ctx)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(clusterStatusProto(st)), nil
}

func (s *service) AddNode(ctx context.Context, req *connect.Request[heraldv1.AddNodeRequest]) (*connect.Response[heraldv1.AddNodeResponse], error) {
	if err := s.node.AddNode(ctx, req.Msg.Id, req.Msg.Address); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.AddNodeResponse{}), nil
}

func (s *service) RemoveNode(ctx context.Context, req *connect.Request[heraldv1.RemoveNodeRequest]) (*connect.Response[heraldv1.RemoveNodeResponse], error) {
	if err := s.node.RemoveNode(ctx, req.Msg.Id); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.RemoveNodeResponse{}), nil
}

func clusterStatusProto(st node.ClusterStatus) *heraldv1.ClusterStatusResponse {
	out := &heraldv1.ClusterStatusResponse{NodeId: st.NodeID, ControllerLeader: st.ControllerLeader, Rebalancing: st.Rebalancing}
	for _, n := range st.Nodes {
		out.Nodes = append(out.Nodes, &heraldv1.ClusterNode{Id: n.ID, Address: n.Address, Self: n.Self, Reachable: n.Reachable,
			Draining: n.Draining, Replicas: uint32(n.Replicas), Error: n.Err})
	}
	for _, sp := range st.Shards {
		sh := &heraldv1.ClusterShard{Topic: sp.Topic, Shard: uint32(sp.Shard), Name: sp.Name, Group: sp.Group,
			PreferredLeader: sp.PreferredLeader, Leader: sp.Leader}
		for _, r := range sp.Replicas {
			sh.Replicas = append(sh.Replicas, &heraldv1.ClusterReplica{Node: r.Node, Applied: r.Applied, Error: r.Err})
		}
		out.Shards = append(out.Shards, sh)
	}
	return out
}

func (s *service) Rebalance(ctx context.Context, _ *connect.Request[heraldv1.RebalanceRequest]) (*connect.Response[heraldv1.RebalanceResponse], error) {
	if err := s.node.Rebalance(ctx); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&heraldv1.RebalanceResponse{}), nil
}

// ShardLeaders needs a token of any scope: every client that routes needs
// it, and it tells no more than where the nodes listen.
func (s *service) ShardLeaders(_ context.Context, req *connect.Request[heraldv1.ShardLeadersRequest]) (*connect.Response[heraldv1.ShardLeadersResponse], error) {
	sls, err := s.node.ShardLeaders(req.Msg.Topic)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &heraldv1.ShardLeadersResponse{NodeId: s.node.ID()}
	for _, sl := range sls {
		out.Shards = append(out.Shards, &heraldv1.ShardLeader{Shard: uint32(sl.Shard), Leader: sl.Leader,
			LeaderAddress: sl.LeaderAddress, ReplicaAddresses: sl.ReplicaAddresses})
	}
	return connect.NewResponse(out), nil
}

// routed are the procedures whose requests a routing client sends to the
// shards' leaders.
var routed = map[string]bool{
	heraldv1connect.HeraldServicePublishProcedure: true,
	heraldv1connect.HeraldServiceFetchProcedure:   true,
	heraldv1connect.HeraldServiceAckProcedure:     true,
	heraldv1connect.HeraldServiceNackProcedure:    true,
}

func forwardedHeader() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if !routed[req.Spec().Procedure] {
				return next(ctx, req)
			}
			ctx, forwarded := node.ForwardReport(ctx)
			resp, err := next(ctx, req)
			if forwarded() {
				var ce *connect.Error
				switch {
				case err == nil && resp != nil:
					resp.Header().Set(protocol.ForwardedHeader, "1")
				case errors.As(err, &ce):
					ce.Meta().Set(protocol.ForwardedHeader, "1")
				}
			}
			return resp, err
		}
	}
}

// parseShards reads a protocol.ShardsHeader value.
func parseShards(v string) ([]int, error) {
	var shards []int
	for f := range strings.SplitSeq(v, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || i < 0 {
			return nil, fmt.Errorf("header %s: %q: want shard indexes, comma-separated, such as 0,3", protocol.ShardsHeader, v)
		}
		shards = append(shards, i)
	}
	return shards, nil
}
