package api

import (
	"context"

	"connectrpc.com/connect"

	"herald/internal/node"
	heraldv1 "herald/proto/herald/v1"
)

// The cluster's administration: its status, adding and draining nodes.

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
	out := &heraldv1.ClusterStatusResponse{NodeId: st.NodeID, ControllerLeader: st.ControllerLeader}
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
