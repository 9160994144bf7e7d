package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	hlog "herald/internal/log"
	"herald/internal/raftstore"
	"herald/internal/vfs"
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

// rebuildStep keeps a rebuilding replica out of elections and notes how
// far it must catch up. It reports whether m may be stepped.
func (g *group) rebuildStep(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MsgVote, pb.MsgPreVote, pb.MsgTimeoutNow:
		return false
	case pb.MsgHeartbeat:
		// The leader may still count the old replica's entries as matched.
		if last, _ := g.storage.LastIndex(); m.GetCommit() > last {
			m.Commit = new(last)
		}
	case pb.MsgApp:
		g.rebuildTarget = max(g.rebuildTarget, m.GetCommit())
	case pb.MsgSnap:
		g.rebuildTarget = max(g.rebuildTarget, m.GetSnapshot().GetMetadata().GetIndex())
	}
	return true
}

// checkRebuilt unmarks a rebuilding replica once it has caught up.
func (g *group) checkRebuilt() {
	if !g.rebuilding || g.rebuildTarget == 0 || g.applied < g.rebuildTarget {
		return
	}
	if err := g.storage.ClearRebuilding(); err != nil {
		g.log.Error("could not record that the rebuilt replica caught up; it stays out of elections", "err", err)
		return
	}
	g.rebuilding = false
	g.rebuildingNow.Store(false)
	g.log.Info("rebuilt replica caught up with its leader; it votes again", "applied", g.applied)
}

// A rebuilt replica cannot just catch up: its leader remembers how far
// the old replica had matched its log, ignores the empty one's
// rejections as stale, and would tell it of commits beyond its log. So
// the rebuilt replica asks the leader (ReaddOp) to remove it from the
// group and add it back, which gives it a fresh progress that raft probes
// from the start; until then heartbeats' commit indexes are clamped to
// its log. It asks again every readdEvery ticks until something arrives:
// a repeated re-add only restarts the probing.

// ReaddOp is the call a rebuilt replica makes on its peers (see
// Host.ServeReadd). The node's transport routes it.
const ReaddOp = "raft.readd"

// readdContext marks the conf changes of a re-add; the rebuild id follows.
const readdContext = "readd"

// readdEvery is how many ticks a rebuilt replica waits between requests.
const readdEvery = 20

type readdRequest struct{ group, node, id uint64 }

func (r readdRequest) encode() []byte {
	b := make([]byte, 0, 24)
	for _, v := range []uint64{r.group, r.node, r.id} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func decodeReaddRequest(b []byte) (readdRequest, error) {
	if len(b) != 24 {
		return readdRequest{}, fmt.Errorf("re-add request is %d bytes, not 24", len(b))
	}
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	return readdRequest{group: u(0), node: u(1), id: u(2)}, nil
}

func readdCC(t pb.ConfChangeType, node, id uint64) pb.ConfChange {
	ctx := binary.LittleEndian.AppendUint64([]byte(readdContext), id)
	return pb.ConfChange{Type: t.Enum(), NodeId: new(node), Context: ctx}
}

// ServeReadd answers a ReaddOp call on the group's leader: it removes the
// caller's replica from the group, and adds it back once the removal is
// applied (apply calls continueReadd).
func (h *Host) ServeReadd(ctx context.Context, payload []byte) ([]byte, error) {
	req, err := decodeReaddRequest(payload)
	if err != nil {
		return nil, err
	}
	g, err := h.group(req.group)
	if err != nil {
		return nil, err
	}
	var result error
	err = g.view(ctx, func(StateMachine, uint64) { result = g.startReadd(req) })
	if err == nil {
		err = result
	}
	return nil, err
}

// startReadd runs on the loop.
func (g *group) startReadd(req readdRequest) error {
	if !g.isLeader.Load() {
		return fmt.Errorf("group %s: %w", g.name, ErrNotLeader)
	}
	var t pb.ConfChangeType
	switch {
	case slices.Contains(g.confState.GetVoters(), req.node):
		t = pb.ConfChangeRemoveNode
	case g.readdRemoved[req.node]:
		t = pb.ConfChangeAddNode // removed for a re-add already, under an earlier leader
	default:
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
// whose removal for a re-add was just applied, if this node leads: it is
// added back once raft has taken the removal as applied (proposeReadds),
// since raft drops a conf change proposed before the previous one is.
func (g *group) continueReadd(cc *pb.ConfChange) {
	ctx := cc.GetContext()
	if len(ctx) != len(readdContext)+8 || string(ctx[:len(readdContext)]) != readdContext {
		return
	}
	g.readdRemoved[cc.GetNodeId()] = cc.GetType() == pb.ConfChangeRemoveNode
	if cc.GetType() != pb.ConfChangeRemoveNode || !g.isLeader.Load() {
		return
	}
	add := readdCC(pb.ConfChangeAddNode, cc.GetNodeId(), binary.LittleEndian.Uint64(ctx[len(readdContext):]))
	g.readds = append(g.readds, &add)
}

// proposeReadds proposes the additions continueReadd noted; called after
// Advance. One that raft drops is asked for again by its replica.
func (g *group) proposeReadds() {
	for _, cc := range g.readds {
		if err := g.rn.ProposeConfChange(cc); err != nil {
			g.log.Warn("could not add back a rebuilt replica", "node", cc.GetNodeId(), "err", err)
		}
	}
	g.readds = g.readds[:0]
}

// askReadd, on a tick of a rebuilt replica that has received nothing
// yet, asks its peers in the background to re-add it.
func (g *group) askReadd() {
	if !g.rebuilding || g.applied > g.rebuiltFrom || g.stage.fetching || g.asking.Load() {
		return
	}
	if g.readdTicks++; g.readdTicks%readdEvery != 0 {
		return
	}
	if g.h.cfg.Transport == nil {
		return
	}
	req := readdRequest{group: g.id, node: g.h.cfg.NodeID, id: g.rebuildID}.encode()
	peers := slices.DeleteFunc(slices.Clone(g.confState.GetVoters()), func(id uint64) bool { return id == g.h.cfg.NodeID })
	g.asking.Store(true)
	g.bgWG.Go(func() {
		defer g.asking.Store(false)
		for _, p := range peers {
			ctx, cancel := context.WithTimeout(g.bgCtx, time.Second)
			_, err := g.h.cfg.Transport.Call(ctx, p, ReaddOp, req)
			cancel()
			if err == nil {
				return
			}
		}
	})
}
