package host

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

func TestReaddQueueRemovesThenAddsBack(t *testing.T) {
	q := newReaddQueue()
	voters := []uint64{1, 2, 3}
	if typ, ok := q.next(3, voters); !ok || typ != pb.ConfChangeRemoveNode {
		t.Fatalf("next for a voter = %v, %v; want its removal", typ, ok)
	}
	if _, ok := q.next(4, voters); ok {
		t.Fatal("a node that is not a member can be re-added")
	}
	remove := readdCC(pb.ConfChangeRemoveNode, 3, 77)
	q.applied(&remove, true)
	if !q.busy() {
		t.Fatal("a leader queued no addition after the removal was applied")
	}
	adds := q.take()
	want := readdCC(pb.ConfChangeAddNode, 3, 77)
	if len(adds) != 1 || adds[0].Type != pb.ConfChangeAddNode || adds[0].NodeID != 3 || string(adds[0].Context) != string(want.Context) {
		t.Fatalf("take = %v, want node 3 added back with the rebuild's id", adds)
	}
	if q.busy() || len(q.take()) != 0 {
		t.Fatal("take did not forget what it returned")
	}
	// Removed under this leader, which lost its leadership before adding
	// it back: the next leader adds it.
	if typ, ok := q.next(3, []uint64{1, 2}); !ok || typ != pb.ConfChangeAddNode {
		t.Fatalf("next for a node removed for a re-add = %v, %v; want its addition", typ, ok)
	}
	add := readdCC(pb.ConfChangeAddNode, 3, 77)
	q.applied(&add, true)
	if _, ok := q.next(3, []uint64{1, 2}); ok {
		t.Fatal("a node added back is still taken as removed for a re-add")
	}
	if q.busy() {
		t.Fatal("an applied addition queued something")
	}
}

func TestReaddQueueFollowerOnlyRemembers(t *testing.T) {
	q := newReaddQueue()
	remove := readdCC(pb.ConfChangeRemoveNode, 3, 77)
	q.applied(&remove, false)
	if q.busy() {
		t.Fatal("a follower queued an addition")
	}
	if typ, ok := q.next(3, []uint64{1, 2}); !ok || typ != pb.ConfChangeAddNode {
		t.Fatal("a follower that becomes leader does not know the node was removed for a re-add")
	}
}

func TestReaddQueueIgnoresOtherConfChanges(t *testing.T) {
	q := newReaddQueue()
	cc := pb.ConfChange{Type: pb.ConfChangeRemoveNode, NodeID: 3}
	q.applied(&cc, true)
	if q.busy() || q.removed[3] {
		t.Fatal("a plain removal was taken for a re-add")
	}
}
