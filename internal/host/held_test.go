package host

import (
	"reflect"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

func forwarded(size int) *pb.Message {
	return &pb.Message{Type: pb.MsgProp, Entries: []pb.Entry{{Data: make([]byte, size)}}}
}

func TestHeldProposalsBoundedAndReleasedInOrder(t *testing.T) {
	var h heldProposals
	if !h.empty() {
		t.Fatal("not empty at first")
	}
	a, b := forwarded(maxHeldBytes/2), forwarded(maxHeldBytes/2)
	if !h.hold(a) || !h.hold(b) {
		t.Fatal("refused proposals within the bound")
	}
	if h.hold(forwarded(1)) {
		t.Fatal("held a proposal beyond maxHeldBytes")
	}
	msgs := h.release()
	if !reflect.DeepEqual(msgs, []pb.Message{*a, *b}) {
		t.Fatal("released proposals are not the held ones, in order")
	}
	if !h.empty() || h.bytes != 0 {
		t.Fatal("release kept something")
	}
	if !h.hold(forwarded(maxHeldBytes)) {
		t.Fatal("the bound was not freed by the release")
	}
}
