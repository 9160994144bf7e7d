package node

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/internal/host"
	"herald/internal/shard"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// withRepair lets a replicated group be rebuilt from its peers when its
// files are damaged, and, on a node that rejoins its cluster after losing
// its data directory (rejoin, see membership.rejoining), creates it as a
// rebuilt replica.
func withRepair(gc host.GroupConfig, rejoin bool) host.GroupConfig {
	gc.RepairFromPeers = len(gc.Peers) > 1
	gc.Rejoin = rejoin
	return gc
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
