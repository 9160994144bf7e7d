package host

import (
	"bytes"

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

// quiesceAfter is how many idle ticks a leader waits before quiescing: a
// group of this node alone has no follower to tell, nothing to lose by
// quiescing early and waking at once, and is quiesced after two.
func (g *group) quiesceAfter() int {
	cs := g.confState
	if onlyVoter(cs, g.h.cfg.NodeID) && len(cs.GetLearners()) == 0 && len(cs.GetVotersOutgoing()) == 0 {
		return 2
	}
	return 2 * g.h.cfg.ElectionTicks
}

// tick advances the group's clock, unless it is quiesced and the nodes
// it depends on answer.
func (g *group) tick() {
	if g.quiesced && g.stillQuiet() {
		if g.isLeader.Load() {
			g.h.setTicking(g, false) // woken by PeerDown for another group's node
		}
		return
	}
	g.wake(false)
	if g.maybeQuiesce() {
		return
	}
	g.rn.Tick()
	g.expireForwarded()
	g.askReadd()
}

// stillQuiet reports whether a quiesced group may stay so: a follower
// while its leader's node answers, a leader while every follower's does.
// A leader cut off from its followers must tick again, or CheckQuorum
// never makes it step down and it goes on answering reads as the leader.
func (g *group) stillQuiet() bool {
	if !g.isLeader.Load() {
		return g.leaderAlive()
	}
	for _, id := range g.confState.GetVoters() {
		if id != g.h.cfg.NodeID && !g.h.peerAlive(id) {
			return false
		}
	}
	return true
}

func (g *group) leaderAlive() bool {
	lead := g.leader.Load()
	return lead != 0 && g.h.peerAlive(lead)
}

// wake ends quiescence; active also restarts the count of idle ticks.
func (g *group) wake(active bool) {
	if g.quiesced {
		g.quiesced = false
		g.quiescedNow.Store(false)
		g.h.setTicking(g, true)
	}
	if active {
		g.idleTicks = 0
	}
}

// received notes a message from a peer: only heartbeats and their answers
// are not activity, and only an answer leaves a quiesced group asleep.
func (g *group) received(m *pb.Message) {
	switch m.GetType() {
	case pb.MsgHeartbeatResp:
	case pb.MsgHeartbeat:
		g.wake(false)
	default:
		g.wake(true)
	}
}

// isQuiesce reports whether m is a leader's quiesce message.
func isQuiesce(m *pb.Message) bool {
	return m.GetType() == pb.MsgHeartbeat && bytes.Equal(m.GetContext(), quiesceContext)
}

// maybeQuiesce quiesces an idle leader's group, and reports whether it
// did.
func (g *group) maybeQuiesce() bool {
	if !g.isLeader.Load() {
		return false
	}
	if g.idleTicks++; g.idleTicks < g.quiesceAfter() || !g.idle() {
		return false
	}
	st := g.rn.Status()
	last, _ := g.storage.LastIndex()
	if st.GetCommit() != last || g.applied != last || st.LeadTransferee != 0 {
		return false
	}
	var msgs []*pb.Message
	for id, pr := range st.Progress {
		if id == g.h.cfg.NodeID {
			continue
		}
		if pr.Match != last || !g.h.peerAlive(id) {
			return false
		}
		msgs = append(msgs, &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(id), From: new(g.h.cfg.NodeID),
			Term: new(st.GetTerm()), Commit: new(last), Context: quiesceContext})
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
	g.quiesced = true
	g.quiescedNow.Store(true)
}

// idle reports whether the group has nothing in flight.
func (g *group) idle() bool {
	return g.props.pending() == 0 && len(g.propc) == 0 && !g.rn.HasReady() && !g.snapInFlight &&
		!g.staging && len(g.readds) == 0 && !g.rebuilding
}

// quiesceFollower handles a leader's quiesce message: the follower stops
// ticking if it has everything the leader has, applied.
func (g *group) quiesceFollower(m *pb.Message) {
	st := g.rn.BasicStatus()
	last, _ := g.storage.LastIndex()
	if m.GetFrom() != st.Lead || m.GetTerm() != st.GetTerm() || m.GetCommit() != last ||
		st.GetCommit() != last || g.applied != last || g.staging || g.rebuilding {
		return // it keeps ticking; if it times out, its pre-vote wakes the leader
	}
	g.quiesce()
}

// readyActivity wakes the group when raft has entries to persist or
// messages other than heartbeats to send.
func (g *group) readyActivity(ents int, msgs []*pb.Message) {
	if ents > 0 {
		g.wake(true)
		return
	}
	for _, m := range msgs {
		if t := m.GetType(); t != pb.MsgHeartbeat && t != pb.MsgHeartbeatResp {
			g.wake(true)
			return
		}
	}
}

// peerAlive applies Config.PeerAlive.
func (h *Host) peerAlive(node uint64) bool {
	return h.cfg.PeerAlive != nil && h.cfg.PeerAlive(node)
}
