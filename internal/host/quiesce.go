package host

import (
	"bytes"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/vfs"
)

// An idle group costs nothing: once a leader has had no proposals and no
// replication to do for quiesceAfter ticks, with every follower caught up
// and alive, it tells them so and all stop ticking: no heartbeats, no
// election timers. Anything that needs raft wakes the group: a proposal,
// a message other than a heartbeat's answer, raft producing entries or
// messages of its own. A quiesced follower also wakes when the node of
// its leader stops answering the node-level liveness checks
// (Config.PeerAlive), so that a dead leader is still replaced: the
// liveness of a node is checked once for all its groups.

// quiesceContext marks the message a leader sends to quiesce a follower.
// It has the form of a heartbeat but is never stepped into raft.
var quiesceContext = []byte("herald.quiesce")

// quiescence owns whether a group sleeps, and the count of idle ticks
// that decides when a leader may put it to sleep. The group's loop owns
// it; now tells other goroutines (Status, PeerDown) whether it sleeps.
type quiescence struct {
	asleep    bool
	now       atomic.Bool // asleep, for other goroutines
	idleTicks int         // ticks of a leader since the last activity
}

// wake ends quiescence, and reports whether the group was asleep; active
// also restarts the count of idle ticks.
func (q *quiescence) wake(active bool) (woke bool) {
	if q.asleep {
		q.asleep = false
		q.now.Store(false)
		woke = true
	}
	if active {
		q.idleTicks = 0
	}
	return woke
}

// sleep marks the group quiesced.
func (q *quiescence) sleep() {
	q.asleep = true
	q.now.Store(true)
}

// idleTick counts a leader's tick without activity, and reports whether
// after of them have passed.
func (q *quiescence) idleTick(after int) bool {
	q.idleTicks++
	return q.idleTicks >= after
}

// quiesceAfter is how many idle ticks a leader waits before quiescing: a
// group of this node alone has no follower to tell, nothing to lose by
// quiescing early and waking at once, and is quiesced after two.
func quiesceAfter(cs *pb.ConfState, self uint64, electionTicks int) int {
	if alone(cs, self) {
		return 2
	}
	return 2 * electionTicks
}

// messageActivity says what a message from a peer does to quiescence:
// only heartbeats and their answers are not activity, and only an answer
// leaves a quiesced group asleep.
func messageActivity(t pb.MessageType) (wakes, active bool) {
	switch t {
	case pb.MsgHeartbeatResp:
		return false, false
	case pb.MsgHeartbeat:
		return true, false
	}
	return true, true
}

// readyActive reports whether a Ready is activity: raft has entries to
// persist, or messages other than heartbeats to send.
func readyActive(ents int, msgs []pb.Message) bool {
	if ents > 0 {
		return true
	}
	for _, m := range msgs {
		if t := m.Type; t != pb.MsgHeartbeat && t != pb.MsgHeartbeatResp {
			return true
		}
	}
	return false
}

// stillQuiet reports whether a quiesced group may stay so: a follower
// while its leader's node answers, a leader while every follower's does.
// A leader cut off from its followers must tick again, or CheckQuorum
// never makes it step down and it goes on answering reads as the leader.
func stillQuiet(leads bool, lead uint64, voters []uint64, self uint64, alive func(node uint64) bool) bool {
	if !leads {
		return lead != 0 && alive(lead)
	}
	for _, id := range voters {
		if id != self && !alive(id) {
			return false
		}
	}
	return true
}

// leaderMayQuiesce reports whether a leader whose raft status is st may
// put its group to sleep: its log, up to last, is committed and applied
// (applied), no handover runs, and every follower holds all of it and
// its node answers (alive).
func leaderMayQuiesce(st raft.Status, self, last, applied uint64, alive func(node uint64) bool) bool {
	if st.Commit != last || applied != last || st.LeadTransferee != 0 {
		return false
	}
	for id, pr := range st.Progress {
		if id != self && (pr.Match != last || !alive(id)) {
			return false
		}
	}
	return true
}

// followerMayQuiesce reports whether a follower whose raft status is st
// may obey m, its leader's quiesce message: it has everything the leader
// has (last, the leader's commit index), applied.
func followerMayQuiesce(m *pb.Message, st raft.BasicStatus, last, applied uint64) bool {
	return m.From == st.Lead && m.Term == st.Term && m.Commit == last &&
		st.Commit == last && applied == last
}

// tick advances the group's clock, unless it is quiesced and the nodes
// it depends on answer.
func (g *group) tick() {
	if g.quiet.asleep && stillQuiet(g.lead.leads(), g.lead.leader(), g.confState.Voters, g.h.cfg.NodeID, g.h.peerAlive) {
		if g.lead.leads() {
			g.h.setTicking(g, false) // woken by PeerDown for another group's node
		}
		return
	}
	g.wake(false)
	if g.maybeQuiesce() {
		return
	}
	g.campaignAgain()
	g.rn.Tick()
	g.expireForwarded()
	g.askReadd()
}

// wake ends quiescence, and has the ticker visit the group again; active
// also restarts the count of idle ticks.
func (g *group) wake(active bool) {
	if g.quiet.wake(active) {
		g.h.setTicking(g, true)
	}
}

// received notes a message from a peer (messageActivity).
func (g *group) received(m *pb.Message) {
	if wakes, active := messageActivity(m.Type); wakes {
		g.wake(active)
	}
}

// isQuiesce reports whether m is a leader's quiesce message.
func isQuiesce(m *pb.Message) bool {
	return m.Type == pb.MsgHeartbeat && bytes.Equal(m.Context, quiesceContext)
}

// maybeQuiesce quiesces an idle leader's group, and reports whether it
// did.
func (g *group) maybeQuiesce() bool {
	if !g.lead.leads() {
		return false
	}
	if !g.quiet.idleTick(quiesceAfter(g.confState, g.h.cfg.NodeID, g.h.cfg.ElectionTicks)) || !g.idle() {
		return false
	}
	st := g.rn.Status()
	last, _ := g.storage.LastIndex()
	// Raft's applied index, not the group's: a Ready that hands out
	// entries applied ahead (applyAhead) is work still to do.
	if !leaderMayQuiesce(st, g.h.cfg.NodeID, last, st.Applied, g.h.peerAlive) {
		return false
	}
	var msgs []pb.Message
	for id := range st.Progress {
		if id == g.h.cfg.NodeID {
			continue
		}
		msgs = append(msgs, pb.Message{Type: pb.MsgHeartbeat, To: id, From: g.h.cfg.NodeID,
			Term: st.Term, Commit: last, Context: quiesceContext})
	}
	g.send(msgs)
	g.quiesce()
	g.h.setTicking(g, false) // a quiesced leader has nothing to time; only work wakes it
	return true
}

// quiesce writes what the group's log holds in memory and marks it
// quiesced: a node killed while its groups are quiet then opens them
// without writing and syncing their logs again from the WAL, one
// fdatasync per group (10,000 shards booted in 2.4 s after a SIGKILL
// without this, 1.26 s with it; docs/decisions/0004-shard-logs-written-behind.md).
//
// On a full disk the entries stay in memory, as the WAL holds them: only
// the next boot's speed depends on the write.
func (g *group) quiesce() {
	if err := g.storage.WriteHeld(); err != nil && !vfs.IsNoSpace(err) {
		g.fail(err)
		return
	}
	g.quiet.sleep()
}

// idle reports whether the group has nothing in flight.
func (g *group) idle() bool {
	return g.props.pending() == 0 && len(g.propc) == 0 && !g.rn.HasReady() && !g.snaps.busy() &&
		!g.stage.fetching && !g.readds.busy() && !g.rebuild.active
}

// quiesceFollower handles a leader's quiesce message: the follower stops
// ticking if it has everything the leader has, applied.
func (g *group) quiesceFollower(m *pb.Message) {
	last, _ := g.storage.LastIndex()
	if !followerMayQuiesce(m, g.rn.BasicStatus(), last, g.applied) || g.stage.fetching || g.rebuild.active {
		return // it keeps ticking; if it times out, its pre-vote wakes the leader
	}
	g.quiesce()
}

// readyActivity wakes the group when raft has entries to persist or
// messages other than heartbeats to send.
func (g *group) readyActivity(ents int, msgs []pb.Message) {
	if readyActive(ents, msgs) {
		g.wake(true)
	}
}

// peerAlive applies Config.PeerAlive.
func (h *Host) peerAlive(node uint64) bool {
	return h.cfg.PeerAlive != nil && h.cfg.PeerAlive(node)
}
