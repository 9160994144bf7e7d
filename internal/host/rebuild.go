package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	hlog "herald/internal/log"
	"herald/internal/raftstore"
	"herald/internal/vfs"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// A replica whose files are damaged (a flipped bit, a lost segment) need
// not stay down when the group has replicas on other nodes: its damaged
// directory is moved aside, for inspection, and an empty replica takes
// its place and catches up from the others like a new one. The same
// happens to every group of a node whose data directory was lost
// (GroupConfig.Rejoin).
//
// An empty replica must not vote until it has caught up: its empty log
// would make any candidate look up to date, and it may have been one of
// the replicas that committed an entry the candidate lacks. So a rebuilt
// replica is marked (raftstore's rebuilding file), drops vote requests
// while marked, and is unmarked once it has applied the highest commit
// index a leader has sent it.

// damagedSuffix names the directory a damaged replica is moved to.
const damagedSuffix = ".damaged"

// mayRebuild reports whether a group that failed to open with err should
// be rebuilt from its peers.
func (h *Host) mayRebuild(gc GroupConfig, err error) bool {
	var corrupt *hlog.CorruptionError
	damaged := errors.Is(err, raftstore.ErrDamaged) || errors.As(err, &corrupt)
	others := slices.ContainsFunc(gc.Peers, func(id uint64) bool { return id != h.cfg.NodeID })
	return gc.RepairFromPeers && damaged && others
}

// rebuild moves a damaged group's directory aside, replacing an older
// one, and opens an empty replica in its place.
func (h *Host) rebuild(gc GroupConfig, cause error) (*group, error) {
	dir := groupDir(&h.cfg, gc)
	aside := dir + damagedSuffix
	h.cfg.Logger.Error("a replica's files are damaged; moving them aside and rebuilding the replica from its peers",
		"group", gc.Name, "moved_to", aside, "err", cause)
	if err := h.cfg.FS.RemoveAll(aside); err != nil {
		return nil, fmt.Errorf("rebuild damaged replica: remove %s: %w", aside, err)
	}
	if err := h.cfg.FS.Rename(dir, aside); err != nil {
		return nil, fmt.Errorf("rebuild damaged replica: move %s aside: %w", dir, err)
	}
	if err := vfs.SyncDir(h.cfg.FS, filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("rebuild damaged replica: %w", err)
	}
	return openGroup(h, gc, true)
}

// rebuildState owns what a replica rebuilt empty does until it has
// caught up: it stays out of elections, learns from its leader how far it
// must catch up (target, the highest commit index a leader has told it
// of), and asks its peers to re-add it while nothing arrives. The asking
// runs in the background, on wg, and stop ends it. Loop fields, but now,
// asking and what runs on wg.
type rebuildState struct {
	active   bool
	now      atomic.Bool // active, for other goroutines
	target   uint64
	from     uint64 // applied when the rebuilt replica opened
	id       uint64 // names this rebuild in re-add requests
	askTicks int    // ticks while waiting to be re-added

	// Background calls of the group (re-add requests), owned by it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	asking atomic.Bool
}

// newRebuildState starts the state of a replica that applied up to
// applied when it opened, and is rebuilding if active.
func newRebuildState(active bool, applied uint64) *rebuildState {
	r := &rebuildState{active: active, from: applied, id: rand.Uint64()}
	r.now.Store(active)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// step keeps a rebuilding replica out of elections and notes how far it
// must catch up. It reports whether m may be stepped.
func (r *rebuildState) step(m *pb.Message, log interface{ LastIndex() (uint64, error) }) bool {
	if !r.active {
		return true
	}
	switch m.Type {
	case pb.MsgVote, pb.MsgPreVote, pb.MsgTimeoutNow:
		return false
	case pb.MsgHeartbeat:
		// The leader may still count the old replica's entries as matched.
		if last, _ := log.LastIndex(); m.Commit > last {
			m.Commit = last
		}
	case pb.MsgApp:
		r.target = max(r.target, m.Commit)
	case pb.MsgSnap:
		r.target = max(r.target, m.Snapshot.Metadata.Index)
	}
	return true
}

// caughtUp reports whether a rebuilding replica has applied what its
// leader told it of.
func (r *rebuildState) caughtUp(applied uint64) bool {
	return r.active && r.target != 0 && applied >= r.target
}

// finish ends the rebuild.
func (r *rebuildState) finish() {
	r.active = false
	r.now.Store(false)
}

// askDue counts a tick of a rebuilt replica, and reports whether it is
// time to ask its peers again to re-add it: every readdEvery ticks while
// it has received nothing (applied nothing since it opened, staged
// nothing) and no request runs.
func (r *rebuildState) askDue(applied uint64, staging bool) bool {
	if !r.active || applied > r.from || staging || r.asking.Load() {
		return false
	}
	r.askTicks++
	return r.askTicks%readdEvery == 0
}

// stop cancels a request that runs and waits for it.
func (r *rebuildState) stop() {
	r.cancel()
	r.wg.Wait()
}

// checkRebuilt unmarks a rebuilding replica once it has caught up.
func (g *group) checkRebuilt() {
	if !g.rebuild.caughtUp(g.applied) {
		return
	}
	if err := g.storage.ClearRebuilding(); err != nil {
		g.log.Error("could not record that the rebuilt replica caught up; it stays out of elections", "err", err)
		return
	}
	g.rebuild.finish()
	g.log.Info("rebuilt replica caught up with its leader; it votes again", "applied", g.applied)
}

// A rebuilt replica cannot just catch up: its leader remembers how far
// the old replica had matched its log, ignores the empty one's
// rejections as stale, and would tell it of commits beyond its log. So
// the rebuilt replica asks the leader (the Readd rpc) to remove it from the
// group and add it back, which gives it a fresh progress that raft probes
// from the start; until then heartbeats' commit indexes are clamped to
// its log. It asks again every readdEvery ticks until something arrives:
// a repeated re-add only restarts the probing.

// readdContext marks the conf changes of a re-add; the rebuild id follows.
const readdContext = "readd"

// readdEvery is how many ticks a rebuilt replica waits between requests.
const readdEvery = 20

// readdRequest is a Readd rpc's request as the group's loop takes it.
type readdRequest struct{ group, node, id uint64 }

func readdCC(t pb.ConfChangeType, node, id uint64) pb.ConfChange {
	ctx := binary.LittleEndian.AppendUint64([]byte(readdContext), id)
	return pb.ConfChange{Type: t, NodeID: node, Context: ctx}
}

// ServeReadd answers a Readd rpc on the group's leader: it removes the
// caller's replica from the group, and adds it back once the removal is
// applied (apply calls continueReadd).
func (h *Host) ServeReadd(ctx context.Context, r *clusterv1.ReaddRequest) (*clusterv1.ReaddResponse, error) {
	req := readdRequest{group: r.GetGroup(), node: r.GetNode(), id: r.GetId()}
	g, err := h.group(req.group)
	if err != nil {
		return nil, err
	}
	var result error
	err = g.view(ctx, func(StateMachine, uint64) { result = g.startReadd(req) })
	if err == nil {
		err = result
	}
	if err != nil {
		return nil, err
	}
	return &clusterv1.ReaddResponse{}, nil
}

// startReadd runs on the loop.
func (g *group) startReadd(req readdRequest) error {
	if !g.lead.leads() {
		return fmt.Errorf("group %s: %w", g.name, ErrNotLeader)
	}
	t, ok := g.readds.next(req.node, g.confState.Voters)
	if !ok {
		return fmt.Errorf("group %s: node %d is not a voter of the group; only a member's replica can be re-added", g.name, req.node)
	}
	cc := readdCC(t, req.node, req.id)
	if err := g.rn.ProposeConfChange(&cc); err != nil {
		return fmt.Errorf("group %s: re-add node %d: %w (another membership change is under way; retry)", g.name, req.node, err)
	}
	g.log.Info("re-adding a rebuilt replica", "node", req.node, "step", t.String())
	return nil
}

// continueReadd, called when a conf change is applied, notes a replica
// whose removal for a re-add was just applied, if this node leads
// (readdQueue.applied).
func (g *group) continueReadd(cc *pb.ConfChange) {
	g.readds.applied(cc, g.lead.leads())
}

// proposeReadds proposes the additions continueReadd noted; called after
// Advance. One that raft drops is asked for again by its replica.
func (g *group) proposeReadds() {
	for _, cc := range g.readds.take() {
		if err := g.rn.ProposeConfChange(cc); err != nil {
			g.log.Warn("could not add back a rebuilt replica", "node", cc.NodeID, "err", err)
		}
	}
}

// askReadd, on a tick of a rebuilt replica that has received nothing
// yet, asks its peers in the background to re-add it.
func (g *group) askReadd() {
	if !g.rebuild.askDue(g.applied, g.stage.fetching) {
		return
	}
	if g.h.cfg.Transport == nil {
		return
	}
	req := &clusterv1.ReaddRequest{Group: g.id, Node: g.h.cfg.NodeID, Id: g.rebuild.id}
	peers := slices.DeleteFunc(slices.Clone(g.confState.Voters), func(id uint64) bool { return id == g.h.cfg.NodeID })
	g.rebuild.asking.Store(true)
	g.rebuild.wg.Go(func() {
		defer g.rebuild.asking.Store(false)
		for _, p := range peers {
			ctx, cancel := context.WithTimeout(g.rebuild.ctx, time.Second)
			_, err := g.h.cfg.Transport.Readd(ctx, p, req)
			cancel()
			if err == nil {
				return
			}
		}
	})
}
