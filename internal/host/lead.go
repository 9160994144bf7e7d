package host

import (
	"sync/atomic"
	"time"
)

// leadership owns what a group knows of its leadership: the leader raft
// names, whether this replica leads and since which term, when that last
// changed, and the leader it publishes to other goroutines (Host.Leader,
// Status, the leadership watch). Its invariant: a replica just elected is
// published as the leader only once it has applied an entry of its own
// term (publish). The loop writes it; leader and leads may be read
// anywhere.
type leadership struct {
	raftLead uint64    // the leader raft names
	term     uint64    // the term in which this replica leads; 0 when it does not
	changed  time.Time // when raftLead or this replica's leading last changed

	published atomic.Uint64 // the published leader, see publish
	leading   atomic.Bool
}

// leader is the published leader: 0 while none is known, or while this
// replica, just elected, has not applied an entry of its term.
func (l *leadership) leader() uint64 { return l.published.Load() }

// leads reports whether raft says this replica leads.
func (l *leadership) leads() bool { return l.leading.Load() }

// update takes raft's soft state: lead, the leader, and whether this
// replica leads, in term, at now. It reports whether either changed.
func (l *leadership) update(lead uint64, leads bool, term uint64, now time.Time) (changed bool) {
	changed = l.raftLead != lead
	l.raftLead = lead
	if l.leading.Swap(leads) != leads {
		changed = true
	}
	if !changed {
		return false
	}
	l.changed = now
	l.term = 0
	if leads {
		l.term = term
	}
	return true
}

// publish sets the leader that other goroutines read, given this node's
// id and the term of the last entry applied, and reports whether it
// changed. A replica just elected names itself only once it has applied
// an entry of its own term: until then it may not have applied everything
// its predecessors committed — an ack, say, whose commit it had not heard
// of — and whoever serves reads from its state as the leader's would hand
// out an event already acknowledged. Raft commits the empty entry a new
// leader appends within one round, so the gap is short; meanwhile the
// group has no leader to the node, which answers "retry shortly".
func (l *leadership) publish(self, appliedTerm uint64) (changed bool) {
	lead := l.raftLead
	if lead == self && appliedTerm < l.term {
		lead = 0
	}
	return l.published.Swap(lead) != lead
}
