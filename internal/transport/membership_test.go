package transport

import (
	"context"
	"slices"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	clusterv1 "herald/proto/herald/cluster/v1"
)

// A node that joins after the transport started is reached once added:
// messages stream to it and calls run on it. Adding it again, or adding
// this node, changes nothing, and after Close AddPeer starts nothing.
func TestAddPeerReachesANodeThatJoinedLater(t *testing.T) {
	ln1, ln2 := listen(t), listen(t)
	a := startNode(t, 1, ln1, map[uint64]string{1: "http://" + ln1.Addr().String()})
	b := startNode(t, 2, ln2, map[uint64]string{2: "http://" + ln2.Addr().String()})
	b.tr.Handle(Handlers{Join: echoJoin})
	if _, err := a.tr.Join(context.Background(), 2, &clusterv1.JoinRequest{}); err == nil {
		t.Fatal("a call to a node not yet added went through")
	}

	a.tr.AddPeer(2, ln2.Addr().String())
	a.tr.AddPeer(2, "127.0.0.1:1") // already known: ignored
	a.tr.AddPeer(1, "127.0.0.1:1") // itself: ignored
	a.tr.Send(7, []pb.Message{msg(pb.MsgApp, 1, 2, 1), msg(pb.MsgApp, 1, 2, 2)})
	b.rec.waitFor(t, "both messages at the added node", func(r *recorder) bool { return len(r.got[7]) == 2 })
	if out, err := a.tr.Join(context.Background(), 2, &clusterv1.JoinRequest{Node: 7}); err != nil || !slices.Equal(out.GetFounders(), []uint64{7}) {
		t.Errorf("rpc on the added node = %v, %v", out, err)
	}

	a.tr.Close()
	a.tr.AddPeer(3, "127.0.0.1:1")
	if a.tr.peer(3) != nil {
		t.Error("AddPeer after Close added a peer")
	}
}
