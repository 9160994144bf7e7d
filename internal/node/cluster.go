package node

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/internal/controller"
	"herald/internal/host"
	"herald/internal/shard"
	"herald/internal/transport"
	clusterv1 "herald/proto/herald/cluster/v1"
)

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
	n.relay.handle(h)
	n.live.handle(h)
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

// ackLeasedHere is relay.ack on the shard's leader: the receipts whose
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
