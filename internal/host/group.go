package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/raftstore"
	"herald/internal/vfs"
)

// maxProposalBatch bounds how many waiting proposals one loop iteration
// takes, so ticks and messages are not starved under load.
const maxProposalBatch = 4096

// maxProposalBatchBytes bounds the commands stepped into raft as one
// proposal: about what one append message to a follower carries
// (MaxSizePerMsg), so a batch still goes out in one message.
const maxProposalBatchBytes = 1 << 20

// Channel capacities of a group. They are allocated with every group, and
// a node may run tens of thousands, so they are sized for an idle group,
// not for load: a proposer that finds propc full waits in the channel's
// queue, and the loop still takes it in the same batch (a receive moves a
// waiting sender into the buffer), so batches are not smaller for it.
// Reports that do not fit are dropped (see Host.report); a group gets one
// per peer at a time, at most. Messages from other nodes wait in an inbox
// that grows with use.
const (
	proposalQueue = 16
	reportQueue   = 8
)

// report is what the transport says of messages a group sent.
type report struct {
	to          uint64
	unreachable bool // a message to the node was lost
	snapshot    bool // a snapshot to the node went out, or failed
	failed      bool
}

// group is one Raft group: its RawNode and state machine, which the
// host's scheduler hands to one worker at a time for a turn (scheduler.go,
// round.go). It keeps raft's Ready contract (takeEvents, beginReady,
// finishReady); each concern it serves keeps its state, and the
// invariants of that state, in a part of its own, as etcd's raft
// composes raftLog, tracker and readOnly:
//
//   - props, the waiting proposers (proposals.go), and held, the
//     proposals forwarded while no leader is settled (held.go);
//   - snaps, when to snapshot (snapshot.go), and stage, the entries a
//     leader's snapshot needs (install.go);
//   - rebuild, a rebuilt replica's catching up (rebuild.go), and readds,
//     a leader's re-adds of rebuilt replicas (readd.go);
//   - quiet, quiescence (quiesce.go); lead, leadership (lead.go); reads,
//     read barriers (readindex.go); replay, whether a reopened group has
//     replayed its log (replay.go); life, how its loop ends
//     (lifecycle.go).
//
// "The loop" is the sequence of the group's turns: only the worker taking
// a turn touches rn, sm, the fields marked "loop" and the parts, but for
// what a part says other goroutines may use.
type group struct {
	h       *Host
	id      uint64
	name    string
	dir     string
	log     *slog.Logger
	storage *raftstore.Storage
	rn      *raft.RawNode
	sm      StateMachine

	propc   chan proposal
	tickc   chan struct{}
	inbox   *inbox
	reportc chan report
	views   viewQueue
	sched   schedState // the group's place in the host's scheduler
	// mail is set once a tick, a report, a view or a background job's
	// result is on its way to the group (post), and cleared by the turn
	// that takes them: most turns bring only proposals and messages, and
	// looking at every other channel and the views of a group, cold in
	// the processor's caches, cost half as much as raft's Ready (a CPU
	// profile of 100 shards in process).
	mail atomic.Bool

	// loop
	applied     uint64
	appliedTerm uint64 // the term of the entry at applied
	confState   *pb.ConfState

	props   *proposalTracker
	held    heldProposals
	snaps   *snapshotScheduler
	stage   *snapshotStaging
	rebuild *rebuildState
	readds  *readdQueue
	quiet   quiescence
	lead    leadership
	reads   readBarriers
	replay  *replayGate
	life    lifecycle
	// campaignTicks counts down the ticks during which a new group made
	// to campaign (GroupConfig.Campaign) stands again (campaignAgain).
	campaignTicks int
	// turn is the Ready of the group's turn in a round (round.go), kept
	// here rather than allocated for each turn: a group has one Ready in
	// flight at a time.
	turn readyTurn

	// Read by other goroutines.
	// waitingForSpace: the group waits for disk space to make a Ready
	// durable (see persist).
	waitingForSpace atomic.Bool
	appliedAt       atomic.Uint64
}

// openGroup opens a group's storage, creating and bootstrapping it if it
// is new; a new group made to rebuild a lost replica (rebuild, or
// gc.Rejoin) is marked as rebuilding first.
func openGroup(h *Host, gc GroupConfig, rebuild bool) (*group, error) {
	dir := groupDir(&h.cfg, gc)
	st, err := raftstore.Open(dir, h.storageOptions(gc.ID))
	if err != nil {
		return nil, err
	}
	for _, what := range st.Lost() {
		h.cfg.Logger.Warn("after the repair of its storage, the group accepted a loss", "group", gc.ID, "name", gc.Name, "lost", what)
	}
	created := st.IsEmpty()
	if created && (rebuild || gc.Rejoin) {
		if err := st.MarkRebuilding(); err != nil {
			st.Close()
			return nil, err
		}
	}
	rebuilding, err := st.Rebuilding()
	if err != nil {
		st.Close()
		return nil, err
	}
	if created {
		peers := gc.Peers
		if len(peers) == 0 {
			peers = []uint64{h.cfg.NodeID}
		}
		if err := st.Bootstrap(pb.ConfState{Voters: peers}); err != nil {
			st.Close()
			return nil, err
		}
	}
	g := &group{
		h: h, id: gc.ID, name: gc.Name, dir: dir,
		log:     h.cfg.Logger.With("group", gc.Name),
		storage: st,
		sm:      gc.StateMachine,
		propc:   make(chan proposal, proposalQueue),
		tickc:   make(chan struct{}, 1),
		inbox:   newInbox(),
		reportc: make(chan report, reportQueue),
		stage:   newSnapshotStaging(),
		life:    newLifecycle(),
		props:   newProposalTracker(gc.Name),
		readds:  newReaddQueue(),
	}
	snap, err := st.Snapshot()
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("load snapshot: %w", err)
	}
	hs, _, err := st.InitialState()
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("load hard state: %w", err)
	}
	if err := g.restore(snap); err != nil {
		st.Close()
		return nil, raftstore.Damaged(err)
	}
	g.applied = snap.Metadata.Index
	g.appliedTerm = snap.Metadata.Term
	g.snaps = newSnapshotScheduler(h.cfg.SnapshotEntries, h.cfg.SnapshotBytes, g.applied, int64(len(snap.Data)))
	// The background jobs' results reach the group at its next turn.
	g.snaps.notify = g.post
	g.stage.notify = g.post
	g.confState = &snap.Metadata.ConfState
	rn, err := raft.NewRawNode(raftConfig(&h.cfg, st, g.applied, g.log))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	g.rn = rn
	// A group whose only voter is this node need not wait an election
	// timeout after a restart.
	soleVoter := onlyVoter(g.confState, h.cfg.NodeID)
	if soleVoter || (created && gc.Campaign && !rebuilding) {
		if err := rn.Campaign(); err != nil {
			st.Close()
			return nil, fmt.Errorf("campaign: %w", err)
		}
		if !soleVoter {
			g.campaignTicks = h.cfg.ElectionTicks
		}
	}
	g.appliedAt.Store(g.applied)
	g.rebuild = newRebuildState(rebuilding, g.applied)
	// A group that is its own quorum commits its whole log once it leads; a
	// replica of a larger group can only count on its known commit index.
	replayTo := hs.Commit
	if soleVoter {
		replayTo = st.Log().LastIndex()
	}
	g.replay = newReplayGate(hs.Commit, replayTo, soleVoter)
	g.checkCaughtUp()
	return g, nil
}

// takeEvents handles what reached the group since its last turn, but for
// proposals and messages, which beginReady takes last so that as many as
// possible share the Ready: a tick, the transport's reports, the finished
// background jobs (a staged snapshot log, a snapshot written) and the
// functions to run on the group (views). It looks for those only when
// one was posted since the last turn looked.
func (g *group) takeEvents() {
	if g.mail.Swap(false) {
		g.takeMail()
	}
	if len(g.propc) > 0 {
		g.wake(true)
	}
}

// takeMail handles what post announced.
func (g *group) takeMail() {
	select {
	case <-g.tickc:
		g.tick()
	default:
	}
	for done := false; !done; {
		select {
		case r := <-g.reportc:
			g.wake(true)
			g.applyReport(r)
		default:
			done = true
		}
	}
	select {
	case s := <-g.stage.done:
		g.stagedDone(s)
	default:
	}
	select {
	case r := <-g.snaps.done:
		g.snapshotFinished(r)
	default:
	}
	for _, fn := range g.views.take() {
		fn()
	}
}

// post says that a tick, a report, a view or a background job's result
// was sent to the group, and schedules it. The sender calls it after the
// send, so nothing sent is missed: a turn that cleared mail before the
// send finds it set again at the group's next turn, which schedule
// brings.
func (g *group) post() {
	g.mail.Store(true)
	g.h.sched.schedule(g)
}

// hasWork reports whether the group must have another turn although
// nothing new reached it: raft has a Ready, or proposals wait (more than
// one turn takes).
func (g *group) hasWork() bool {
	return (g.rn.HasReady() && !g.commitCanWait()) || len(g.propc) > 0
}

// stopping reports whether the group was asked to stop.
func (g *group) stopping() bool {
	select {
	case <-g.life.stopc:
		return true
	default:
		return false
	}
}

// exit ends the group's loop: its waiters have been answered (stop or
// fail), nothing schedules it again, and whoever waits for its end
// learns of it.
func (g *group) exit() {
	g.sched.Store(schedExited)
	g.views.close()
	close(g.life.done)
	g.h.leaders.notify(g.id) // a stopped group leads nothing
}

func (g *group) applyReport(r report) {
	if r.snapshot {
		status := raft.SnapshotFinish
		if r.failed {
			status = raft.SnapshotFailure
		} else {
			g.h.metrics.snapshotsSent.Inc()
		}
		g.rn.ReportSnapshot(r.to, status)
	}
	if r.unreachable {
		g.rn.ReportUnreachable(r.to)
	}
}

// persist runs step, a write that makes the Ready durable, and while it
// fails because the disk is full, waits and runs it again: until it
// succeeds the Ready is neither acknowledged nor applied, as raft
// requires, and the group takes nothing new, but it does not stop for
// good. Raft's proposals meanwhile wait or time out; the node's disk alarm
// refuses new events well before this happens, unless something else
// fills the disk.
func (g *group) persist(step func() error) error {
	err := step()
	if !vfs.IsNoSpace(err) {
		return err
	}
	g.waitingForSpace.Store(true)
	defer g.waitingForSpace.Store(false)
	g.log.Error("the disk is full: the group waits to make its log durable, and takes nothing new until it has", "err", err)
	wait := 10 * time.Millisecond
	for vfs.IsNoSpace(err) {
		select {
		case <-g.life.stopc:
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
		err = step()
	}
	if err == nil {
		g.log.Info("the disk has space again: the group goes on")
	}
	return err
}

// fail stops the group after a storage failure: raft's contract cannot be
// kept once a Ready could not be persisted.
func (g *group) fail(err error) {
	g.log.Error("raft group stopped on a failure; it is unavailable until the node restarts", "err", err)
	g.life.err = fmt.Errorf("group %s stopped on a failure (fix the cause, e.g. free disk space, then restart the node): %w", g.name, err)
	g.props.close(g.life.err)
}

// receive steps a message from another node into raft.
func (g *group) receive(m *pb.Message) {
	if isQuiesce(m) {
		g.quiesceFollower(m)
		return
	}
	g.received(m)
	switch {
	case m.Type == pb.MsgSnap:
		g.stepSnapshot(m)
	case m.Type == pb.MsgProp && g.holdProposal(m):
	case m.Type == pb.MsgProp:
		// The forwards held came first, and a leader appends a
		// follower's forwards in the order sent (proposalTracker.expireForwarded).
		g.releaseHeld()
		g.step(m)
	default:
		g.step(m)
	}
}

// raftConfig is the configuration of a group's raft node on the host
// cfg, over storage st, applied up to applied.
func raftConfig(cfg *Config, st raft.Storage, applied uint64, log *slog.Logger) *raft.Config {
	return &raft.Config{
		ID:                        cfg.NodeID,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   st,
		Applied:                   applied,
		MaxSizePerMsg:             1 << 20,
		MaxCommittedSizePerReady:  16 << 20,
		MaxUncommittedEntriesSize: 256 << 20,
		MaxInflightMsgs:           256,
		CheckQuorum:               true,
		PreVote:                   true,
		Logger:                    raftLogger{log},
	}
}

// campaignAgain stands for election again at each tick of a new group's
// first election timeout, while the pre-vote it made at its creation
// (GroupConfig.Campaign) has not won: the other replicas open the group
// at about the same time, one that did not have it yet dropped the
// request, and the group would otherwise have no leader, and take no
// publish, for an election timeout or two after its topic was created.
func (g *group) campaignAgain() {
	if g.campaignTicks == 0 {
		return
	}
	g.campaignTicks--
	if st := g.rn.BasicStatus(); st.Lead != raft.None || st.RaftState != raft.StatePreCandidate {
		g.campaignTicks = 0 // won, or another replica leads or stands
		return
	}
	if err := g.rn.Campaign(); err != nil {
		g.log.Warn("campaign again", "err", err)
	}
}

// holdProposal holds a proposal another replica forwarded while this
// leader hands its leadership over, or that reached this replica when it
// had just stopped leading and knows no leader yet. Raft drops such a
// proposal without a word to its node, whose proposer could then only
// learn that the outcome is unknown; held, it goes to whoever leads next
// (releaseHeld), and its proposer gets its result.
func (g *group) holdProposal(m *pb.Message) bool {
	return leaderUnsettled(g.rn.BasicStatus()) && g.held.hold(m)
}

// leaderUnsettled reports whether the group knows no leader, or its leader
// (this replica: only a leader has a transferee) is handing over. Raft
// drops proposals then, and a leader is moments away.
func leaderUnsettled(st raft.BasicStatus) bool {
	return st.Lead == raft.None || st.LeadTransferee != raft.None
}

// releaseHeld steps the held proposals once the handover is over: this
// replica appends them if it still leads, or passes them on to the new
// leader.
func (g *group) releaseHeld() {
	if g.held.empty() || leaderUnsettled(g.rn.BasicStatus()) {
		return
	}
	held := g.held.release()
	for i := range held {
		g.step(&held[i])
	}
}

// drainMessages steps the messages that arrived while the last Ready was
// handled, so that one Ready answers them all: a leader then commits on
// several followers' acknowledgements in one round, and a follower
// persists several appends with one write and one fsync, instead of a
// Ready, a WAL record and a round of messages each.
func (g *group) drainMessages() {
	msgs := g.inbox.take()
	for i := range msgs {
		g.receive(&msgs[i])
	}
	g.inbox.recycle(msgs)
}

// drainProposals proposes the proposals waiting in propc.
func (g *group) drainProposals() {
	select {
	case p := <-g.propc:
		g.proposeBatch(g.takeProposals(p))
	default:
	}
}

// takeProposals returns first and the proposals waiting behind it, up to
// maxProposalBatch of them or maxProposalBatchBytes of commands.
func (g *group) takeProposals(first proposal) []proposal {
	batch := []proposal{first}
	size := len(first.data)
	for len(batch) < maxProposalBatch && size < maxProposalBatchBytes {
		select {
		case p := <-g.propc:
			batch = append(batch, p)
			size += len(p.data)
		default:
			return batch
		}
	}
	return batch
}

// proposeBatch steps the batch into raft as one proposal of several
// entries. A leader then sends each follower one append message for the
// batch, and each follower answers it once, where a proposal apiece would
// cost a message and an answer per follower for every entry.
func (g *group) proposeBatch(batch []proposal) {
	batch = g.refuseLeaderOnly(batch)
	if len(batch) == 0 {
		return
	}
	ents := make([]pb.Entry, len(batch))
	for i, p := range batch {
		ents[i] = pb.Entry{Data: p.data}
	}
	err := g.rn.Step(pb.Message{Type: pb.MsgProp, From: g.h.cfg.NodeID, Entries: ents})
	if err == nil {
		g.props.proposed(batch, g.rn.BasicStatus().Term)
	}
	if errors.Is(err, raft.ErrProposalDropped) {
		if leaderUnsettled(g.rn.BasicStatus()) {
			err = ErrNoLeader
		} else {
			err = ErrOverloaded
		}
	}
	if err != nil {
		for _, p := range batch {
			g.props.deliver(p.id, err)
		}
	}
}

// refuseLeaderOnly fails the proposals of batch that only a leader may
// make when this replica does not lead, and returns the others.
func (g *group) refuseLeaderOnly(batch []proposal) []proposal {
	if !slices.ContainsFunc(batch, func(p proposal) bool { return p.leaderOnly }) ||
		g.rn.BasicStatus().RaftState == raft.StateLeader {
		return batch
	}
	return slices.DeleteFunc(batch, func(p proposal) bool {
		if p.leaderOnly {
			g.props.deliver(p.id, ErrNotLeader)
		}
		return p.leaderOnly
	})
}

// A readyTurn is a Ready a group's turn took, on its way through the
// round (round.go): beginReady wrote its entries and hard state to the
// WAL and sent what may go early; the round's fdatasync makes them
// durable; finishReady sends the rest, applies and advances.
type readyTurn struct {
	g        *group
	rd       raft.Ready
	late     []pb.Message // sent once the Ready is durable
	overlap  bool         // its committed entries may be applied while the WAL syncs
	mustSync bool
	err      error // of the work done while the WAL synced
}

// beginReady takes the proposals and messages waiting, and if raft then
// has a Ready, persists its entries and hard state (without syncing
// them) and sends the messages that may go before they are durable. It
// follows the Ready contract with finishReady: entries and hard state are
// durable before messages that depend on them are sent; committed entries
// are applied in order. It returns nil if raft has no Ready.
func (g *group) beginReady() (*readyTurn, error) {
	// Take proposals and messages that arrived while the last Ready was
	// persisted, so they share this Ready's fsync with whatever else is
	// pending.
	g.drainMessages()
	g.drainProposals()
	g.releaseHeld()
	return g.takeReady()
}

// takeReady is beginReady without taking anything new: if raft has a
// Ready, it persists its entries and hard state (without syncing them)
// and sends the messages that may go before they are durable.
func (g *group) takeReady() (*readyTurn, error) {
	if !g.rn.HasReady() {
		return nil, nil
	}
	rd := g.rn.Ready()
	if raft.IsEmptySnap(rd.Snapshot) {
		// The first Ready after a staged snapshot was stepped holds it,
		// unless raft did not take it (stale, or the log already had it).
		g.discardStaged()
	}
	g.readyActivity(len(rd.Entries), rd.Messages)
	g.h.metrics.countReady(len(rd.Entries), len(rd.Messages))
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := g.installSnapshot(rd.Snapshot); err != nil {
			return nil, err
		}
	}
	if err := g.persist(func() error { return g.storage.Append(rd.Entries) }); err != nil {
		return nil, err
	}
	g.props.place(rd.Entries, time.Now())
	g.snaps.appended(rd.Entries)
	// The hard state is a WAL record after the entries, made durable with
	// them by the round's sync.
	if !raft.IsEmptyHardState(rd.HardState) {
		if err := g.storage.SetHardState(rd.HardState, false); err != nil {
			return nil, err
		}
	}
	// Messages that do not vouch for this Ready's state go out before it
	// is durable: a leader's appends then reach the followers while its
	// own fsync runs, and they persist in parallel with it (Raft thesis
	// 10.2.1). Raft counts the leader's own copy only once it is durable,
	// at Advance, so nothing commits on an entry a crash could take back.
	early, late := splitMessages(rd.Messages)
	g.send(early)
	g.turn = readyTurn{
		g: g, rd: rd, late: late,
		// Entries committed before this Ready were persisted by an
		// earlier one, so they can be applied while this Ready's fsync
		// runs.
		overlap: len(rd.Entries) == 0 || len(rd.CommittedEntries) == 0 ||
			rd.CommittedEntries[len(rd.CommittedEntries)-1].Index < rd.Entries[0].Index,
		mustSync: rd.MustSync && (len(rd.Entries) > 0 || !raft.IsEmptyHardState(rd.HardState)),
	}
	return &g.turn, nil
}

// whileSyncing is the work of a Ready done while the round's WAL sync
// runs: the segment files are written behind (the WAL, not they, makes
// the entries durable; on a full disk they stay in memory until a later
// write), and entries committed before the Ready are applied.
func (t *readyTurn) whileSyncing() {
	err := t.g.storage.WriteBehind()
	if vfs.IsNoSpace(err) {
		err = nil
	}
	if t.overlap && err == nil {
		err = t.g.apply(t.rd.CommittedEntries)
	}
	t.err = err
}

// finishReady ends the Ready once the round's sync returned syncErr (if
// the Ready needed one): it waits for space if the disk is full, then
// sends the messages that vouch for the Ready, applies what whileSyncing
// did not, and advances raft.
func (g *group) finishReady(t *readyTurn, syncErr error) error {
	if t.mustSync && syncErr != nil {
		if !vfs.IsNoSpace(syncErr) {
			return syncErr
		}
		if err := g.persist(g.sync); err != nil {
			return err
		}
	}
	if t.err != nil {
		return t.err
	}
	rd := t.rd
	g.send(t.late)
	if !t.overlap {
		if err := g.apply(rd.CommittedEntries); err != nil {
			return err
		}
	}
	g.checkRebuilt()
	g.rn.Advance(rd)
	g.proposeReadds()
	if rd.SoftState != nil {
		leads := rd.SoftState.RaftState == raft.StateLeader
		// A proposal in this replica's log waits for its index to be
		// applied (answer) when the leadership changes: the log may
		// commit it under the new leader. So does one it forwarded that
		// is not in its log yet, even if it now leads: the old leader may
		// have taken it, or held it while handing over, and it comes back
		// within a round; if not, it expires (expireForwarded). Read
		// barriers fail.
		if g.lead.update(rd.SoftState.Lead, leads, g.rn.BasicStatus().Term, time.Now()) {
			g.reads.fail()
		}
		g.checkCaughtUp()
	}
	g.readIndex(g.reads.confirm(rd.ReadStates))
	// A snapshot is taken at an index raft has handed out, before the
	// entries applied ahead: the log below it may go, and raft still reads
	// those entries to hand them out.
	g.maybeSnapshot()
	if err := g.applyAhead(rd.Entries); err != nil {
		return err
	}
	g.reads.release(g.applied)
	g.publishLeader()
	return nil
}

// publishLeader publishes the group's leader (leadership.publish), and
// notifies the leadership watch of a change.
func (g *group) publishLeader() {
	if g.lead.publish(g.h.cfg.NodeID, g.appliedTerm) {
		g.h.leaders.notify(g.id)
	}
}

// sync makes the group's appends durable: they are in the node's WAL.
func (g *group) sync() error { return g.h.syncWAL() }

// splitMessages splits a Ready's messages into those that may be sent
// before the Ready's entries and hard state are durable and those that
// must wait: answers that vouch for them, to an append (MsgAppResp) or an
// election (MsgVoteResp, MsgPreVoteResp). Raft itself queues exactly
// these behind the local write when its storage writes are asynchronous.
func splitMessages(msgs []pb.Message) (early, late []pb.Message) {
	n := 0
	for i := range msgs {
		if vouches(&msgs[i]) {
			n++
		}
	}
	switch n {
	case 0:
		return msgs, nil
	case len(msgs):
		return nil, msgs
	}
	early = make([]pb.Message, 0, len(msgs)-n)
	late = make([]pb.Message, 0, n)
	for i := range msgs {
		if vouches(&msgs[i]) {
			late = append(late, msgs[i])
		} else {
			early = append(early, msgs[i])
		}
	}
	return early, late
}

func vouches(m *pb.Message) bool {
	switch m.Type {
	case pb.MsgAppResp, pb.MsgVoteResp, pb.MsgPreVoteResp:
		return true
	}
	return false
}

func (g *group) send(msgs []pb.Message) {
	if len(msgs) == 0 {
		return
	}
	if g.h.cfg.Transport == nil {
		g.log.Warn("dropping raft messages: no transport configured", "count", len(msgs))
		return
	}
	g.h.cfg.Transport.Send(g.id, msgs)
}

// installSnapshot installs a snapshot from the leader, with the staged
// log of the entries its state needs, if it needs any.
func (g *group) installSnapshot(snap pb.Snapshot) error {
	md := snap.Metadata
	// A snapshot of the state being replaced must not be saved or
	// compact the log after the install.
	if r, ok := g.snaps.abandon(); ok && r.err != nil {
		g.log.Error("snapshot failed", "index", r.index, "err", r.err)
	}
	needsFrom, _, err := decodeSnapshotData(snap.Data)
	if err != nil {
		return fmt.Errorf("install snapshot at index %d: %w", md.Index, err)
	}
	if needsFrom <= md.Index {
		sl := g.stage.take(md.Index)
		if sl == nil {
			return fmt.Errorf("install snapshot at index %d: the log entries from %d it needs were not staged", md.Index, needsFrom)
		}
		if err := g.storage.InstallSnapshotWithLog(snap, sl); err != nil {
			return err
		}
		g.h.metrics.snapshotEntries.Add(float64(md.Index - needsFrom + 1))
	} else if err := g.storage.ApplySnapshot(snap); err != nil {
		return err
	}
	if err := g.restore(snap); err != nil {
		return err
	}
	g.props.unplace(snap.Metadata.Index)
	g.applied = snap.Metadata.Index
	g.appliedTerm = snap.Metadata.Term
	g.confState = &snap.Metadata.ConfState
	g.appliedAt.Store(g.applied)
	g.snaps.installed(g.applied, int64(len(snap.Data)))
	g.h.metrics.snapshotInstalls.Inc()
	return nil
}

// restore gives the state machine a snapshot's state.
func (g *group) restore(snap pb.Snapshot) error {
	_, data, err := decodeSnapshotData(snap.Data)
	if err == nil {
		err = g.sm.Restore(data)
	}
	if err != nil {
		return fmt.Errorf("restore snapshot at index %d: %w", snap.Metadata.Index, err)
	}
	return nil
}

// apply applies committed entries in order. An entry that cannot be
// applied (a conf change that does not decode) breaks the invariant that
// every replica applies the same log, so it stops the group with an error
// naming the entry instead of being skipped.
//
// ents are the committed entries of a Ready: the storage may drop them
// from its cache once applied. Those applied ahead (applyAhead) are
// skipped.
func (g *group) apply(ents []pb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	if err := g.applyEntries(ents); err != nil {
		return err
	}
	g.storage.SetApplied(ents[len(ents)-1].Index)
	return nil
}

// applyAhead applies the entries of the Ready just advanced that raft has
// committed meanwhile, before the Ready that hands them out: a single
// node's group commits its entries once they are durable, when finishReady
// advances raft past their sync, so its proposals are answered in the
// round that synced them, not in a second Ready of the group. That Ready
// comes with the group's next turn (commitCanWait), and apply skips its
// entries. It applies nothing unless every entry before ents is applied,
// and stops at a conf change, which raft must hand out to be applied.
func (g *group) applyAhead(ents []pb.Entry) error {
	if len(ents) == 0 || ents[0].Index != g.applied+1 {
		return nil
	}
	commit := g.rn.BasicStatus().Commit
	n := 0
	for n < len(ents) && ents[n].Index <= commit && ents[n].Type == pb.EntryNormal {
		n++
	}
	if n == 0 {
		return nil
	}
	return g.applyEntries(ents[:n])
}

// appliedAhead reports whether the group applied entries that raft has
// not handed out as committed yet (applyAhead). Raft's applied index
// moves at Advance, so this holds between Readies.
func (g *group) appliedAhead() bool { return g.applied > g.rn.BasicStatus().Applied }

// commitCanWait reports whether the group's next Ready may wait for the
// group's next turn: it only hands out entries applied ahead, and no peer
// waits to hear of their commit.
func (g *group) commitCanWait() bool {
	return alone(g.confState, g.h.cfg.NodeID) && g.appliedAhead()
}

// applyEntries applies entries in order, skipping those already applied.
func (g *group) applyEntries(ents []pb.Entry) error {
	applied := g.applied
	for _, e := range ents {
		idx := e.Index
		if idx <= g.applied {
			continue
		}
		switch e.Type {
		case pb.EntryNormal:
			if len(e.Data) == 0 {
				g.props.answer(idx, 0, nil)
				break
			}
			id, cmd := decodeEnvelope(e.Data)
			result := g.sm.Apply(idx, cmd)
			// Published before the result: a proposer that reads
			// Applied once answered sees its own entry counted.
			g.appliedAt.Store(idx)
			g.props.answer(idx, id, result)
		case pb.EntryConfChange:
			var cc pb.ConfChange
			if err := cc.Unmarshal(e.Data); err != nil {
				return fmt.Errorf("apply conf change at index %d: it does not decode: %w", idx, err)
			}
			g.confState = g.rn.ApplyConfChange(cc)
			g.continueReadd(&cc)
			g.props.answer(idx, 0, nil)
		case pb.EntryConfChangeV2:
			var cc pb.ConfChangeV2
			if err := cc.Unmarshal(e.Data); err != nil {
				return fmt.Errorf("apply conf change at index %d: it does not decode: %w", idx, err)
			}
			g.confState = g.rn.ApplyConfChange(cc)
			g.props.answer(idx, 0, nil)
		}
		g.applied = idx
		g.appliedTerm = e.Term
	}
	if g.applied == applied {
		return nil
	}
	g.h.stats.Applied.Add(g.applied - applied)
	g.appliedAt.Store(g.applied)
	g.publishLeader()
	g.checkCaughtUp()
	return nil
}

// propose replicates p's command and returns its result.
func (g *group) propose(ctx context.Context, p proposal) (any, error) {
	return g.start(ctx, p).Wait(ctx)
}

// start hands p to the group's loop and returns without waiting for it
// to commit.
func (g *group) start(ctx context.Context, p proposal) *Proposal {
	wait := 2 * time.Duration(g.h.cfg.ElectionTicks) * g.h.cfg.TickInterval
	pr := &Proposal{g: g, p: p, deadline: time.Now().Add(wait)}
	pr.send(ctx)
	return pr
}

// A Proposal is a command on its way through a group's log: Host.Start
// began it, Wait returns its result. Every Proposal started must be
// waited for; Wait releases what the group holds for it.
type Proposal struct {
	g        *group
	p        proposal
	id       uint64
	result   chan any
	err      error     // why the last send failed
	deadline time.Time // until when Wait proposes again while the group has no leader
}

// send registers a waiter for the proposal and hands it to the group's
// loop.
func (pr *Proposal) send(ctx context.Context) {
	g := pr.g
	id := g.h.nextID.Add(1)
	result, ok := g.props.register(id, time.Now())
	if !ok {
		pr.err = g.life.closedErr()
		return
	}
	pr.id, pr.result, pr.err = id, result, nil
	p := pr.p
	p.id, p.data = id, encodeEnvelope(id, p.cmd)
	select {
	case g.propc <- p:
		g.h.sched.schedule(g)
		return
	case <-g.life.done:
		pr.err = g.life.closedErr()
	case <-ctx.Done():
		pr.err = ctx.Err()
	}
	g.props.forget(id)
}

// Wait returns the proposal's result once its entry is applied. While the
// group has no leader (an election is running), or when a new leader
// replaced the proposal's entry before it committed (unless only a leader
// may make it), it proposes again, for up to two election timeouts from
// the start, before giving up.
func (pr *Proposal) Wait(ctx context.Context) (any, error) {
	for {
		r, err := pr.wait(ctx)
		again := errors.Is(err, ErrNoLeader) || (errors.Is(err, ErrNotApplied) && !pr.p.leaderOnly)
		if !again || time.Now().After(pr.deadline) {
			return r, err
		}
		select {
		case <-time.After(pr.g.h.cfg.TickInterval):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		pr.send(ctx)
	}
}

// wait waits for the one answer a sent proposal gets, whatever happens:
// its result, a refusal (dropped, or it needs a leader), or the group's
// failure (shutdown answers every waiter).
func (pr *Proposal) wait(ctx context.Context) (any, error) {
	if pr.err != nil {
		return nil, pr.err
	}
	defer pr.g.props.forget(pr.id)
	select {
	case r := <-pr.result:
		if err, ok := r.(error); ok {
			return nil, err
		}
		return r, nil
	case <-ctx.Done():
		// The entry may still commit: the caller must treat the outcome as unknown.
		return nil, ctx.Err()
	}
}

// expireForwarded expires the forwarded proposals that waited too long
// (proposalTracker.expireForwarded): two election timeouts, or a third
// of one after a change of leader for those not in this replica's log.
func (g *group) expireForwarded() {
	limit := 2 * time.Duration(g.h.cfg.ElectionTicks) * g.h.cfg.TickInterval
	grace := time.Duration(g.h.cfg.ElectionTicks/3) * g.h.cfg.TickInterval
	g.props.expireForwarded(time.Now(), g.rn.BasicStatus().Term, g.lead.leads(), g.lead.changed, limit, grace)
}

// view runs fn on the group's loop and waits for it, or until ctx ends
// or the loop does first: fn then never runs, so it cannot write what the
// caller reads after view returned. Once fn has started, view waits for it
// whatever ctx says.
func (g *group) view(ctx context.Context, fn func(StateMachine, uint64)) error {
	const (
		queued = iota
		started
		abandoned
	)
	var state atomic.Int32
	done := make(chan struct{})
	err := g.onLoop(ctx, func() {
		if state.CompareAndSwap(queued, started) {
			fn(g.sm, g.applied)
			close(done)
		}
	})
	if err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-g.life.done:
		err = g.life.closedErr()
	case <-ctx.Done():
		err = ctx.Err()
	}
	if state.CompareAndSwap(queued, abandoned) {
		return err
	}
	<-done // fn runs on a turn, which ends before the loop can
	return nil
}

// onLoop queues f for the group's next turn, which runs it before the
// turn's Ready. It returns without waiting for f to run; if the loop ends
// first, f never runs.
func (g *group) onLoop(ctx context.Context, f func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !g.views.put(f) {
		return g.life.closedErr()
	}
	g.post()
	return nil
}

func (g *group) stop() {
	g.life.stop()
	g.h.sched.schedule(g)
	<-g.life.done
	g.snaps.wait()
	g.rebuild.stop()
	g.stopStaging()
	g.storage.Close()
}

func (g *group) status() Status {
	l := g.storage.Log()
	st := Status{
		Name: g.name, Leader: g.lead.leader(), IsLeader: g.lead.leads(),
		Applied: g.appliedAt.Load(), SnapIndex: g.snaps.at.Load(),
		FirstIndex: l.FirstIndex(), LastIndex: l.LastIndex(),
		LogBytes: l.SizeBytes(), LogSegments: l.Segments(),
		Rebuilding: g.rebuild.now.Load(),
		Quiesced:   g.quiet.now.Load(),

		WaitingForSpace: g.waitingForSpace.Load(),
	}
	select {
	case <-g.life.done:
		st.Err = g.life.err
		st.Leader, st.IsLeader = 0, false
	default:
	}
	return st
}

// onlyVoter reports whether node is the only voter of cs.
func onlyVoter(cs *pb.ConfState, node uint64) bool {
	vs := cs.Voters
	return len(vs) == 1 && vs[0] == node
}

// alone reports whether node is the only member of cs: its only voter,
// with no learner and no configuration it is leaving, so no peer hears
// of the group's state.
func alone(cs *pb.ConfState, node uint64) bool {
	return onlyVoter(cs, node) && len(cs.VotersOutgoing) == 0 &&
		len(cs.Learners) == 0 && len(cs.LearnersNext) == 0
}

func (g *group) checkCaughtUp() {
	g.replay.check(g.applied, g.lead.leader() == g.h.cfg.NodeID)
}

// waitCaughtUp waits until the group has replayed its log.
func (g *group) waitCaughtUp(ctx context.Context) error {
	select {
	case <-g.replay.caughtUp:
		return nil
	case <-g.life.done:
		return g.life.closedErr()
	case <-ctx.Done():
		return fmt.Errorf("group %s did not replay its log (applied %d of %d): %w", g.name, g.appliedAt.Load(), g.replay.replayTo, ctx.Err())
	}
}

// waitAppliedOld waits until the group has applied what it knew was
// committed when it opened.
func (g *group) waitAppliedOld(ctx context.Context) error {
	select {
	case <-g.replay.appliedOld:
		return nil
	case <-g.life.done:
		return g.life.closedErr()
	case <-ctx.Done():
		return fmt.Errorf("group %s did not replay its log (applied %d of %d): %w", g.name, g.appliedAt.Load(), g.replay.applyTo, ctx.Err())
	}
}

// encodeEnvelope prefixes a command with the id of its proposal so the
// proposer can be found when the entry is applied. Id 0 means no waiter.
func encodeEnvelope(id uint64, cmd Command) []byte {
	return cmd.AppendBinary(binary.LittleEndian.AppendUint64(nil, id))
}

func decodeEnvelope(data []byte) (uint64, []byte) {
	if len(data) < 8 {
		return 0, nil
	}
	return binary.LittleEndian.Uint64(data), data[8:]
}
