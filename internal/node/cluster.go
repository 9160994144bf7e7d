package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/internal/controller"
	"herald/internal/host"
	"herald/internal/shard"
	"herald/internal/transport"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// What a node asks of the leader of a shard it does not lead (the Fetch,
// Nack and Ack rpcs). Writes need no such call: every replica proposes,
// and raft forwards proposals to the leader. Pull leases, though, live in
// the leader's memory, so fetching, nacking and acking by receipt go to
// the leader.

// shardCall is a call about one shard.
type shardCall struct {
	Topic      string
	Shard      int
	Max        int
	Visibility time.Duration
	Offsets    []uint64
	// Leases are the lease numbers of receipts naming Offsets, 0 for an
	// offset named by event id.
	Leases []uint64
	// Relay says the caller holds no replica of the shard: a replica that
	// does not lead it passes the call on to its leader.
	Relay bool
}

// ref names the call's shard on the wire.
func (c shardCall) ref() *clusterv1.ShardCall {
	return &clusterv1.ShardCall{Topic: c.Topic, Shard: uint32(c.Shard), Relay: c.Relay}
}

// shardCallOf is the call about the shard ref names.
func shardCallOf(ref *clusterv1.ShardCall) shardCall {
	return shardCall{Topic: ref.GetTopic(), Shard: int(ref.GetShard()), Relay: ref.GetRelay()}
}

// handleCalls registers what peers may call on this node.
func (n *Node) handleCalls(h *transport.Handlers) {
	// A replica installing a snapshot fetches the entries it needs; a
	// rebuilt one asks to be re-added.
	h.Entries = n.host.ServeEntries
	h.Readd = n.host.ServeReadd
	h.Started = func(context.Context, *clusterv1.StartedRequest) (*clusterv1.StartedResponse, error) {
		st, err := n.host.GroupStatus(controller.ControllerGroup)
		return &clusterv1.StartedResponse{Started: err == nil && st.Applied > 1}, nil
	}
	n.handleRelayedCalls(h)
	n.handlePing(h)
	h.Fetch = func(ctx context.Context, req *clusterv1.FetchRequest) (*clusterv1.FetchResponse, error) {
		c := shardCallOf(req.GetShard())
		c.Max, c.Visibility = int(req.GetMax()), req.GetVisibility().AsDuration()
		ds, err := runShardCall(ctx, n, c,
			func(ctx context.Context, s *shardRuntime, c shardCall) ([]Delivery, error) {
				return n.fetchShard(ctx, s, min(c.Max, MaxFetchEvents), c.Visibility)
			},
			func(ctx context.Context, s *shardRuntime, c shardCall) ([]Delivery, error) {
				return n.fetchFromLeader(ctx, s, min(c.Max, MaxFetchEvents), c.Visibility)
			})
		if err != nil {
			return nil, err
		}
		return &clusterv1.FetchResponse{Deliveries: deliveriesToWire(ds)}, nil
	}
	h.Nack = func(ctx context.Context, req *clusterv1.NackRequest) (*clusterv1.NackResponse, error) {
		c := shardCallOf(req.GetShard())
		c.Offsets, c.Leases = req.GetOffsets(), req.GetLeases()
		_, err := runShardCall(ctx, n, c,
			func(_ context.Context, s *shardRuntime, c shardCall) (struct{}, error) {
				s.leases.Nack(c.Offsets, c.Leases)
				return struct{}{}, nil
			},
			func(ctx context.Context, s *shardRuntime, c shardCall) (struct{}, error) {
				return struct{}{}, n.nackOnLeader(ctx, s, c)
			})
		if err != nil {
			return nil, err
		}
		return &clusterv1.NackResponse{}, nil
	}
	h.Ack = func(ctx context.Context, req *clusterv1.AckRequest) (*clusterv1.AckResponse, error) {
		c := shardCallOf(req.GetShard())
		c.Offsets, c.Leases = req.GetOffsets(), req.GetLeases()
		res, err := runShardCall(ctx, n, c,
			func(ctx context.Context, s *shardRuntime, c shardCall) (ackResult, error) {
				return n.ackLeasedHere(ctx, s, c.Offsets, c.Leases)
			},
			func(ctx context.Context, s *shardRuntime, c shardCall) (ackResult, error) {
				return n.ackLeased(ctx, s, c.Offsets, c.Leases)
			})
		if err != nil {
			return nil, err
		}
		return res.toWire(), nil
	}
}

// runShardCall runs c, a call about one shard that runs on its leader:
// here runs it on this node, which calledShard has checked leads the
// shard; relay runs a call relayed by a node that holds no replica,
// passing it on to the leader.
func runShardCall[T any](ctx context.Context, n *Node, c shardCall, here, relay func(context.Context, *shardRuntime, shardCall) (T, error)) (T, error) {
	s, err := n.calledShard(c)
	if err != nil {
		var zero T
		return zero, err
	}
	run := here
	if c.Relay {
		run = relay
	}
	return run(ctx, s, c)
}

// calledShard returns the shard of a call, which this node must lead, or,
// for a relayed call, hold.
func (n *Node) calledShard(c shardCall) (*shardRuntime, error) {
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
			out, err := n.cfg.Transport.Started(ctx, id, &clusterv1.StartedRequest{})
			answers <- err == nil && out.GetStarted()
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

// callLeader runs rpc, about shard s, on the node that leads it (or on a
// replica, relaying).
func callLeader[Req, Resp any](ctx context.Context, n *Node, s *shardRuntime, leader uint64,
	rpc func(*transport.Transport, context.Context, uint64, *Req) (*Resp, error), req *Req) (*Resp, error) {
	if n.cfg.Transport == nil {
		return nil, fmt.Errorf("%w: shard %s is led by node %d, which this node cannot reach", ErrUnavailable, s.name, leader)
	}
	out, err := rpc(n.cfg.Transport, ctx, leader, req)
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
	req := &clusterv1.FetchRequest{Shard: call.ref(), Max: uint32(max), Visibility: durationpb.New(visibility)}
	out, err := callLeader(ctx, n, s, leader, (*transport.Transport).Fetch, req)
	if err != nil {
		return nil, err
	}
	return deliveriesFromWire(out.GetDeliveries()), nil
}

// deliveriesToWire is a fetch's answer as the Fetch rpc carries it.
func deliveriesToWire(ds []Delivery) []*clusterv1.Delivery {
	out := make([]*clusterv1.Delivery, len(ds))
	for i, d := range ds {
		e := &clusterv1.Event{Key: d.Event.Key, Payload: d.Event.Payload, Headers: d.Event.Headers, DedupId: d.Event.DedupID}
		out[i] = &clusterv1.Delivery{Id: d.ID, Receipt: d.Receipt, Shard: uint32(d.Shard), Offset: d.Offset,
			Event: e, Time: timestamppb.New(d.Time), Attempt: d.Attempt}
	}
	return out
}

// deliveriesFromWire is the answer of a Fetch rpc.
func deliveriesFromWire(in []*clusterv1.Delivery) []Delivery {
	out := make([]Delivery, len(in))
	for i, d := range in {
		e := d.GetEvent()
		out[i] = Delivery{ID: d.GetId(), Receipt: d.GetReceipt(), Shard: int(d.GetShard()), Offset: d.GetOffset(),
			Event: Event{Key: e.GetKey(), Payload: e.GetPayload(), Headers: e.GetHeaders(), DedupID: e.GetDedupId()},
			Time:  d.GetTime().AsTime(), Attempt: d.GetAttempt()}
	}
	return out
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
	req := &clusterv1.NackRequest{Shard: call.ref(), Offsets: call.Offsets, Leases: call.Leases}
	_, err = callLeader(ctx, n, s, leader, (*transport.Transport).Nack, req)
	return err
}

// ackResult is what an ack of receipts did on a shard's leader.
type ackResult struct {
	Count  int   // events newly acknowledged
	Lapsed []int // positions of the receipts that lapsed
}

// toWire is r as the Ack rpc answers it.
func (r ackResult) toWire() *clusterv1.AckResponse {
	out := &clusterv1.AckResponse{Count: uint32(r.Count)}
	for _, l := range r.Lapsed {
		out.Lapsed = append(out.Lapsed, uint32(l))
	}
	return out
}

// ackResultFromWire is the answer of an Ack rpc.
func ackResultFromWire(in *clusterv1.AckResponse) ackResult {
	r := ackResult{Count: int(in.GetCount())}
	for _, l := range in.GetLapsed() {
		r.Lapsed = append(r.Lapsed, int(l))
	}
	return r
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
	req := &clusterv1.AckRequest{Shard: call.ref(), Offsets: call.Offsets, Leases: call.Leases}
	out, err := callLeader(ctx, n, s, leader, (*transport.Transport).Ack, req)
	if err != nil {
		return ackResult{}, err
	}
	return ackResultFromWire(out), nil
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
