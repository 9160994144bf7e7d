package node

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"herald/internal/controller"
	"herald/internal/host"
	"herald/internal/shard"
	"herald/internal/transport"
)

// What a node asks of the leader of a shard it does not lead. Writes need
// no such call: every replica proposes, and raft forwards proposals to the
// leader. Pull leases, though, live in the leader's memory, so fetching,
// nacking and acking by receipt go to the leader.
const (
	opFetch = "fetch"
	opNack  = "nack"
	opAck   = "ack"
	// opStarted asks whether the cluster has run before: whether the
	// node's controller applied anything beyond its bootstrap.
	opStarted = "started"
)

// shardCall is the payload of a call about one shard.
type shardCall struct {
	Topic      string        `json:"topic"`
	Shard      int           `json:"shard"`
	Max        int           `json:"max,omitempty"`
	Visibility time.Duration `json:"visibility,omitempty"`
	Offsets    []uint64      `json:"offsets,omitempty"`
	// Leases are the lease numbers of receipts naming Offsets, 0 for an
	// offset named by event id.
	Leases []uint64 `json:"leases,omitempty"`
	// Relay says the caller holds no replica of the shard: a replica that
	// does not lead it passes the call on to its leader.
	Relay bool `json:"relay,omitempty"`
}

// handleCalls registers what peers may call on this node.
func (n *Node) handleCalls(t *transport.Transport) {
	// A replica installing a snapshot fetches the entries it needs; a
	// rebuilt one asks to be re-added.
	t.HandleCall(host.EntriesOp, n.host.ServeEntries)
	t.HandleCall(host.ReaddOp, n.host.ServeReadd)
	t.HandleCall(opStarted, func(context.Context, []byte) ([]byte, error) {
		st, err := n.host.GroupStatus(controller.ControllerGroup)
		return strconv.AppendBool(nil, err == nil && st.Applied > 1), nil
	})
	n.handleRelayedCalls(t)
	n.handlePing(t)
	n.handleShardCall(t, opFetch,
		func(ctx context.Context, s *shardRuntime, c shardCall) (any, error) {
			return n.fetchShard(ctx, s, min(c.Max, MaxFetchEvents), c.Visibility)
		},
		func(ctx context.Context, s *shardRuntime, c shardCall) (any, error) {
			return n.fetchFromLeader(ctx, s, min(c.Max, MaxFetchEvents), c.Visibility)
		})
	n.handleShardCall(t, opNack,
		func(_ context.Context, s *shardRuntime, c shardCall) (any, error) {
			s.leases.Nack(c.Offsets, c.Leases)
			return nil, nil
		},
		func(ctx context.Context, s *shardRuntime, c shardCall) (any, error) {
			return nil, n.nackOnLeader(ctx, s, c)
		})
	n.handleShardCall(t, opAck,
		func(ctx context.Context, s *shardRuntime, c shardCall) (any, error) {
			return n.ackLeasedHere(ctx, s, c.Offsets, c.Leases)
		},
		func(ctx context.Context, s *shardRuntime, c shardCall) (any, error) {
			return n.ackLeased(ctx, s, c.Offsets, c.Leases)
		})
}

// handleShardCall registers op, a call about one shard that runs on its
// leader: here runs it on this node, which calledShard has checked leads
// the shard; relay runs a call relayed by a node that holds no replica,
// passing it on to the leader. What either returns is the answer, as
// JSON.
func (n *Node) handleShardCall(t *transport.Transport, op string, here, relay func(context.Context, *shardRuntime, shardCall) (any, error)) {
	t.HandleCall(op, func(ctx context.Context, payload []byte) ([]byte, error) {
		var c shardCall
		s, err := n.calledShard(payload, &c)
		if err != nil {
			return nil, err
		}
		run := here
		if c.Relay {
			run = relay
		}
		out, err := run(ctx, s, c)
		if err != nil || out == nil {
			return nil, err
		}
		return json.Marshal(out)
	})
}

// calledShard decodes a shard call and returns the shard, which this node
// must lead, or, for a relayed call, hold.
func (n *Node) calledShard(payload []byte, c *shardCall) (*shardRuntime, error) {
	if err := json.Unmarshal(payload, c); err != nil {
		return nil, fmt.Errorf("shard call does not decode: %w", err)
	}
	rs, err := n.shardOf(c.Topic, c.Shard)
	if err != nil {
		return nil, err
	}
	s := rs.rt
	if c.Relay && s.local {
		return s, nil
	}
	if !n.leads(s) {
		return nil, fmt.Errorf("%w: node %d no longer leads shard %s; retry", ErrUnavailable, n.cfg.NodeID, s.name)
	}
	return s, nil
}

// withRepair lets a replicated group be rebuilt from its peers when its
// files are damaged, and, on a node that rejoins its cluster after losing
// its data directory, creates it as a rebuilt replica.
func (n *Node) withRepair(gc host.GroupConfig) host.GroupConfig {
	gc.RepairFromPeers = len(gc.Peers) > 1
	gc.Rejoin = n.rejoin
	return gc
}

// rejoining reports whether a node starting on an empty data directory
// (epoch 1) joins a cluster that has run before, which means that this
// node's replicas, if it had any, are lost: asking every other member,
// one answer suffices. With no member reachable it cannot tell, and
// starts as a new node.
func (n *Node) rejoining(ctx context.Context, epoch uint64) bool {
	if epoch != 1 || len(n.cfg.Members) < 2 || n.cfg.Transport == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs first: the calls still out return at once
	answers := make(chan bool, len(n.cfg.Members))
	asked := 0
	for _, id := range n.cfg.Members {
		if id == n.cfg.NodeID {
			continue
		}
		asked++
		wg.Go(func() {
			out, err := n.cfg.Transport.Call(ctx, id, opStarted, nil)
			started, _ := strconv.ParseBool(string(out))
			answers <- err == nil && started
		})
	}
	for range asked {
		if <-answers {
			n.log.Warn("this node's data directory is new but its cluster has run before: its replicas are rebuilt from the other nodes, and stay out of elections until they have caught up")
			return true
		}
	}
	return false
}

// leads reports whether this node leads the shard.
func (n *Node) leads(s *shardRuntime) bool {
	if !s.serves() {
		return false
	}
	leader, err := n.host.Leader(s.group)
	return err == nil && leader == n.cfg.NodeID
}

// shardLeader returns the node that leads the shard, as this node knows
// it, or an ErrUnavailable error saying why there is none.
func (n *Node) shardLeader(s *shardRuntime) (uint64, error) {
	if !s.local {
		return 0, notHostedError(s)
	}
	if err := s.unservable(); err != nil {
		return 0, err
	}
	leader, err := n.host.Leader(s.group)
	if err != nil {
		return 0, n.hostError(s.name, err)
	}
	if leader == 0 {
		return 0, fmt.Errorf("%w: shard %s has no leader yet (an election is running); retry shortly", ErrUnavailable, s.name)
	}
	return leader, nil
}

// callLeader runs op about shard s on the node that leads it.
func (n *Node) callLeader(ctx context.Context, s *shardRuntime, leader uint64, op string, c any) ([]byte, error) {
	if n.cfg.Transport == nil {
		return nil, fmt.Errorf("%w: shard %s is led by node %d, which this node cannot reach", ErrUnavailable, s.name, leader)
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	out, err := n.cfg.Transport.Call(ctx, leader, op, payload)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: shard %s: %v", ErrUnavailable, s.name, err)
	}
	return out, nil
}

// callTarget returns the node to run a call about shard s on: its leader,
// or, when this node holds no replica of s, a node that does, which
// passes the call on (call.Relay).
func (n *Node) callTarget(s *shardRuntime, call *shardCall) (uint64, error) {
	if !s.local {
		call.Relay = true
		return relayTarget(s), nil
	}
	return n.shardLeader(s)
}

// fetchFromLeader leases events of a shard on whichever node leads it.
func (n *Node) fetchFromLeader(ctx context.Context, s *shardRuntime, max int, visibility time.Duration) ([]Delivery, error) {
	call := shardCall{Topic: s.topic, Shard: s.index, Max: max, Visibility: visibility}
	leader, err := n.callTarget(s, &call)
	if err != nil {
		return nil, err
	}
	if leader == n.cfg.NodeID {
		return n.fetchShard(ctx, s, max, visibility)
	}
	n.forwarded(ctx, "fetch")
	out, err := n.callLeader(ctx, s, leader, opFetch, call)
	if err != nil {
		return nil, err
	}
	var ds []Delivery
	if err := json.Unmarshal(out, &ds); err != nil {
		return nil, fmt.Errorf("%w: shard %s: the answer of node %d does not decode: %v", ErrUnavailable, s.name, leader, err)
	}
	return ds, nil
}

// nackOnLeader ends leases of a shard (call.Offsets, call.Leases) on
// whichever node leads it.
func (n *Node) nackOnLeader(ctx context.Context, s *shardRuntime, call shardCall) error {
	call.Relay = false
	leader, err := n.callTarget(s, &call)
	if err != nil {
		return err
	}
	if leader == n.cfg.NodeID {
		s.leases.Nack(call.Offsets, call.Leases)
		return nil
	}
	n.forwarded(ctx, "nack")
	_, err = n.callLeader(ctx, s, leader, opNack, call)
	return err
}

// ackResult is what an ack of receipts did on a shard's leader.
type ackResult struct {
	Count  int   `json:"count"`            // events newly acknowledged
	Lapsed []int `json:"lapsed,omitempty"` // positions of the receipts that lapsed
}

// ackLeased acknowledges events of a shard named by receipts (their
// offsets and lease numbers) on whichever node leads it, where the leases
// are checked.
func (n *Node) ackLeased(ctx context.Context, s *shardRuntime, offsets, numbers []uint64) (ackResult, error) {
	call := shardCall{Topic: s.topic, Shard: s.index, Offsets: offsets, Leases: numbers}
	leader, err := n.callTarget(s, &call)
	if err != nil {
		return ackResult{}, err
	}
	if leader == n.cfg.NodeID {
		return n.ackLeasedHere(ctx, s, offsets, numbers)
	}
	n.forwarded(ctx, "ack")
	out, err := n.callLeader(ctx, s, leader, opAck, call)
	if err != nil {
		return ackResult{}, err
	}
	var res ackResult
	if err := json.Unmarshal(out, &res); err != nil {
		return ackResult{}, fmt.Errorf("%w: shard %s: the answer of node %d does not decode: %v", ErrUnavailable, s.name, leader, err)
	}
	return res, nil
}

// ackLeasedHere is ackLeased on the shard's leader: the receipts whose
// leases allow it are held (consume.Leases.HoldForAck) and acknowledged by a
// proposal that only this leader may make, so that no other leader, which
// may have handed the events out again since, applies it unchecked.
func (n *Node) ackLeasedHere(ctx context.Context, s *shardRuntime, offsets, numbers []uint64) (ackResult, error) {
	held, fresh, lapsed := s.leases.HoldForAck(offsets, numbers, time.Now())
	res := ackResult{Lapsed: lapsed}
	if len(held) == 0 {
		return res, nil
	}
	sr, err := n.proposeAsLeader(ctx, s, &shard.Command{Op: shard.OpAck, Offsets: held})
	if err == nil {
		res.Count = sr.Count
		return res, nil
	}
	// The holds this ack made end with it (an offset never assigned must
	// not stay leased); a consumer's own leases stay, for it to ack again.
	s.leases.Nack(fresh, nil)
	return res, ackError(s, err)
}

// notHostedError says that this node holds no replica of the shard.
func notHostedError(s *shardRuntime) error {
	return fmt.Errorf("%w: shard %s is held by nodes %v, not by this one; send the request to one of them", ErrUnavailable, s.name, s.replicas)
}
