package node

// The node's types as the rpcs of the cluster service carry them: a
// fetch's deliveries and an ack's result (the relay's calls; a relayed
// proposal's answer is forward.go).

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	clusterv1 "herald/proto/herald/cluster/v1"
)

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
