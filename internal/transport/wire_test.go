package transport

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	clusterv1 "herald/proto/herald/cluster/v1"
)

// A RaftMessage carried its raft message as the bytes of its encoding
// before it embedded it. The two are the same on the wire, so a batch
// from a node of either kind decodes on the other.
func TestRaftMessageWireIsTheEncodedBytesOfBefore(t *testing.T) {
	msg := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(7)),
		Entries: []*pb.Entry{{Term: new(uint64(7)), Index: new(uint64(42)), Data: []byte("an event")}}}
	inner, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var before []byte // group = 1 (varint), message = 2 (bytes)
	before = protowire.AppendTag(before, 1, protowire.VarintType)
	before = protowire.AppendVarint(before, 9)
	before = protowire.AppendTag(before, 2, protowire.BytesType)
	before = protowire.AppendBytes(before, inner)

	var got clusterv1.RaftMessage
	if err := proto.Unmarshal(before, &got); err != nil {
		t.Fatalf("the encoding of before does not decode: %v", err)
	}
	if got.GetGroup() != 9 || !proto.Equal(got.GetMessage(), msg) {
		t.Fatalf("decoded group %d, message %v; want 9, %v", got.GetGroup(), got.GetMessage(), msg)
	}
	now, err := proto.Marshal(&clusterv1.RaftMessage{Group: 9, Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	if string(now) != string(before) {
		t.Fatalf("encodes as %x, before as %x", now, before)
	}
}
