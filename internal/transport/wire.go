package transport

import (
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"

	clusterv1 "herald/proto/herald/cluster/v1"
)

// A frame's body is a clusterv1.RaftBatch, whose messages carry etcd raft
// messages as their bytes. etcd raft's messages have Go code of their own
// (gogoproto's, with methods to encode and decode in place), so the
// stream encodes and decodes a batch by hand around them: each message is
// encoded straight into the frame, and decoded straight from it, each
// entry's data copied once, with no RaftBatch or RaftMessage built.

// The field numbers of cluster.proto's RaftBatch and RaftMessage.
const (
	batchFromField     = 1
	batchMessagesField = 2
	messageGroupField  = 1
	messageBodyField   = 2
)

// appendBatch appends to dst the encoding of a RaftBatch from node from
// holding batch's messages.
func appendBatch(dst []byte, from uint64, batch []outgoing) []byte {
	dst = protowire.AppendTag(dst, batchFromField, protowire.VarintType)
	dst = protowire.AppendVarint(dst, from)
	for i := range batch {
		o := &batch[i]
		size := o.msg.Size()
		inner := protowire.SizeTag(messageGroupField) + protowire.SizeVarint(o.group) +
			protowire.SizeTag(messageBodyField) + protowire.SizeBytes(size)
		dst = protowire.AppendTag(dst, batchMessagesField, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(inner))
		dst = protowire.AppendTag(dst, messageGroupField, protowire.VarintType)
		dst = protowire.AppendVarint(dst, o.group)
		dst = protowire.AppendTag(dst, messageBodyField, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(size))
		start := len(dst)
		dst = append(dst, make([]byte, size)...)
		if _, err := o.msg.MarshalToSizedBuffer(dst[start:]); err != nil {
			// Encoding into a buffer of the size Size gave cannot fail.
			panic(fmt.Sprintf("encode a raft message of %d bytes: %v", size, err))
		}
	}
	return dst
}

// decodeBatch decodes the RaftBatch b and hands each of its messages to
// deliver, in order.
func decodeBatch(b []byte, deliver func(group uint64, m pb.Message)) error {
	var from uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("a raft batch: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == batchFromField && typ == protowire.VarintType:
			from, n = protowire.ConsumeVarint(b)
		case num == batchMessagesField && typ == protowire.BytesType:
			var body []byte
			body, n = protowire.ConsumeBytes(b)
			if n >= 0 {
				if err := decodeMessage(body, from, deliver); err != nil {
					return err
				}
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("a raft batch from node %d: %w", from, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

// decodeMessage decodes one RaftMessage of a batch from node from.
func decodeMessage(b []byte, from uint64, deliver func(group uint64, m pb.Message)) error {
	var group uint64
	var body []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("a raft message from node %d: %w", from, protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == messageGroupField && typ == protowire.VarintType:
			group, n = protowire.ConsumeVarint(b)
		case num == messageBodyField && typ == protowire.BytesType:
			body, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("a raft message from node %d: %w", from, protowire.ParseError(n))
		}
		b = b[n:]
	}
	if body == nil {
		return fmt.Errorf("a batch from node %d holds no raft message for group %d", from, group)
	}
	var m pb.Message
	if err := m.Unmarshal(body); err != nil {
		return fmt.Errorf("a raft message from node %d for group %d does not decode: %w", from, group, err)
	}
	deliver(group, m)
	return nil
}

// encodeBatch builds the RaftBatch of batch for the Raft rpc, which
// carries batches as generated messages.
func encodeBatch(from uint64, batch []outgoing) (*clusterv1.RaftBatch, error) {
	b := &clusterv1.RaftBatch{From: from, Messages: make([]*clusterv1.RaftMessage, 0, len(batch))}
	for i := range batch {
		data, err := batch[i].msg.Marshal()
		if err != nil {
			return nil, fmt.Errorf("encode a raft message for group %d: %w", batch[i].group, err)
		}
		b.Messages = append(b.Messages, &clusterv1.RaftMessage{Group: batch[i].group, Message: data})
	}
	return b, nil
}

// deliverBatch hands the messages of batch, received on the Raft rpc, to
// rcv.
func deliverBatch(batch *clusterv1.RaftBatch, rcv Receiver) error {
	for _, rm := range batch.GetMessages() {
		if rm.GetMessage() == nil {
			return fmt.Errorf("a batch from node %d holds no raft message for group %d", batch.GetFrom(), rm.GetGroup())
		}
		var m pb.Message
		if err := m.Unmarshal(rm.GetMessage()); err != nil {
			return fmt.Errorf("a raft message from node %d for group %d does not decode: %w", batch.GetFrom(), rm.GetGroup(), err)
		}
		receive(rcv, rm.GetGroup(), m)
	}
	return nil
}

// receive hands m to rcv. A message for a group this node does not run
// yet (its topic is not applied here yet) is dropped: raft resends.
func receive(rcv Receiver, group uint64, m pb.Message) {
	_ = rcv.Receive(group, m)
}
