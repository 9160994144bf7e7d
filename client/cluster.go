package client

import (
	"context"

	"connectrpc.com/connect"

	heraldv1 "herald/proto/herald/v1"
)

// ClusterStatus is the cluster as the node asked sees it.
type ClusterStatus struct {
	NodeID           uint64         `json:"node_id"` // the node that answered
	ControllerLeader uint64         `json:"controller_leader"`
	Nodes            []ClusterNode  `json:"nodes"`
	Shards           []ClusterShard `json:"shards"`
	Rebalancing      bool           `json:"rebalancing,omitempty"` // a rebalance is under way
}

// ClusterNode is one node of the cluster.
type ClusterNode struct {
	ID        uint64 `json:"id"`
	Address   string `json:"address,omitempty"`
	Self      bool   `json:"self,omitempty"`     // the node that answered
	Reachable bool   `json:"reachable"`          // it answered the node asked, just now
	Draining  bool   `json:"draining,omitempty"` // its replicas are moving off it
	Replicas  int    `json:"replicas"`           // shard replicas placed on it
	Error     string `json:"error,omitempty"`    // why it is not reachable
}

// ClusterShard is one shard: its replicas, preferred leader and leader.
type ClusterShard struct {
	Topic string `json:"topic"`
	Shard int    `json:"shard"`
	Name  string `json:"name"`
	Group uint64 `json:"group"` // the shard's Raft group
	// Replicas are the nodes holding the shard, the preferred leader
	// first.
	Replicas        []ClusterReplica `json:"replicas"`
	PreferredLeader uint64           `json:"preferred_leader"`
	Leader          uint64           `json:"leader"` // 0: none known
}

// ClusterReplica is one replica of a shard.
type ClusterReplica struct {
	Node    uint64 `json:"node"`
	Applied uint64 `json:"applied"`         // the last log index its node applied
	Error   string `json:"error,omitempty"` // why its node did not report it
}

// ClusterStatus returns the cluster's nodes and shards (admin scope).
func (c *Client) ClusterStatus(ctx context.Context) (*ClusterStatus, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := c.svc.ClusterStatus(ctx, connect.NewRequest(&heraldv1.ClusterStatusRequest{}))
	if err != nil {
		return nil, err
	}
	m := resp.Msg
	st := &ClusterStatus{NodeID: m.GetNodeId(), ControllerLeader: m.GetControllerLeader(), Rebalancing: m.GetRebalancing(),
		Nodes: []ClusterNode{}, Shards: []ClusterShard{}}
	for _, n := range m.GetNodes() {
		st.Nodes = append(st.Nodes, ClusterNode{ID: n.GetId(), Address: n.GetAddress(), Self: n.GetSelf(), Reachable: n.GetReachable(),
			Draining: n.GetDraining(), Replicas: int(n.GetReplicas()), Error: n.GetError()})
	}
	for _, s := range m.GetShards() {
		sh := ClusterShard{Topic: s.GetTopic(), Shard: int(s.GetShard()), Name: s.GetName(), Group: s.GetGroup(),
			PreferredLeader: s.GetPreferredLeader(), Leader: s.GetLeader(), Replicas: []ClusterReplica{}}
		for _, r := range s.GetReplicas() {
			sh.Replicas = append(sh.Replicas, ClusterReplica{Node: r.GetNode(), Applied: r.GetApplied(), Error: r.GetError()})
		}
		st.Shards = append(st.Shards, sh)
	}
	return st, nil
}

// AddNode makes node id, listening at address (host:port), a member of
// the cluster, so that topics created from now on are placed on it too
// (admin scope).
func (c *Client) AddNode(ctx context.Context, id uint64, address string) error {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	_, err := c.svc.AddNode(ctx, connect.NewRequest(&heraldv1.AddNodeRequest{Id: id, Address: address}))
	return err
}

// RemoveNode starts draining node id: its replicas move to other nodes,
// one at a time, and then it leaves the cluster. It returns once the
// drain is recorded; ClusterStatus shows its progress (admin scope).
func (c *Client) RemoveNode(ctx context.Context, id uint64) error {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	_, err := c.svc.RemoveNode(ctx, connect.NewRequest(&heraldv1.RemoveNodeRequest{Id: id}))
	return err
}

// Rebalance starts moving replicas so that every node holds an even
// share, one move at a time, then spreads the shards' preferred leaders
// evenly (admin scope). It returns once the rebalance is recorded;
// ClusterStatus reports Rebalancing until it is done.
func (c *Client) Rebalance(ctx context.Context) error {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	_, err := c.svc.Rebalance(ctx, connect.NewRequest(&heraldv1.RebalanceRequest{}))
	return err
}
