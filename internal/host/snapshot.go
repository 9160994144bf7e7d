package host

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// A snapshot of snapshotCostFloor bytes or more is taken only once the
// entries applied since the last one hold snapshotCostFactor times its
// size, or there are snapshotCostFactor times Config.SnapshotEntries of
// them, so that writing snapshots costs a small part of what writing the
// log does. A shard's snapshot grows with its backlog (an entry per
// pending event): 2.9 MB after about 480,000 events in a benchmark that
// consumed none, written every 10,000 entries (about 24 MB of log) at one
// event per call, and its writes delayed the WAL's fdatasyncs: p99 of
// publishing 4.1-4.3 ms, 3.2-3.5 ms with this rule. A smaller snapshot
// costs about what its fdatasync does, whatever its size.
const (
	snapshotCostFactor = 16
	snapshotCostFloor  = 1 << 20
)

type snapResult struct {
	index uint64
	bytes int64 // the snapshot's size
	err   error
}

// snapshotScheduler owns when a group snapshots its state: the index and
// size of its last snapshot, how much log was appended since, and the one
// snapshot being written in the background. Its invariants: at most one
// snapshot is in flight, and the index it records never goes back (a
// snapshot finished after a leader's snapshot was installed above it does
// not count). The group's loop owns it, but for at, which other goroutines
// read, and the write, which runs on wg and reports on done.
type snapshotScheduler struct {
	entries uint64 // Config.SnapshotEntries
	bytes   int64  // Config.SnapshotBytes

	index      uint64 // of the last snapshot
	lastBytes  int64  // the size of the snapshot at index
	sinceBytes int64  // of the entries appended since it
	inFlight   bool
	wg         sync.WaitGroup
	done       chan snapResult
	notify     func()        // called once a result is on done
	at         atomic.Uint64 // index, for other goroutines
}

// newSnapshotScheduler starts with the snapshot at index, of size bytes,
// that the group opened with.
func newSnapshotScheduler(entries uint64, bytes int64, index uint64, size int64) *snapshotScheduler {
	s := &snapshotScheduler{entries: entries, bytes: bytes, index: index, lastBytes: size, done: make(chan snapResult, 1), notify: func() {}}
	s.at.Store(index)
	return s
}

// appended counts entries appended to the log.
func (s *snapshotScheduler) appended(ents []pb.Entry) {
	for _, e := range ents {
		s.sinceBytes += int64(len(e.Data))
	}
}

// due reports whether a snapshot should be taken with the state applied
// up to applied: none while one is in flight or nothing was applied since
// the last; otherwise when enough was applied, or when freesSegment says
// that one would free a segment of the log.
func (s *snapshotScheduler) due(applied uint64, freesSegment func() bool) bool {
	if s.inFlight || applied <= s.index {
		return false
	}
	entries := applied - s.index
	due := entries >= s.entries || s.sinceBytes >= s.bytes
	if due && s.lastBytes >= snapshotCostFloor &&
		s.sinceBytes < snapshotCostFactor*s.lastBytes && entries < snapshotCostFactor*s.entries {
		due = false
	}
	// A queue drained by consumers frees its log's segments only through a
	// snapshot: take one as soon as that frees a segment, whatever the
	// counts, or a drained queue would hold its disk until traffic comes
	// (and a node short of disk space, refusing that traffic, forever).
	return due || freesSegment()
}

// taken restarts the count of appended bytes: a snapshot is being made.
func (s *snapshotScheduler) taken() { s.sinceBytes = 0 }

// start runs write in the background; finished must take its result,
// which arrives on done.
func (s *snapshotScheduler) start(write func() snapResult) {
	if s.inFlight {
		panic("host: a snapshot started while another is in flight")
	}
	s.inFlight = true
	s.wg.Go(func() {
		s.done <- write()
		s.notify()
	})
}

// finished records a snapshot written, and returns its error, if it
// failed: the previous snapshot and the full log are still there, and
// nothing is recorded.
func (s *snapshotScheduler) finished(r snapResult) error {
	s.inFlight = false
	if r.err != nil {
		return r.err
	}
	if r.index >= s.index { // not overtaken by an installed snapshot
		s.index, s.lastBytes = r.index, r.bytes
	}
	s.at.Store(s.index)
	return nil
}

// abandon waits for the snapshot in flight, if one is, and forgets it:
// a snapshot of a state being replaced must not be saved or compact the
// log after the install. It returns that snapshot's result.
func (s *snapshotScheduler) abandon() (r snapResult, ok bool) {
	if !s.inFlight {
		return snapResult{}, false
	}
	r = <-s.done
	s.inFlight = false
	return r, true
}

// installed records a leader's snapshot, of size bytes, installed at
// index.
func (s *snapshotScheduler) installed(index uint64, size int64) {
	s.index, s.lastBytes, s.sinceBytes = index, size, 0
	s.at.Store(index)
}

// busy reports whether a snapshot is in flight.
func (s *snapshotScheduler) busy() bool { return s.inFlight }

// wait waits for the snapshot in flight to be written.
func (s *snapshotScheduler) wait() { s.wg.Wait() }

// maybeSnapshot takes a snapshot once enough has been applied since the
// last one. The state is captured here, on the loop, so it matches the
// applied index exactly; encoding (when the state machine can capture
// without encoding), writing, fsyncing and compacting run in the background
// unless SyncSnapshots is set. While one snapshot is in flight, further
// requests are coalesced into the next check after it finishes rather
// than queued.
func (g *group) maybeSnapshot() {
	if g.appliedAhead() {
		return // raft still reads the entries applied ahead from the log
	}
	freesSegment := func() bool {
		// A log of one segment frees none, whatever the state machine
		// still needs, and asking that costs the most.
		l := g.storage.Log()
		return l.Segments() > 1 && l.WouldDelete(g.compactBelow())
	}
	if !g.snaps.due(g.applied, freesSegment) {
		return
	}
	term, err := g.storage.Term(g.applied)
	if err != nil {
		g.log.Error("term of applied index", "index", g.applied, "err", err)
		return
	}
	// The group replaces its conf state on a change, never alters it, so
	// the snapshot may share its slices.
	md := pb.SnapshotMetadata{Index: g.applied, Term: term, ConfState: *g.confState}
	compactBelow := g.compactBelow()
	g.snaps.taken()
	async, canDefer := g.sm.(AsyncSnapshotter)
	if g.h.cfg.SyncSnapshots || !canDefer {
		data, err := g.sm.Snapshot()
		if err != nil {
			g.log.Error("encode snapshot", "err", err)
			return
		}
		snap := pb.Snapshot{Data: encodeSnapshotData(compactBelow, data), Metadata: md}
		if g.h.cfg.SyncSnapshots {
			g.snapshotFinished(g.writeSnapshot(func() (pb.Snapshot, error) { return snap, nil }, md, compactBelow))
			return
		}
		g.startSnapshot(func() (pb.Snapshot, error) { return snap, nil }, md, compactBelow)
		return
	}
	encode := async.SnapshotFunc()
	g.startSnapshot(func() (pb.Snapshot, error) {
		data, err := encode()
		return pb.Snapshot{Data: encodeSnapshotData(compactBelow, data), Metadata: md}, err
	}, md, compactBelow)
}

// compactBelow returns the index below which the group's log may go once
// a snapshot is written: what the state machine no longer needs, and, of
// a tiered machine, what is held elsewhere beyond its local retention.
func (g *group) compactBelow() uint64 {
	below := min(g.applied+1, g.sm.CompactIndex())
	t, ok := g.sm.(Tiered)
	if !ok {
		return below
	}
	tiered := min(g.applied+1, t.TieredBelow())
	if tiered <= below {
		return below
	}
	return max(below, min(tiered, g.storage.Log().KeepFrom(t.LocalRetention())))
}

func (g *group) startSnapshot(build func() (pb.Snapshot, error), md pb.SnapshotMetadata, compactBelow uint64) {
	g.snaps.start(func() snapResult { return g.writeSnapshot(build, md, compactBelow) })
}

// writeSnapshot saves snap and then deletes the log segments it and the
// state machine no longer need. It may run off the loop: the storage is
// safe for that.
//
// A snapshot that lets no segment go only shortens the replay after a
// restart, so it is saved lazily: without the fsyncs, which delay the
// WAL's, and without compacting, since a crash may lose it
// (raftstore.SaveSnapshotLazily). A shard whose events nobody consumes
// takes only these.
func (g *group) writeSnapshot(build func() (pb.Snapshot, error), md pb.SnapshotMetadata, compactBelow uint64) snapResult {
	start := time.Now()
	idx := md.Index
	snap, err := build()
	if err != nil {
		return snapResult{index: idx, err: fmt.Errorf("encode snapshot: %w", err)}
	}
	frees, err := g.storage.Log().WouldDeleteWritten(compactBelow)
	if err != nil {
		return snapResult{index: idx, err: err}
	}
	save := g.storage.SaveSnapshotLazily
	if frees {
		save = g.storage.SaveSnapshot
	}
	if err := save(snap); err != nil {
		return snapResult{index: idx, err: err}
	}
	if frees {
		if _, err := g.storage.Compact(compactBelow); err != nil {
			return snapResult{index: idx, err: err}
		}
	}
	g.h.observeSnapshot(time.Since(start))
	return snapResult{index: idx, bytes: int64(len(snap.Data))}
}

func (g *group) snapshotFinished(r snapResult) {
	if err := g.snaps.finished(r); err != nil {
		// The previous snapshot and the full log are still there: nothing is
		// lost, the next attempt will try again.
		g.log.Error("snapshot failed", "index", r.index, "err", err)
		return
	}
	// Requests that arrived while this one ran were coalesced into this check.
	g.maybeSnapshot()
}
