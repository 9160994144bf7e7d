package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Membership changes of a group (which nodes hold a replica, which one
// leads) are made on the group's loop like everything else that touches
// raft: each method here queues a function for the group's next turn
// (onLoop) and waits for it.

// ErrNotLeader means the operation needs this node to lead the group.
var ErrNotLeader = errors.New("this node does not lead the group")

// Peer is what a group's leader knows of one replica.
type Peer struct {
	ID      uint64
	Learner bool   // a replica that receives the log but does not vote
	Match   uint64 // the highest log index known to be on the replica
	// Active means the replica answered within the last election
	// timeout.
	Active bool
}

// Membership is a group's configuration and, on its leader, the progress
// of every replica.
type Membership struct {
	Voters   []uint64 // sorted
	Learners []uint64 // sorted
	// LastIndex is the leader's last log index; a replica whose Match
	// reached it has everything the leader has. Zero on a follower.
	LastIndex uint64
	// Peers are the replicas' progress, by id order; only the leader
	// tracks it, so they are empty on a follower.
	Peers []Peer
}

// CaughtUp reports whether replica id holds the leader's whole log and
// answers: the condition for promoting a learner, for removing another
// replica, or for handing it the leadership.
func (m Membership) CaughtUp(id uint64) bool {
	for _, p := range m.Peers {
		if p.ID == id {
			return p.Active && p.Match >= m.LastIndex
		}
	}
	return false
}

// Membership returns the group's configuration as this node has applied
// it and, when this node leads the group, the replicas' progress.
func (h *Host) Membership(ctx context.Context, id uint64) (Membership, error) {
	var m Membership
	err := h.onLoop(ctx, id, func(g *group) error {
		cs := g.confState
		m.Voters = slices.Sorted(slices.Values(cs.Voters))
		m.Learners = slices.Sorted(slices.Values(cs.Learners))
		st := g.rn.Status()
		if st.RaftState != raft.StateLeader {
			return nil
		}
		m.LastIndex = st.HardState.Commit
		if last, err := g.storage.LastIndex(); err == nil {
			m.LastIndex = max(m.LastIndex, last)
		}
		for pid, pr := range st.Progress {
			active := pr.RecentActive || pid == h.cfg.NodeID
			m.Peers = append(m.Peers, Peer{ID: pid, Learner: pr.IsLearner, Match: pr.Match, Active: active})
		}
		slices.SortFunc(m.Peers, func(a, b Peer) int { return cmp.Compare(a.ID, b.ID) })
		return nil
	})
	return m, err
}

// TransferLeadership asks raft to hand the group's leadership to node
// to. It returns once the request is made, not when the transfer is done
// (raft completes it within an election timeout, or abandons it): watch
// Leader. The node must lead the group.
func (h *Host) TransferLeadership(ctx context.Context, id, to uint64) error {
	return h.onLoop(ctx, id, func(g *group) error {
		if g.rn.BasicStatus().RaftState != raft.StateLeader {
			return fmt.Errorf("transfer the leadership of group %s to node %d: %w", g.name, to, ErrNotLeader)
		}
		g.rn.TransferLeader(to)
		return nil
	})
}

// The kinds of change ChangeMembership makes.
const (
	AddLearner   = pb.ConfChangeAddLearnerNode
	AddVoter     = pb.ConfChangeAddNode
	RemoveMember = pb.ConfChangeRemoveNode
)

// ChangeMembership proposes one change of the group's configuration
// (AddLearner, AddVoter to add or promote, RemoveMember) through the
// group's log, where every replica applies it in order. It returns once
// the change is proposed; it takes effect when applied (watch
// Membership). The node must lead the group. Raft takes one change at a
// time: one proposed while another is not yet applied is turned into an
// empty entry, so callers check Membership and propose again.
func (h *Host) ChangeMembership(ctx context.Context, id uint64, kind pb.ConfChangeType, node uint64) error {
	if node == 0 {
		return fmt.Errorf("change the membership of group %d: node 0 is not a node id", id)
	}
	cc := &pb.ConfChangeV2{Changes: []pb.ConfChangeSingle{{Type: kind, NodeID: node}}}
	return h.onLoop(ctx, id, func(g *group) error {
		if g.rn.BasicStatus().RaftState != raft.StateLeader {
			return fmt.Errorf("change the membership of group %s: %w", g.name, ErrNotLeader)
		}
		if err := g.rn.ProposeConfChange(cc); err != nil {
			if errors.Is(err, raft.ErrProposalDropped) {
				return fmt.Errorf("change the membership of group %s: another change is still being applied: %w", g.name, ErrOverloaded)
			}
			return fmt.Errorf("change the membership of group %s: %w", g.name, err)
		}
		return nil
	})
}

// onLoop runs fn on the group's loop and returns its error.
func (h *Host) onLoop(ctx context.Context, id uint64, fn func(g *group) error) error {
	g, err := h.group(id)
	if err != nil {
		return err
	}
	var fnErr error
	if err := g.view(ctx, func(StateMachine, uint64) { fnErr = fn(g) }); err != nil {
		return err
	}
	return fnErr
}
