package host

import (
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

type proposal struct {
	id         uint64
	cmd        Command
	data       []byte // envelope: proposal id + command, encoded by Proposal.send
	leaderOnly bool   // see Host.ProposeAsLeader
}

type waiter struct {
	result chan any
	since  time.Time // when the proposal was made
	// term is the raft term in which the group took the proposal; 0
	// while it still waits in propc.
	term uint64
	// seq is the order in which the group took its proposals, over all
	// terms: a follower forwards them to its leader in this order.
	seq uint64
	// index is where its entry is in this replica's log; 0 until the
	// entry is appended here. An entry in the log may commit under a
	// later leader, so a leader change does not fail its proposer:
	// applying the index says whether it was this entry or another.
	index uint64
}

// proposalTracker owns a group's waiting proposers: who waits for which
// proposal, and where each one's entry is in this replica's log. Proposers
// register and forget from their own goroutines and the loop answers
// them, so it has a lock of its own.
//
// Its invariant: every registered proposer gets exactly one answer on its
// result channel — its result, a refusal, or a failure — and is then
// forgotten; after close nobody registers again.
type proposalTracker struct {
	group string // the group's name, for the errors proposers get

	mu      sync.Mutex
	waiters map[uint64]waiter // nil once closed
	placed  map[uint64]uint64 // log index -> id of the waiter whose entry is there
	nextSeq uint64            // the seq of the last proposal taken
	// newest is the term and seq of the last-taken proposal whose entry
	// was placed in this replica's log, and newestAt when the last entry
	// of a waiting proposer was (see expireForwarded).
	newest   struct{ term, seq uint64 }
	newestAt time.Time
}

func newProposalTracker(group string) *proposalTracker {
	return &proposalTracker{group: group, waiters: make(map[uint64]waiter), placed: make(map[uint64]uint64)}
}

// register adds a waiter for proposal id and returns the channel that
// gets its answer; ok is false once the tracker is closed.
func (t *proposalTracker) register(id uint64, now time.Time) (result chan any, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiters == nil {
		return nil, false
	}
	if _, dup := t.waiters[id]; dup {
		// Two proposers would share one answer, and one would never get it.
		panic(fmt.Sprintf("host: group %s: proposal id %d registered twice", t.group, id))
	}
	w := waiter{result: make(chan any, 1), since: now}
	t.waiters[id] = w
	return w.result, true
}

// forget drops the waiter of proposal id, if it is still there.
func (t *proposalTracker) forget(id uint64) {
	t.mu.Lock()
	if t.waiters != nil {
		delete(t.waiters, id)
	}
	t.mu.Unlock()
}

// pending is how many proposers wait.
func (t *proposalTracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.waiters)
}

// deliver answers proposer id with result: a refusal before raft took
// its proposal.
func (t *proposalTracker) deliver(id uint64, result any) {
	if id == 0 {
		return
	}
	t.mu.Lock()
	w, ok := t.waiters[id]
	delete(t.waiters, id)
	t.mu.Unlock()
	if ok {
		w.result <- result
	}
}

// place records where the entries of this replica's waiting proposers
// are in its log, now.
func (t *proposalTracker) place(ents []pb.Entry, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.waiters) == 0 {
		return
	}
	for _, e := range ents {
		if e.Type != pb.EntryNormal {
			continue
		}
		id, _ := decodeEnvelope(e.Data)
		if w, ok := t.waiters[id]; ok && id != 0 {
			w.index = e.Index
			t.waiters[id] = w
			t.placed[w.index] = id
			t.newestAt = now
			if w.seq > t.newest.seq {
				t.newest.term, t.newest.seq = w.term, w.seq
			}
		}
	}
}

// answer answers the proposers that applying the entry at index
// settles, under one lock: the proposer of the command applied there (id,
// 0 if none) with its result, and the proposer whose entry was placed at
// index, if that was another entry: a new leader replaced it before it
// committed, so it was not applied.
func (t *proposalTracker) answer(index, id uint64, result any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.waiters[id]; ok && id != 0 {
		delete(t.waiters, id)
		w.result <- result
	}
	placed, ok := t.placed[index]
	if !ok {
		return
	}
	delete(t.placed, index)
	if w, ok := t.waiters[placed]; ok && placed != id && w.index == index {
		delete(t.waiters, placed)
		w.result <- fmt.Errorf("group %s: %w", t.group, ErrNotApplied)
	}
}

// unplace forgets the placements up to index, which a snapshot replaced:
// whether those entries were applied cannot be told, so their proposers
// learn ErrOutcomeUnknown.
func (t *proposalTracker) unplace(index uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, id := range t.placed {
		if i > index {
			continue
		}
		delete(t.placed, i)
		if w, ok := t.waiters[id]; ok && w.index == i {
			delete(t.waiters, id)
			w.result <- fmt.Errorf("group %s: %w", t.group, ErrOutcomeUnknown)
		}
	}
}

// proposed records the term in which raft took the proposals.
func (t *proposalTracker) proposed(batch []proposal, term uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range batch {
		t.nextSeq++
		if w, ok := t.waiters[p.id]; ok {
			w.term, w.seq = term, t.nextSeq
			t.waiters[p.id] = w
		}
	}
}

// expireForwarded answers, with ErrOutcomeUnknown, the proposals a
// follower forwarded to its leader, or a deposed leader took, that raft
// has lost track of: the forward may have been lost on the way, or this
// replica cut off from the new leader, and raft never says so.
//
//   - One forwarded under an earlier leader and not in this replica's log
//     expires grace (a third of an election timeout) after the change, on
//     a follower or on the new leader alike: the new leader has it within
//     a round if the old one took it (or held it while handing over), and
//     a proposer whose leader died should hear soon that the outcome is
//     unknown.
//   - One overtaken, not in the log while a proposal forwarded after it in
//     the same term is, expires at once: a leader appends a follower's
//     forwards in the order they were sent, over one connection, so it was
//     lost unless a reconnection reordered them.
//   - One that has waited limit (two election timeouts) expires if no
//     entry of this replica's waiting proposers reached its log for as
//     long: the way to the leader is broken. While entries keep coming, a
//     slow proposal is behind them, not lost: a cluster under more load
//     than it can take answers in seconds, and failing its proposals with
//     an unknown outcome would send producers to publish them again.
//
// A leader's own proposals are in its log and wait to be applied. term is
// the group's term now, leads whether this replica leads, and leadChanged
// when the leadership last changed (zero: never).
func (t *proposalTracker) expireForwarded(now time.Time, term uint64, leads bool, leadChanged time.Time, limit, grace time.Duration) {
	if leads && now.Sub(leadChanged) > limit {
		return // what it forwarded before it led expired long ago
	}
	changedLongAgo := !leadChanged.IsZero() && now.Sub(leadChanged) > grace
	t.fail(func(w waiter) bool {
		if w.term == 0 {
			return false // not taken by raft yet
		}
		lost := w.index == 0 && w.term < term && changedLongAgo
		overtaken := w.index == 0 && w.term == t.newest.term && w.seq < t.newest.seq
		stalled := !leads && now.Sub(w.since) > limit && now.Sub(t.newestAt) > limit
		return lost || overtaken || stalled
	})
}

// fail answers the waiting proposers that match with ErrOutcomeUnknown.
func (t *proposalTracker) fail(match func(waiter) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, w := range t.waiters {
		if match(w) {
			delete(t.waiters, id)
			w.result <- fmt.Errorf("group %s: %w", t.group, ErrOutcomeUnknown)
		}
	}
}

// close fails every waiting proposer with err, and refuses new ones.
func (t *proposalTracker) close(err error) {
	t.mu.Lock()
	ws := t.waiters
	t.waiters = nil
	t.mu.Unlock()
	for _, w := range ws {
		w.result <- err
	}
}
