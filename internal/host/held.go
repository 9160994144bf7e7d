package host

import pb "go.etcd.io/raft/v3/raftpb"

// maxHeldBytes bounds the commands of the forwarded proposals a replica
// holds (holdProposal); beyond it they are dropped, as raft would drop
// them.
const maxHeldBytes = 64 << 20

// heldProposals owns the proposals other replicas forwarded that raft
// would drop unseen (this leader handing over, or no leader known), until
// a leader is known again (see holdProposal). Its invariant: the commands
// it holds never exceed maxHeldBytes. Loop fields.
type heldProposals struct {
	msgs  []pb.Message
	bytes int // of the commands in msgs
}

// hold keeps m, and reports whether it did: not if that would hold more
// than maxHeldBytes.
func (h *heldProposals) hold(m *pb.Message) bool {
	size := 0
	for _, e := range m.Entries {
		size += len(e.Data)
	}
	if h.bytes+size > maxHeldBytes {
		return false
	}
	h.msgs = append(h.msgs, *m)
	h.bytes += size
	return true
}

// empty reports whether nothing is held.
func (h *heldProposals) empty() bool { return len(h.msgs) == 0 }

// release returns the held proposals, in the order they came, and
// forgets them.
func (h *heldProposals) release() []pb.Message {
	msgs := h.msgs
	h.msgs, h.bytes = nil, 0
	return msgs
}
