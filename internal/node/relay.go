package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"herald/internal/shard"
	"herald/internal/transport"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// What a node asks of the leader of a shard it does not lead (the Fetch,
// Nack and Ack rpcs). Writes need no such call: every replica proposes,
// and raft forwards proposals to the leader. Pull leases, though, live in
// the leader's memory, so fetching, nacking and acking by receipt go to
// the leader.
//
// A node that holds no replica of a shard (a cluster of more nodes than a
// shard has replicas) still serves it: it relays. A write goes to one of
// the shard's replicas (the Propose rpc), which proposes it through raft like
// any replica; a fetch or a nack goes to a replica flagged as relayed,
// which passes it on to the leader if it does not lead. One hop more than
// asking a replica directly, never a loop: a relayed call is not relayed
// again.

// leaderHost is what the relay asks of the Raft host: who leads a group.
type leaderHost interface {
	Leader(group uint64) (uint64, error)
}

// peerCalls are the rpcs the relay makes on other nodes
// (transport.Transport's).
type peerCalls interface {
	Fetch(ctx context.Context, to uint64, req *clusterv1.FetchRequest) (*clusterv1.FetchResponse, error)
	Nack(ctx context.Context, to uint64, req *clusterv1.NackRequest) (*clusterv1.NackResponse, error)
	Ack(ctx context.Context, to uint64, req *clusterv1.AckRequest) (*clusterv1.AckResponse, error)
	Propose(ctx context.Context, to uint64, req *clusterv1.ProposeRequest) (*clusterv1.ProposeResponse, error)
}

// leaderWork is what runs on this node once the relay has found that it
// leads the shard (or, for propose, holds it).
type leaderWork interface {
	// fetchShard leases up to max events of subscription sub of a shard
	// this node leads.
	fetchShard(ctx context.Context, s *shardRuntime, sub uint64, max int, visibility time.Duration) ([]Delivery, error)
	// ackLeasedHere acknowledges events named by receipts on the leader.
	ackLeasedHere(ctx context.Context, s *shardRuntime, sub uint64, offsets, numbers []uint64) (ackResult, error)
	// proposeShard proposes a command to a shard this node holds.
	proposeShard(ctx context.Context, s *shardRuntime, cmd *shard.Command) (shard.Result, error)
}

// shardFinder finds the runtime of a topic's shard by index.
type shardFinder interface {
	shardOf(topic string, idx int) (resolvedShard, error)
}

// relay runs calls about a shard where they must run: on its leader for
// those about pull leases, on a replica for the proposals of a node that
// holds none. It makes the calls (fetch, nack, ack, propose) and serves
// them (handle), and owns the rule that a relayed call goes one hop
// further at most.
type relay struct {
	self     uint64
	host     leaderHost
	peers    peerCalls // nil when the node runs alone
	shards   shardFinder
	here     leaderWork
	forwards *forwards
}

// shardCall is a call about one shard.
type shardCall struct {
	Topic string
	Shard int
	// Sub is the subscription whose cursor and leases a fetch, ack or
	// nack is about.
	Sub        uint64
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
	return &clusterv1.ShardCall{Topic: c.Topic, Shard: uint32(c.Shard), Relay: c.Relay, Subscription: c.Sub}
}

// shardCallOf is the call about the shard ref names.
func shardCallOf(ref *clusterv1.ShardCall) shardCall {
	return shardCall{Topic: ref.GetTopic(), Shard: int(ref.GetShard()), Relay: ref.GetRelay(), Sub: ref.GetSubscription()}
}

// handle registers the shard calls peers make on this node: those about
// leases on a shard's leader (or a replica relaying), and the proposals
// of a node that holds no replica.
func (r *relay) handle(h *transport.Handlers) {
	h.Fetch = func(ctx context.Context, req *clusterv1.FetchRequest) (*clusterv1.FetchResponse, error) {
		c := shardCallOf(req.GetShard())
		c.Max, c.Visibility = int(req.GetMax()), req.GetVisibility().AsDuration()
		ds, err := runShardCall(ctx, r, c,
			func(ctx context.Context, s *shardRuntime, c shardCall) ([]Delivery, error) {
				return r.here.fetchShard(ctx, s, c.Sub, min(c.Max, MaxFetchEvents), c.Visibility)
			},
			func(ctx context.Context, s *shardRuntime, c shardCall) ([]Delivery, error) {
				return r.fetch(ctx, s, c.Sub, min(c.Max, MaxFetchEvents), c.Visibility)
			})
		if err != nil {
			return nil, err
		}
		return &clusterv1.FetchResponse{Deliveries: deliveriesToWire(ds)}, nil
	}
	h.Nack = func(ctx context.Context, req *clusterv1.NackRequest) (*clusterv1.NackResponse, error) {
		c := shardCallOf(req.GetShard())
		c.Offsets, c.Leases = req.GetOffsets(), req.GetLeases()
		_, err := runShardCall(ctx, r, c,
			func(_ context.Context, s *shardRuntime, c shardCall) (struct{}, error) {
				s.leases.Nack(c.Sub, c.Offsets, c.Leases)
				return struct{}{}, nil
			},
			func(ctx context.Context, s *shardRuntime, c shardCall) (struct{}, error) {
				return struct{}{}, r.nack(ctx, s, c)
			})
		if err != nil {
			return nil, err
		}
		return &clusterv1.NackResponse{}, nil
	}
	h.Ack = func(ctx context.Context, req *clusterv1.AckRequest) (*clusterv1.AckResponse, error) {
		c := shardCallOf(req.GetShard())
		c.Offsets, c.Leases = req.GetOffsets(), req.GetLeases()
		res, err := runShardCall(ctx, r, c,
			func(ctx context.Context, s *shardRuntime, c shardCall) (ackResult, error) {
				return r.here.ackLeasedHere(ctx, s, c.Sub, c.Offsets, c.Leases)
			},
			func(ctx context.Context, s *shardRuntime, c shardCall) (ackResult, error) {
				return r.ack(ctx, s, c.Sub, c.Offsets, c.Leases)
			})
		if err != nil {
			return nil, err
		}
		return res.toWire(), nil
	}
	h.Propose = func(ctx context.Context, c *clusterv1.ProposeRequest) (*clusterv1.ProposeResponse, error) {
		rs, err := r.shards.shardOf(c.GetTopic(), int(c.GetShard()))
		if err != nil {
			return encodeAnswer(shard.Result{}, err), nil
		}
		if !rs.rt.local {
			return encodeAnswer(shard.Result{}, notHostedError(rs.rt)), nil // placements differ for a moment: the caller retries
		}
		cmd, err := shard.UnmarshalCommand(c.GetCommand())
		if err != nil {
			return nil, fmt.Errorf("relayed command does not decode: %w", err)
		}
		return encodeAnswer(r.here.proposeShard(ctx, rs.rt, &cmd)), nil
	}
}

// runShardCall runs c, a call about one shard that runs on its leader:
// here runs it on this node, which called has checked leads the shard;
// relay runs a call relayed by a node that holds no replica, passing it
// on to the leader.
func runShardCall[T any](ctx context.Context, r *relay, c shardCall, here, relay func(context.Context, *shardRuntime, shardCall) (T, error)) (T, error) {
	s, err := r.called(c)
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

// called returns the shard of a call, which this node must lead, or, for
// a relayed call, hold.
func (r *relay) called(c shardCall) (*shardRuntime, error) {
	rs, err := r.shards.shardOf(c.Topic, c.Shard)
	if err != nil {
		return nil, err
	}
	s := rs.rt
	if c.Relay && s.local {
		return s, nil
	}
	if !r.leads(s) {
		return nil, fmt.Errorf("%w: node %d no longer leads shard %s; retry", ErrUnavailable, r.self, s.name)
	}
	return s, nil
}

// leads reports whether this node leads the shard.
func (r *relay) leads(s *shardRuntime) bool {
	if !s.serves() {
		return false
	}
	leader, err := r.host.Leader(s.group)
	return err == nil && leader == r.self
}

// leader returns the node that leads the shard, as this node knows it,
// or an ErrUnavailable error saying why there is none.
func (r *relay) leader(s *shardRuntime) (uint64, error) {
	if !s.local {
		return 0, notHostedError(s)
	}
	if err := s.unservable(); err != nil {
		return 0, err
	}
	leader, err := r.host.Leader(s.group)
	if err != nil {
		return 0, hostError(s.name, err)
	}
	if leader == 0 {
		return 0, fmt.Errorf("%w: shard %s has no leader yet (an election is running); retry shortly", ErrUnavailable, s.name)
	}
	return leader, nil
}

// callPeer runs rpc, about shard s, on node to (its leader, or a
// replica, relaying).
func callPeer[Req, Resp any](ctx context.Context, r *relay, s *shardRuntime, to uint64,
	rpc func(peerCalls, context.Context, uint64, *Req) (*Resp, error), req *Req) (*Resp, error) {
	if r.peers == nil {
		return nil, fmt.Errorf("%w: shard %s is led by node %d, which this node cannot reach", ErrUnavailable, s.name, to)
	}
	out, err := rpc(r.peers, ctx, to, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: shard %s: %v", ErrUnavailable, s.name, err)
	}
	return out, nil
}

// target returns the node to run a call about shard s on: its leader,
// or, when this node holds no replica of s, a node that does, which
// passes the call on (call.Relay).
func (r *relay) target(s *shardRuntime, call *shardCall) (uint64, error) {
	if !s.local {
		call.Relay = true
		return relayTarget(s), nil
	}
	return r.leader(s)
}

// fetch leases events of subscription sub of a shard on whichever node
// leads it.
func (r *relay) fetch(ctx context.Context, s *shardRuntime, sub uint64, max int, visibility time.Duration) ([]Delivery, error) {
	call := shardCall{Topic: s.topic, Shard: s.index, Sub: sub, Max: max, Visibility: visibility}
	to, err := r.target(s, &call)
	if err != nil {
		return nil, err
	}
	if to == r.self {
		return r.here.fetchShard(ctx, s, sub, max, visibility)
	}
	r.forwards.count(ctx, "fetch")
	req := &clusterv1.FetchRequest{Shard: call.ref(), Max: uint32(max), Visibility: durationpb.New(visibility)}
	out, err := callPeer(ctx, r, s, to, peerCalls.Fetch, req)
	if err != nil {
		return nil, err
	}
	return deliveriesFromWire(out.GetDeliveries()), nil
}

// fetchRound leases events of subscription sub of shards, each on its
// leader (fetch). It visits them round-robin, starting one further each
// call so no shard is starved. Every shard that could not be opened is
// listed as unreadable, even once max events are in hand: that costs no
// I/O, and a consumer then hears about it on every fetch.
func (r *relay) fetchRound(ctx context.Context, tr *topicRuntime, shards []*shardRuntime, sub uint64, max int, visibility time.Duration) (FetchResult, error) {
	var res FetchResult
	start := int(tr.rr.Add(1))
	var ctxErr error
	for i := range shards {
		s := shards[(start+i)%len(shards)]
		if err := s.unservable(); err != nil {
			res.Unreadable = append(res.Unreadable, UnreadableShard{Shard: s.index, Name: s.name, Err: err})
			continue
		}
		if len(res.Deliveries) >= max || ctxErr != nil {
			continue
		}
		got, err := r.fetch(ctx, s, sub, max-len(res.Deliveries), visibility)
		switch {
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			// The request ends: that says nothing about the shard.
			ctxErr = err
		case err != nil:
			res.Unreadable = append(res.Unreadable, UnreadableShard{Shard: s.index, Name: s.name, Err: err})
		}
		if res.Deliveries == nil {
			// Most fetches fill up from their first shard: its
			// deliveries are the answer, not copied into another array.
			res.Deliveries = got
		} else {
			res.Deliveries = append(res.Deliveries, got...)
		}
	}
	if ctxErr != nil && len(res.Deliveries) == 0 {
		return FetchResult{}, ctxErr
	}
	slices.SortFunc(res.Unreadable, func(a, b UnreadableShard) int { return cmp.Compare(a.Shard, b.Shard) })
	if len(res.Unreadable) == len(shards) {
		return FetchResult{}, &UnreadableError{Topic: tr.info.Name, Shards: res.Unreadable}
	}
	return res, nil
}

// nack ends leases of a shard's subscription (call.Sub, call.Offsets,
// call.Leases) on whichever node leads it.
func (r *relay) nack(ctx context.Context, s *shardRuntime, call shardCall) error {
	call.Relay = false
	to, err := r.target(s, &call)
	if err != nil {
		return err
	}
	if to == r.self {
		s.leases.Nack(call.Sub, call.Offsets, call.Leases)
		return nil
	}
	r.forwards.count(ctx, "nack")
	req := &clusterv1.NackRequest{Shard: call.ref(), Offsets: call.Offsets, Leases: call.Leases}
	_, err = callPeer(ctx, r, s, to, peerCalls.Nack, req)
	return err
}

// ack acknowledges events of a shard named by receipts (their offsets
// and lease numbers) in subscription sub, on whichever node leads it,
// where the leases are checked.
func (r *relay) ack(ctx context.Context, s *shardRuntime, sub uint64, offsets, numbers []uint64) (ackResult, error) {
	call := shardCall{Topic: s.topic, Shard: s.index, Sub: sub, Offsets: offsets, Leases: numbers}
	to, err := r.target(s, &call)
	if err != nil {
		return ackResult{}, err
	}
	if to == r.self {
		return r.here.ackLeasedHere(ctx, s, sub, offsets, numbers)
	}
	r.forwards.count(ctx, "ack")
	req := &clusterv1.AckRequest{Shard: call.ref(), Offsets: call.Offsets, Leases: call.Leases}
	out, err := callPeer(ctx, r, s, to, peerCalls.Ack, req)
	if err != nil {
		return ackResult{}, err
	}
	return ackResultFromWire(out), nil
}

// propose has a replica of s, which this node does not hold, propose
// cmd.
func (r *relay) propose(ctx context.Context, s *shardRuntime, cmd *shard.Command) (shard.Result, error) {
	to := relayTarget(s)
	r.forwards.count(ctx, "relay")
	req := &clusterv1.ProposeRequest{Topic: s.topic, Shard: uint32(s.index), Command: cmd.AppendBinary(nil)}
	out, err := callPeer(ctx, r, s, to, peerCalls.Propose, req)
	if err != nil {
		return shard.Result{}, fmt.Errorf("%w (relayed to node %d, which holds the shard; the outcome is unknown: retry, with dedup ids when publishing)", err, to)
	}
	return decodeAnswer(out)
}

// relayTarget picks a replica of a shard this node does not hold; a
// random one, so that relayed load spreads and a retry after a failure
// likely tries another.
func relayTarget(s *shardRuntime) uint64 {
	return s.replicas[rand.IntN(len(s.replicas))]
}

// notHostedError says that this node holds no replica of the shard.
func notHostedError(s *shardRuntime) error {
	return fmt.Errorf("%w: shard %s is held by nodes %v, not by this one; send the request to one of them", ErrUnavailable, s.name, s.replicas)
}
