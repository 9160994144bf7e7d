package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/raftstore"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// A group's snapshots hold state machine metadata, not data: a shard's
// undelivered events stay in log entries below the snapshot index, and
// compaction keeps them (StateMachine.CompactIndex). A replica that falls
// so far behind that its leader sends a snapshot must therefore receive
// those entries too, before it installs the snapshot; otherwise it would
// hold offsets whose events it cannot read, and could lead without them.
//
// So a snapshot's data starts with a header saying from which index its
// state machine still reads the log. A follower that receives a snapshot
// whose state needs entries it lacks fetches them from the leader (the
// Entries rpc, in chunks), stages them in a log of their own off the
// group's loop, and only then steps the snapshot into raft; the install
// swaps the staged log in (raftstore.InstallSnapshotWithLog).

// entriesChunkBytes bounds one Entries answer.
const entriesChunkBytes = 4 << 20

// snapDataMagic starts snapshot data written with the header. Data
// without it (written before the header existed) says nothing about the
// entries its state needs, so a follower fetches all the leader has.
const snapDataMagic = "HGS1"

// encodeSnapshotData prefixes a state machine's snapshot with the index
// from which that state still reads log entries.
func encodeSnapshotData(needsFrom uint64, sm []byte) []byte {
	b := make([]byte, 0, len(snapDataMagic)+binary.MaxVarintLen64+len(sm))
	b = append(b, snapDataMagic...)
	b = binary.AppendUvarint(b, needsFrom)
	return append(b, sm...)
}

// decodeSnapshotData splits snapshot data into the index from which its
// state reads the log (0 when the data does not say) and the state
// machine's own bytes.
func decodeSnapshotData(data []byte) (needsFrom uint64, sm []byte, err error) {
	if len(data) < len(snapDataMagic) || string(data[:len(snapDataMagic)]) != snapDataMagic {
		return 0, data, nil
	}
	v, n := binary.Uvarint(data[len(snapDataMagic):])
	if n <= 0 {
		return 0, nil, errors.New("snapshot data header does not decode")
	}
	return v, data[len(snapDataMagic)+n:], nil
}

// ServeEntries answers an Entries rpc: the requested entries, the index
// before the first of them and that index's term.
func (h *Host) ServeEntries(_ context.Context, req *clusterv1.EntriesRequest) (*clusterv1.EntriesResponse, error) {
	g, err := h.group(req.GetGroup())
	if err != nil {
		return nil, err
	}
	first, _ := g.storage.FirstIndex()
	lo := req.GetLo()
	if lo == 0 {
		lo = first
	}
	if lo < first {
		return nil, fmt.Errorf("group %s: entries from %d were requested, but the log now starts at %d; the snapshot they went with is outdated: %w", g.name, lo, first, raft.ErrCompacted)
	}
	prevTerm, err := g.storage.Term(lo - 1)
	if err != nil {
		return nil, fmt.Errorf("group %s: term of entry %d: %w", g.name, lo-1, err)
	}
	ents, err := g.storage.Entries(lo, req.GetHi(), max(req.GetMaxBytes(), 1))
	if err != nil {
		return nil, fmt.Errorf("group %s: entries %d..%d: %w", g.name, lo, req.GetHi()-1, err)
	}
	encoded, err := encodeEntries(ents)
	if err != nil {
		return nil, fmt.Errorf("group %s: %w", g.name, err)
	}
	return &clusterv1.EntriesResponse{Index: lo - 1, LogTerm: prevTerm, Entries: encoded}, nil
}

// encodeEntries encodes raft entries for an EntriesResponse, which
// carries them as bytes (cluster.proto says why).
func encodeEntries(ents []pb.Entry) ([][]byte, error) {
	out := make([][]byte, len(ents))
	for i := range ents {
		b, err := ents[i].Marshal()
		if err != nil {
			return nil, fmt.Errorf("encode entry %d: %w", ents[i].Index, err)
		}
		out[i] = b
	}
	return out, nil
}

// DecodeEntries decodes the entries of an EntriesResponse, which carries
// them as bytes (cluster.proto says why).
func DecodeEntries(encoded [][]byte) ([]pb.Entry, error) {
	ents := make([]pb.Entry, len(encoded))
	for i, b := range encoded {
		if err := ents[i].Unmarshal(b); err != nil {
			return nil, fmt.Errorf("entry %d of %d does not decode: %w", i+1, len(encoded), err)
		}
	}
	return ents, nil
}

// staged is a snapshot whose entries have been fetched into a staged log.
type staged struct {
	msg *pb.Message
	log *raftstore.StagedLog
	err error
}

// snapshotStaging owns the fetch of the entries a leader's snapshot
// needs (fetchEntries) and the staged log it leaves: the fetch runs on wg
// and reports on done; stepped is a finished one whose snapshot has been
// stepped, which the next Ready installs. Its invariants: one fetch at a
// time, none while a staged log waits for its install, and every staged
// log is installed (take) or removed (discard, stop), never left behind.
// Loop fields.
type snapshotStaging struct {
	fetching bool
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	done     chan staged
	notify   func() // called once a result is on done
	stepped  *staged
}

func newSnapshotStaging() *snapshotStaging {
	return &snapshotStaging{done: make(chan staged, 1), notify: func() {}}
}

// busy reports whether a snapshot is being staged, or was staged and
// stepped and waits for its install.
func (s *snapshotStaging) busy() bool { return s.fetching || s.stepped != nil }

// start runs fetch, which stages the entries the snapshot message m needs,
// in the background; finished must take what it reports on done.
func (s *snapshotStaging) start(m *pb.Message, fetch func(ctx context.Context) (*raftstore.StagedLog, error)) {
	if s.busy() {
		panic("host: a snapshot's entries are staged while another's are")
	}
	s.fetching = true
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Go(func() {
		log, err := fetch(ctx)
		s.done <- staged{msg: m, log: log, err: err}
		s.notify()
	})
}

// finished takes a fetch that finished: it returns the fetch's error, or
// keeps its staged log for the install of its snapshot, which the caller
// steps.
func (s *snapshotStaging) finished(r staged) error {
	s.fetching = false
	s.cancel()
	if r.err != nil {
		return r.err
	}
	s.stepped = &r
	return nil
}

// take hands over the staged log of the snapshot at index, for its
// install; nil if none was staged for it.
func (s *snapshotStaging) take(index uint64) *raftstore.StagedLog {
	st := s.stepped
	if st == nil || st.msg.Snapshot.Metadata.Index != index {
		return nil
	}
	s.stepped = nil
	return st.log
}

// discard removes a staged log that no install used.
func (s *snapshotStaging) discard() error {
	if s.stepped == nil {
		return nil
	}
	err := s.stepped.log.Discard()
	s.stepped = nil
	return err
}

// stop cancels a running fetch, waits for it and removes what it staged.
func (s *snapshotStaging) stop() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	select {
	case r := <-s.done:
		if r.log != nil {
			r.log.Discard()
		}
	default:
	}
	return s.discard()
}

// stepSnapshot handles a snapshot message from a leader. A snapshot whose
// state needs entries this replica does not hold is not stepped until
// they are staged: the fetch runs off the loop, and the message is
// stepped when it finishes. Snapshots that arrive meanwhile are dropped;
// raft sends another if the one being staged does not take.
func (g *group) stepSnapshot(m *pb.Message) {
	md := m.Snapshot.Metadata
	needsFrom, _, err := decodeSnapshotData(m.Snapshot.Data)
	if err != nil {
		g.log.Warn("dropping a snapshot from the leader", "from", m.From, "index", md.Index, "err", err)
		return
	}
	if needsFrom > md.Index || g.holds(&md) {
		g.step(m) // nothing below the snapshot is needed, or raft will see the log already has it
		return
	}
	if g.stage.busy() {
		// One is being staged, or was staged and stepped, and the next
		// Ready installs it: restaging now would discard the entries that
		// install needs. The leader sends again if this one mattered.
		return
	}
	msg := *m // m is the inbox's, which is reused
	g.stage.start(&msg, func(ctx context.Context) (*raftstore.StagedLog, error) {
		return g.fetchEntries(ctx, msg.From, needsFrom, md)
	})
}

// holds reports whether the log already has the snapshot's own entry.
func (g *group) holds(md *pb.SnapshotMetadata) bool {
	t, err := g.storage.Term(md.Index)
	return err == nil && t == md.Term
}

// stagedDone steps a snapshot once its entries are staged.
func (g *group) stagedDone(s staged) {
	if err := g.stage.finished(s); err != nil {
		g.log.Warn("could not fetch the log entries a snapshot from the leader needs; waiting for raft to send it again",
			"from", s.msg.From, "index", s.msg.Snapshot.Metadata.Index, "err", err)
		return
	}
	g.step(s.msg)
}

// discardStaged removes a staged log that no install used.
func (g *group) discardStaged() {
	if err := g.stage.discard(); err != nil {
		g.log.Warn("remove unused staged log", "err", err)
	}
}

// stopStaging cancels a running fetch, waits for it and removes what it
// staged.
func (g *group) stopStaging() {
	if err := g.stage.stop(); err != nil {
		g.log.Warn("remove unused staged log", "err", err)
	}
}

// fetchEntries stages entries [from, snapshot index] of the group from
// node, in chunks; from 0 means all the node's log holds up to there.
func (g *group) fetchEntries(ctx context.Context, node, from uint64, md pb.SnapshotMetadata) (*raftstore.StagedLog, error) {
	if g.h.cfg.Transport == nil {
		return nil, errors.New("no transport to reach the leader")
	}
	var sl *raftstore.StagedLog
	fail := func(err error) (*raftstore.StagedLog, error) {
		if sl != nil {
			sl.Discard()
		}
		return nil, err
	}
	last := md.Index
	next := from
	for sl == nil || sl.NextIndex() <= last {
		req := &clusterv1.EntriesRequest{Group: g.id, Lo: next, Hi: last + 1, MaxBytes: entriesChunkBytes}
		m, err := g.h.cfg.Transport.Entries(ctx, node, req)
		if err != nil {
			return fail(fmt.Errorf("fetch entries from %d of node %d: %w", next, node, err))
		}
		if sl == nil {
			first := m.GetIndex() + 1
			if from != 0 && first != from {
				return fail(fmt.Errorf("node %d sent entries from %d, not from %d", node, first, from))
			}
			if sl, err = g.storage.StageLog(first, m.GetLogTerm()); err != nil {
				return fail(err)
			}
		}
		ents, err := DecodeEntries(m.GetEntries())
		if err != nil {
			return fail(fmt.Errorf("entries from %d of node %d: %w", next, node, err))
		}
		if len(ents) == 0 || ents[0].Index != sl.NextIndex() {
			return fail(fmt.Errorf("node %d sent no entries from %d", node, sl.NextIndex()))
		}
		if err := sl.Append(ents); err != nil {
			return fail(err)
		}
		next = sl.NextIndex()
	}
	return sl, nil
}

// step hands a message to raft.
func (g *group) step(m *pb.Message) {
	if !g.rebuild.step(m, g.storage) {
		return
	}
	if err := g.rn.Step(*m); err != nil {
		g.log.Debug("step message", "err", err)
	}
}
