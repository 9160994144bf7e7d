package node

import (
	"cmp"
	"context"
	"slices"

	"herald/internal/balance"
	"herald/internal/controller"
)

// The cluster's status as this node sees it: the members, which of them
// answer, and for each shard its replicas' reports (localStatus, asked of
// every node by membership.gather), its preferred leader and its leader.

// NodeStatus is one node of the cluster as this node sees it.
type NodeStatus struct {
	ID      uint64
	Address string // host:port; empty when this node does not know it
	Self    bool   // the node that answered
	// Reachable means the node answered this node just now.
	Reachable bool
	// Draining means its replicas are moving off it (herald cluster
	// remove).
	Draining bool
	// Replicas is how many shard replicas the placement puts on it.
	Replicas int
	Err      string // why it is not reachable
}

// ReplicaStatus is one replica of a shard, as its node reported it.
type ReplicaStatus struct {
	Node    uint64
	Applied uint64 // the last log index its node applied
	Err     string // why its node did not report it
}

// ShardPlacement is one shard: where its replicas are and who leads.
type ShardPlacement struct {
	Topic string
	Shard int
	Name  string
	Group uint64 // the shard's Raft group
	// Replicas are the nodes the controller places the shard on, the
	// preferred leader first.
	Replicas []ReplicaStatus
	// PreferredLeader is the first replica not draining: the node the
	// balancer hands the leadership to.
	PreferredLeader uint64
	Leader          uint64 // 0 when no replica that answered knows one
}

// ClusterStatus is the cluster as one node sees it.
type ClusterStatus struct {
	NodeID           uint64 // the node that answered
	ControllerLeader uint64
	Nodes            []NodeStatus     // by id
	Shards           []ShardPlacement // by topic, then shard
	// Rebalancing means a rebalance (Rebalance) is under way.
	Rebalancing bool
}

// ClusterStatus asks every node for the state of its replicas and puts
// together the nodes and, per shard, its replicas, their applied indexes,
// its preferred leader and its leader.
func (n *Node) ClusterStatus(ctx context.Context) (_ ClusterStatus, err error) {
	defer classify(&err)

	members, rebalancing := n.reg.cluster()
	topics := n.reg.topicList()
	slices.SortFunc(topics, func(a, b *topicRuntime) int { return cmp.Compare(a.info.Name, b.info.Name) })

	nodes := memberStatus(&n.cfg, members)
	reports := n.membership.gather(ctx, nodes)
	out := ClusterStatus{NodeID: n.cfg.NodeID, Nodes: nodes, Rebalancing: rebalancing}
	out.ControllerLeader = reports[n.cfg.NodeID].ControllerLeader
	draining := balance.DrainingSet(members)
	for _, tr := range topics {
		for _, s := range tr.shards {
			out.Shards = append(out.Shards, shardPlacement(s, reports, draining))
		}
	}
	for i := range out.Nodes {
		for _, sp := range out.Shards {
			if slices.ContainsFunc(sp.Replicas, func(r ReplicaStatus) bool { return r.Node == out.Nodes[i].ID }) {
				out.Nodes[i].Replicas++
			}
		}
	}
	return out, nil
}

// memberStatus lists the members: those the controller records, or
// before any change the nodes of --peers, with their addresses; cfg is
// the node's that answers.
func memberStatus(cfg *Config, members []controller.Member) []NodeStatus {
	byID := make(map[uint64]NodeStatus)
	for _, id := range cfg.Members {
		byID[id] = NodeStatus{ID: id, Address: cfg.Addresses[id]}
	}
	if len(members) > 0 {
		clear(byID)
		for _, m := range members {
			addr := m.Address
			if addr == "" {
				addr = cfg.Addresses[m.ID]
			}
			byID[m.ID] = NodeStatus{ID: m.ID, Address: addr, Draining: m.Draining}
		}
	}
	out := make([]NodeStatus, 0, len(byID))
	for _, ns := range byID {
		ns.Self = ns.ID == cfg.NodeID
		out = append(out, ns)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// shardPlacement puts a shard's placement and its replicas' reports
// together. The leader is the replica that says it leads, or else the
// leader most replicas name.
func shardPlacement(s *shardRuntime, reports map[uint64]localStatus, draining map[uint64]bool) ShardPlacement {
	sp := ShardPlacement{Topic: s.topic, Shard: s.index, Name: s.name, Group: s.group,
		PreferredLeader: balance.PreferredLeader(s.replicas, draining)}
	votes := make(map[uint64]int)
	for _, id := range s.replicas {
		rs := ReplicaStatus{Node: id}
		st, ok := reports[id]
		g, has := st.Groups[s.group]
		switch {
		case !ok:
			rs.Err = "node did not answer"
		case !has:
			rs.Err = "node does not run the shard (yet)"
		default:
			rs.Applied, rs.Err = g.Applied, g.Err
			if g.Leader == id {
				sp.Leader = id
			}
			if g.Leader != 0 {
				votes[g.Leader]++
			}
		}
		sp.Replicas = append(sp.Replicas, rs)
	}
	if sp.Leader == 0 {
		for id, v := range votes {
			if v > votes[sp.Leader] || (v == votes[sp.Leader] && id < sp.Leader) {
				sp.Leader = id
			}
		}
	}
	return sp
}
