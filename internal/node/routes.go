package node

// Clients that route: a node tells a client which node leads each shard of
// a topic and where that node's API listens (ShardLeaders), so that the
// client sends each shard's publishes straight there. A node that does not
// lead a shard still serves its requests, forwarding them (raft forwards a
// follower's proposals; a node holding no replica relays), and counts each
// forward (herald_forwarded_requests_total), so that operators see how many
// requests take the extra hop; it also says so in the request's context
// (ForwardReport), which the API turns into a response header, so that a
// routing client learns at once that its map is stale.

import (
	"context"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/controller"
)

// ShardLeader is where a shard's requests are best sent.
type ShardLeader struct {
	Shard int
	// Leader is the node that leads the shard, as this node knows it: 0
	// while an election runs, or when this node holds no replica.
	Leader uint64
	// LeaderAddress is the leader's host:port ("" when Leader is 0 or
	// its address is unknown). A node's API and its peers' connections
	// share one listener, so this is the address in --peers (or herald
	// cluster add).
	LeaderAddress string
	// ReplicaAddresses are the host:port of each replica's node whose
	// address is known, the preferred leader first.
	ReplicaAddresses []string
}

// ShardLeaders returns, per shard of a topic in shard order, its leader
// and replicas with their addresses, as this node knows them. It reads
// only this node's memory: a client may ask it whenever its map is stale.
func (n *Node) ShardLeaders(name string) (_ []ShardLeader, err error) {
	defer classify(&err)
	tr, err := n.reg.lookup(name)
	if err != nil {
		return nil, err
	}
	members, _ := n.reg.cluster()
	addr := addressBook(n.cfg.Addresses, members)
	out := make([]ShardLeader, len(tr.shards))
	for i, s := range tr.shards {
		sl := ShardLeader{Shard: i}
		if s.local && s.serves() {
			sl.Leader, _ = n.host.Leader(s.group)
		}
		sl.LeaderAddress = addr[sl.Leader]
		for _, id := range s.replicas {
			if a := addr[id]; a != "" {
				sl.ReplicaAddresses = append(sl.ReplicaAddresses, a)
			}
		}
		out[i] = sl
	}
	return out, nil
}

// addressBook maps node ids to their host:port: the controller's record
// of members, and peers (--peers) for the nodes the cluster started with.
func addressBook(peers map[uint64]string, members []controller.Member) map[uint64]string {
	book := make(map[uint64]string, len(peers)+len(members))
	for id, a := range peers {
		book[id] = a
	}
	for _, m := range members {
		if m.Address != "" {
			book[m.ID] = m.Address
		}
	}
	return book
}

type forwardReportKey struct{}

// ForwardReport returns a context under which the node records whether it
// forwarded any part of the request to another node (see forwards), and
// a function that reports it once the request is done.
func ForwardReport(ctx context.Context) (context.Context, func() bool) {
	var f atomic.Bool
	return context.WithValue(ctx, forwardReportKey{}, &f), f.Load
}

// forwards counts the requests this node passes to another, by how:
// "raft" (a follower's proposal, which raft hands to the leader), "relay"
// (to a replica, from a node that holds none), "fetch", "nack" or "ack"
// (an ack by receipt; to the shard's leader, where pull leases live).
type forwards struct {
	counter *prometheus.CounterVec // herald_forwarded_requests_total
}

// count counts one forward, and says so in ctx's ForwardReport.
func (f *forwards) count(ctx context.Context, how string) {
	f.counter.WithLabelValues(how).Inc()
	if r, ok := ctx.Value(forwardReportKey{}).(*atomic.Bool); ok {
		r.Store(true)
	}
}
