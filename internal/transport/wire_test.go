package transport

import (
	"reflect"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	clusterv1 "herald/proto/herald/cluster/v1"
)

func wireBatch() []outgoing {
	app := msg(pb.MsgApp, 1, 2, 41)
	app.Term, app.LogTerm, app.Commit = 7, 7, 40
	app.Entries = []pb.Entry{{Term: 7, Index: 42, Data: []byte("an event")}, {Term: 7, Index: 43, Type: pb.EntryConfChangeV2}}
	return []outgoing{{group: 9, msg: app}, {group: 1 << 40, msg: msg(pb.MsgHeartbeat, 1, 2, 0)}}
}

// The stream's hand-made encoding of a batch is cluster.proto's
// RaftBatch: the generated code (the Raft rpc's, a node of the release
// before) reads it, each message as the bytes of its encoding, and the
// stream reads what the generated code writes.
func TestBatchEncodingIsClusterProtos(t *testing.T) {
	batch := wireBatch()
	var generated clusterv1.RaftBatch
	if err := proto.Unmarshal(appendBatch(nil, 5, batch), &generated); err != nil {
		t.Fatalf("the generated code does not read the stream's encoding: %v", err)
	}
	if generated.GetFrom() != 5 || len(generated.GetMessages()) != len(batch) {
		t.Fatalf("the generated code reads from %d, %d messages; want 5, %d", generated.GetFrom(), len(generated.GetMessages()), len(batch))
	}
	for i, rm := range generated.GetMessages() {
		var m pb.Message
		if err := m.Unmarshal(rm.GetMessage()); err != nil || rm.GetGroup() != batch[i].group || !reflect.DeepEqual(m, batch[i].msg) {
			t.Errorf("message %d reads as group %d, %v (%v); want %d, %v", i, rm.GetGroup(), m, err, batch[i].group, batch[i].msg)
		}
	}

	fromGenerated, err := encodeBatch(5, batch)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(fromGenerated)
	if err != nil {
		t.Fatal(err)
	}
	var got []outgoing
	if err := decodeBatch(b, func(group uint64, m pb.Message) { got = append(got, outgoing{group: group, msg: m}) }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, batch) {
		t.Errorf("the generated encoding decodes as %v; want %v", got, batch)
	}
}

// A damaged frame is an error naming what it is, not a panic or a wrong
// message: the stream then ends, and the sender opens another.
func TestDamagedBatchesAreRefused(t *testing.T) {
	whole := appendBatch(nil, 5, wireBatch())
	noMessage, err := proto.Marshal(&clusterv1.RaftBatch{From: 5, Messages: []*clusterv1.RaftMessage{{Group: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"cut short", whole[:len(whole)-3], "a raft"},
		{"a message that is no raft message", append(append([]byte{}, whole[:len(whole)-2]...), 0xff, 0xff), "a raft"},
		{"a message without its raft message", noMessage, "holds no raft message for group 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeBatch(tc.b, func(uint64, pb.Message) {})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decoding gave %v; want an error saying %q", err, tc.want)
			}
		})
	}
}
