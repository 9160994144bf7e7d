package host

import (
	"encoding/binary"
	"slices"

	pb "go.etcd.io/raft/v3/raftpb"
)

// readdQueue owns a leader's side of the re-adds of rebuilt replicas
// (rebuild.go): the nodes removed for a re-add and not yet added back,
// and the additions to propose once raft has taken a removal as applied.
// Its invariant: a replica is added back only after its removal for a
// re-add was applied, and only by a leader. Loop fields.
type readdQueue struct {
	pending []*pb.ConfChange // re-additions to propose after Advance
	removed map[uint64]bool  // nodes removed for a re-add and not yet added back
}

func newReaddQueue() *readdQueue {
	return &readdQueue{removed: make(map[uint64]bool)}
}

// next returns the change that takes node's re-add on, given the group's
// voters: its removal, or its addition if it was removed for a re-add
// already, under an earlier leader. ok is false for a node that is
// neither: only a member's replica can be re-added.
func (q *readdQueue) next(node uint64, voters []uint64) (t pb.ConfChangeType, ok bool) {
	switch {
	case slices.Contains(voters, node):
		return pb.ConfChangeRemoveNode, true
	case q.removed[node]:
		return pb.ConfChangeAddNode, true // removed for a re-add already, under an earlier leader
	}
	return 0, false
}

// applied notes an applied conf change: one of a re-add records whether
// its node is out, and a removal applied while leads is queued to be
// added back once raft has taken the removal as applied (take), since
// raft drops a conf change proposed before the previous one is.
func (q *readdQueue) applied(cc *pb.ConfChange, leads bool) {
	ctx := cc.Context
	if len(ctx) != len(readdContext)+8 || string(ctx[:len(readdContext)]) != readdContext {
		return
	}
	q.removed[cc.NodeID] = cc.Type == pb.ConfChangeRemoveNode
	if cc.Type != pb.ConfChangeRemoveNode || !leads {
		return
	}
	add := readdCC(pb.ConfChangeAddNode, cc.NodeID, binary.LittleEndian.Uint64(ctx[len(readdContext):]))
	q.pending = append(q.pending, &add)
}

// take returns the additions to propose, and forgets them. The slice is
// valid until the next call of applied.
func (q *readdQueue) take() []*pb.ConfChange {
	p := q.pending
	q.pending = q.pending[:0]
	return p
}

// busy reports whether additions wait to be proposed.
func (q *readdQueue) busy() bool { return len(q.pending) > 0 }
