// Package raftstore persists one Raft group: it implements etcd raft's
// Storage interface over a segmented log (internal/log) and the node's
// write-ahead log (internal/wal, Options.WAL), which every group of the
// node shares, and keeps the group's latest snapshot, and the hard state
// it was created with, in small files written crash-safely.
//
// A group's directory holds:
//
//	log/        the segmented Raft log (which, for a shard, is the queue)
//	hardstate   term, vote and commit index, as the group was created
//	snapshot    the latest snapshot (metadata plus state machine bytes)
//
// Entries are appended to the group's log and to the WAL; the WAL's
// fdatasync, shared by every group syncing at the time, makes them
// durable, and the WAL's checkpoints flush the group's log later.
//
// The commit index is volatile in Raft, so the hard state is recorded
// only when the term or vote changes (an election) or a snapshot is saved,
// not on every commit: that keeps one fdatasync per batch of appends on the
// hot path. On open the commit index is raised to the snapshot index, which
// is known to be committed. The hard state is a record of the WAL,
// durable with the entries before it by the WAL's shared fdatasync, and
// the WAL keeps it (see wal.SetState); the hardstate file holds the state
// the group was created with: ten thousand groups electing themselves at
// a node's start rewrite no file each, then or later.
package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	hlog "herald/internal/log"
	"herald/internal/vfs"
	"herald/internal/wal"
)

const (
	hardStateFile = "hardstate"
	snapshotFile  = "snapshot"
	// lazySnapshotFile holds the snapshots saved without an fsync
	// (SaveSnapshotLazily), each written over the last in place: a length,
	// then the framed snapshot, then whatever a longer one left.
	lazySnapshotFile = "snapshot.lazy"
	// LogDir, in a group's directory, holds its log.
	LogDir = "log"
	// installFile marks a snapshot install in progress: it names the
	// snapshot that replaces the log, so that recovery may finish the
	// log's reset. Without it, a log that lacks the snapshot's index has
	// lost entries and is reported, not reset.
	installFile = "installing"

	fileMagic    = "HRS1"
	installMagic = "HRSI"

	// DefaultCacheBytes bounds the in-memory copy of the newest entries,
	// which lets the apply path avoid reading back what it just wrote.
	DefaultCacheBytes = 8 << 20

	// writebackEvery is how much of a WAL-backed log is written before
	// the disk is asked to write it back (log.Options.WritebackEvery):
	// that much is what a WAL fdatasync may then wait behind, 1.3 ms on a
	// disk that writes 200 MB/s. Against 1 MiB, on such a disk, a single
	// node publishing one event per call over 11 shards had a p99 of 6.8
	// ms against 7.5, and did 28,492 events/s against 26,974 (medians of
	// eight alternating pairs, BENCHMARKS).
	writebackEvery = 256 << 10

	// writeBehindBytes is how much of a WAL-backed log's newest entries
	// its group keeps in memory before writing them to the segment files
	// (log.Options.WriteBehind): at one event per request a Ready holds a
	// few kilobytes, and one write call for dozens of Readies costs less
	// than one each. The WAL's checkpoints bound what all groups hold.
	writeBehindBytes = 256 << 10
)

// Options configure a Storage.
type Options struct {
	SegmentSize int64  // log segment size; 0 means the log's default
	CacheBytes  int    // bound of the recent-entry cache; 0 means DefaultCacheBytes
	FS          vfs.FS // nil means vfs.OS
	BootID      string // passed to the log; "" means the machine's
	// WAL, required, is the node's write-ahead log, shared by every
	// group: appends go to it as well, Sync syncs it instead of the
	// group's own log, and the WAL's checkpoints flush the group's log
	// later. Group is the group's id in it.
	WAL   *wal.WAL
	Group uint64
	// WriteBehind is how many bytes of its newest entries the group's
	// log keeps in memory before writing them to its segment files
	// (log.Options.WriteBehind); 0 means 256 KiB, and a negative value
	// writes every append at once.
	WriteBehind int64
	// Files, if set, bounds the log segment files open at once across
	// every group sharing it; nil keeps the group's files open.
	Files *hlog.Files
}

// Storage is the durable state of one Raft group. It is safe for use by the
// group's loop and by concurrent readers and a background snapshotter.
type Storage struct {
	fs         vfs.FS
	dir        string
	logOptions hlog.Options
	wal        *wal.WAL
	group      uint64
	// closedClean is set once Close has synced and closed the log.
	closedClean atomic.Bool
	// log is replaced, under mu, when a snapshot install swaps in a
	// staged log; readers outside the group's loop take it under mu.
	log *hlog.Log

	// saveMu serializes snapshot file writes, so that a background save
	// of an older snapshot can never replace a newer one.
	saveMu sync.Mutex

	// repaired is the note of a repair that cut the group's log or the
	// node's WAL (see log.Cut): the group then accepts what it lost
	// instead of reporting it as damage, once. lost says what that was.
	repaired string
	lost     []string

	mu        sync.Mutex
	hardState pb.HardState // latest, possibly with a commit newer than on disk
	savedTerm uint64       // term and vote as last recorded (file or WAL)
	savedVote uint64
	snap      pb.Snapshot

	cache      []pb.Entry // consecutive newest entries, ending at the log's last index
	cacheBytes int
	cacheLimit int
}

// Open opens (creating if needed) the storage in dir and recovers it.
func Open(dir string, opts Options) (*Storage, error) {
	if opts.WAL == nil {
		return nil, fmt.Errorf("open raft directory %s: Options.WAL is nil: pass the node's write-ahead log (wal.Open), with the group's id in it as Options.Group", dir)
	}
	fsys := opts.FS
	if fsys == nil {
		fsys = vfs.OS
	}
	if err := vfs.MkdirDurable(fsys, dir); err != nil {
		return nil, fmt.Errorf("create raft directory %s: %w", dir, err)
	}
	for _, name := range []string{hardStateFile, snapshotFile, installFile, rebuildingFile} {
		if err := vfs.RemoveTemp(fsys, dir, name); err != nil {
			return nil, fmt.Errorf("open raft directory %s: %w", dir, err)
		}
	}
	if err := recoverStagedLog(fsys, dir); err != nil {
		return nil, fmt.Errorf("open raft directory %s: finish an interrupted snapshot install: %w", dir, err)
	}
	logOpts := hlog.Options{SegmentSize: opts.SegmentSize, FS: fsys, BootID: opts.BootID, Files: opts.Files,
		UnsyncedElsewhere: true, ElsewhereNoTear: opts.WAL.NoTear(),
		// Synced only by checkpoints and segment rolls: written back as
		// it goes instead.
		WritebackEvery: writebackEvery}
	switch {
	case opts.WriteBehind == 0:
		logOpts.WriteBehind = writeBehindBytes
	case opts.WriteBehind > 0:
		logOpts.WriteBehind = opts.WriteBehind
	}
	l, err := hlog.Open(filepath.Join(dir, LogDir), logOpts)
	if _, ok := errors.AsType[*hlog.CorruptionError](err); ok {
		return nil, fmt.Errorf("%w; %s", err, damageRemedy)
	}
	if err != nil {
		return nil, err
	}
	s := &Storage{fs: fsys, dir: dir, logOptions: logOpts, log: l, wal: opts.WAL, group: opts.Group,
		cacheLimit: opts.CacheBytes}
	if s.repaired, err = repairNote(fsys, dir, opts.WAL); err != nil {
		l.Close()
		return nil, err
	}
	if s.cacheLimit <= 0 {
		s.cacheLimit = DefaultCacheBytes
	}
	state, err := s.replay()
	if err != nil {
		l.Close()
		return nil, err
	}
	if err := s.load(state); err != nil {
		l.Close()
		return nil, err
	}
	if err := s.finishRepair(); err != nil {
		l.Close()
		return nil, err
	}
	return s, nil
}

// load reads the group's files; walState, if not nil, is the hard state
// the WAL held for the group, newer than the hardstate file.
func (s *Storage) load(walState []byte) error {
	if data, err := s.readFramed(snapshotFile); err != nil {
		return err
	} else if data != nil {
		var snap pb.Snapshot
		if err := snap.Unmarshal(data); err != nil {
			return s.damaged(snapshotFile, fmt.Sprintf("it does not decode: %v", err))
		}
		s.snap = snap
	}
	if lazy, err := s.readLazySnapshot(); err != nil {
		return err
	} else if lazy != nil && lazy.Metadata.Index > s.snap.Metadata.Index {
		s.snap = *lazy
	}
	if walState != nil && raft.IsEmptySnap(s.snap) && s.log.LastIndex() == 0 {
		// The group's directory is new: the state is of the files it
		// replaces (a damaged replica moved aside to be rebuilt), as are
		// the entries replay skipped for the gap they would leave.
		walState = nil
	}
	// The WAL's hard state is newer than the file's, which is then not
	// read at all.
	data, fromWAL := walState, walState != nil
	if !fromWAL {
		var err error
		if data, err = s.readFramed(hardStateFile); err != nil {
			return err
		}
	}
	if data != nil {
		var hs pb.HardState
		if err := hs.Unmarshal(data); err != nil {
			if fromWAL {
				return Damaged(fmt.Errorf("the node's write-ahead log holds a hard state for %s that does not decode: %v; %s", s.dir, err, damageRemedy))
			}
			return s.damaged(hardStateFile, fmt.Sprintf("it does not decode: %v", err))
		}
		s.hardState = hs
		s.savedTerm, s.savedVote = hs.Term, hs.Vote
	}
	if err := s.checkSnapshotInLog(); err != nil {
		return err
	}
	si := s.snap.Metadata.Index
	commit := max(s.hardState.Commit, si)
	if last := s.log.LastIndex(); commit > last && s.repaired != "" {
		s.acceptLoss(fmt.Sprintf("entries %d..%d, committed, are gone: the commit index is lowered to %d", last+1, commit, last))
		commit = last
	} else if commit > last {
		return Damaged(fmt.Errorf("raft state in %s is inconsistent: commit index %d is beyond the last log entry %d; the log lost acknowledged entries; %s", s.dir, commit, last, damageRemedy))
	}
	s.hardState.Commit = commit
	return nil
}

// readLazySnapshot returns the snapshot last saved lazily if a crash left
// it whole and the log continues from it, and nil otherwise: the snapshot
// saved durably and the log then hold the state, and replaying a little
// more is all that is lost.
func (s *Storage) readLazySnapshot() (*pb.Snapshot, error) {
	name := filepath.Join(s.dir, lazySnapshotFile)
	b, err := vfs.ReadFile(s.fs, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) < lazyLengthBytes {
		return nil, nil
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-lazyLengthBytes) {
		return nil, nil
	}
	data, err := vfs.Unframe(name, b[lazyLengthBytes:lazyLengthBytes+n], fileMagic)
	if err != nil {
		return nil, nil
	}
	snap := &pb.Snapshot{}
	if snap.Unmarshal(data) != nil {
		return nil, nil
	}
	md := snap.Metadata
	if t, err := s.log.Term(md.Index); err != nil || t != md.Term {
		return nil, nil
	}
	return snap, nil
}

// lazyLengthBytes is the size of the length before a lazy snapshot.
const lazyLengthBytes = 8

// checkSnapshotInLog makes sure the log continues from the snapshot: it
// holds the snapshot's index with the snapshot's term, or starts right
// after it. Only a snapshot install interrupted by a crash, which leaves
// its marker, may reset the log here; anything else means the log lost
// entries that the snapshot says were committed, which is reported.
func (s *Storage) checkSnapshotInLog() error {
	md := s.snap.Metadata
	inst, err := s.readInstall()
	if err != nil {
		return err
	}
	if si := md.Index; si > 0 {
		if t, terr := s.log.Term(si); terr != nil || t != md.Term {
			if inst == nil || inst.Index != si || inst.Term != md.Term {
				return Damaged(fmt.Errorf("raft state in %s is inconsistent: the snapshot at index %d (term %d) is not continued by the log (%s; log holds %d..%d); "+
					"the log lost committed entries; %s",
					s.dir, si, md.Term, termProblem(t, terr), s.log.FirstIndex(), s.log.LastIndex(), damageRemedy))
			}
			if err := s.log.Reset(si+1, md.Term); err != nil {
				return fmt.Errorf("finish installing snapshot %d in %s: %w", si, s.dir, err)
			}
		}
	}
	if inst != nil {
		return s.clearInstall()
	}
	return nil
}

func termProblem(t uint64, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("the log has term %d there", t)
}

// readFramed reads a checksummed file of the group, nil if it is missing.
func (s *Storage) readFramed(name string) ([]byte, error) {
	data, err := vfs.ReadFramed(s.fs, filepath.Join(s.dir, name), fileMagic)
	var d *vfs.DamagedError
	if errors.As(err, &d) {
		return nil, s.damaged(name, fmt.Sprintf("%s at byte offset %d", d.Reason, d.Offset))
	}
	return data, err
}

// damaged reports a damaged file of the group, naming it and saying what
// to do.
func (s *Storage) damaged(name, reason string) error {
	return Damaged(fmt.Errorf("%s is damaged (%s); herald will not serve the shard while it is damaged: %s",
		filepath.Join(s.dir, name), reason, damageRemedy))
}

// ErrDamaged matches (errors.Is) every error saying that a group's files
// are damaged or lost entries: what a replica can be rebuilt from its
// peers for, unlike a full disk or a missing permission.
var ErrDamaged = errors.New("raft group files are damaged")

// Damaged marks err as saying that a group's files are damaged; its
// message is unchanged.
func Damaged(err error) error { return damage{err} }

type damage struct{ error }

func (d damage) Is(target error) bool { return target == ErrDamaged }
func (d damage) Unwrap() error        { return d.error }

// IsEmpty reports whether the group has never been bootstrapped.
func (s *Storage) IsEmpty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.LastIndex() == 0 && raft.IsEmptySnap(s.snap)
}

// Bootstrap initializes an empty group with the given membership by writing
// a snapshot at index 1, term 1 whose state machine data is empty. This is
// etcd raft's recommended alternative to RawNode.Bootstrap: every replica
// created with the same voters starts from the same state.
func (s *Storage) Bootstrap(cs pb.ConfState) error {
	if !s.IsEmpty() {
		return fmt.Errorf("bootstrap raft group in %s: it already has state", s.dir)
	}
	snap := pb.Snapshot{Metadata: pb.SnapshotMetadata{ConfState: cs, Index: 1, Term: 1}}
	if err := s.ApplySnapshot(snap); err != nil {
		return err
	}
	return s.SetHardState(pb.HardState{Term: 1, Commit: 1}, true)
}

// InitialState implements raft.Storage.
func (s *Storage) InitialState() (pb.HardState, pb.ConfState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hardState, s.snap.Metadata.ConfState, nil
}

// Entries implements raft.Storage.
func (s *Storage) Entries(lo, hi, maxSize uint64) ([]pb.Entry, error) {
	s.mu.Lock()
	if n := len(s.cache); n > 0 && lo >= s.cache[0].Index {
		first := s.cache[0].Index
		if hi > s.cache[n-1].Index+1 {
			s.mu.Unlock()
			return nil, raft.ErrUnavailable
		}
		ents := limitSize(s.cache[lo-first:hi-first], maxSize)
		out := make([]pb.Entry, len(ents))
		copy(out, ents)
		s.mu.Unlock()
		return out, nil
	}
	l := s.log
	s.mu.Unlock()
	recs, err := l.Entries(lo, hi, maxSize)
	if err != nil {
		return nil, raftError(err)
	}
	out := make([]pb.Entry, len(recs))
	for i, r := range recs {
		out[i] = pb.Entry{Index: r.Index, Term: r.Term, Type: pb.EntryType(r.Type), Data: r.Data}
	}
	return out, nil
}

// limitSize keeps the longest prefix of ents whose data fits in maxSize,
// and at least one entry.
func limitSize(ents []pb.Entry, maxSize uint64) []pb.Entry {
	if maxSize == 0 {
		return ents
	}
	var size uint64
	for i, e := range ents {
		size += uint64(len(e.Data))
		if size > maxSize && i > 0 {
			return ents[:i]
		}
	}
	return ents
}

// Term implements raft.Storage.
func (s *Storage) Term(i uint64) (uint64, error) {
	s.mu.Lock()
	if n := len(s.cache); n > 0 && i >= s.cache[0].Index && i <= s.cache[n-1].Index {
		t := s.cache[i-s.cache[0].Index].Term
		s.mu.Unlock()
		return t, nil
	}
	snap := s.snap.Metadata
	l := s.log
	s.mu.Unlock()
	if i == snap.Index && i > 0 {
		return snap.Term, nil
	}
	t, err := l.Term(i)
	return t, raftError(err)
}

// LastIndex implements raft.Storage.
func (s *Storage) LastIndex() (uint64, error) { return s.Log().LastIndex(), nil }

// FirstIndex implements raft.Storage. The log may hold entries below the
// snapshot index (a shard keeps events that are not yet delivered), so this
// is the log's own first index.
func (s *Storage) FirstIndex() (uint64, error) { return s.Log().FirstIndex(), nil }

// Snapshot implements raft.Storage.
func (s *Storage) Snapshot() (pb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap, nil
}

// Append adds entries to the log, overwriting a conflicting tail. They are
// durable only after Sync.
func (s *Storage) Append(ents []pb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	recs := records(ents)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.log.Append(recs); err != nil {
		return err
	}
	// The WAL record follows the write to the group's log, so that a
	// checkpoint that covers the record flushes the write too.
	if err := s.wal.Append(s.group, recs, s); err != nil {
		return err
	}
	s.cacheAppend(ents)
	return nil
}

func (s *Storage) cacheAppend(ents []pb.Entry) {
	first := ents[0].Index
	if n := len(s.cache); n > 0 {
		cfirst := s.cache[0].Index
		switch {
		case first <= cfirst:
			s.cache, s.cacheBytes = s.cache[:0], 0
		case first <= s.cache[n-1].Index+1:
			for _, e := range s.cache[first-cfirst:] {
				s.cacheBytes -= len(e.Data)
			}
			s.cache = s.cache[:first-cfirst]
		default:
			s.cache, s.cacheBytes = s.cache[:0], 0
		}
	}
	for _, e := range ents {
		s.cache = append(s.cache, e)
		s.cacheBytes += len(e.Data)
	}
	s.trimCache(0)
}

// trimCache drops cached entries up to and including applied, and the
// oldest ones beyond the size bound.
func (s *Storage) trimCache(applied uint64) {
	drop := 0
	for drop < len(s.cache) && (s.cache[drop].Index <= applied || s.cacheBytes > s.cacheLimit) {
		s.cacheBytes -= len(s.cache[drop].Data)
		drop++
	}
	if drop > 0 {
		n := copy(s.cache, s.cache[drop:])
		clear(s.cache[n:])
		s.cache = s.cache[:n]
	}
}

// SetApplied tells the storage that entries up to index have been applied,
// so the cache no longer needs them.
func (s *Storage) SetApplied(index uint64) {
	s.mu.Lock()
	s.trimCache(index)
	s.mu.Unlock()
}

// Sync makes every appended entry durable: one fdatasync of the node's
// WAL, shared with every other group syncing at the time.
func (s *Storage) Sync() error { return s.wal.Sync() }

// WriteBehind writes the entries the group's log holds in memory to its
// segment files once they are many enough (log.Options.WriteBehind); the
// group calls it while the WAL's fdatasync runs. With a negative
// Options.WriteBehind every append is written at once, and it does
// nothing.
func (s *Storage) WriteBehind() error { return s.Log().WriteBehind() }

// WriteHeld writes every entry the group's log holds in memory to its
// segment files, without syncing: for a group going quiet. A node killed
// later finds them there, and opening the group need not write and sync
// them again from the WAL.
func (s *Storage) WriteHeld() error { return s.Log().WriteHeld() }

// Flush makes every appended entry durable in the group's own log: what
// a WAL checkpoint does before it deletes the WAL files holding them.
// After a clean Close, which synced the log, there is nothing to do.
func (s *Storage) Flush() error {
	err := s.Log().Sync()
	if errors.Is(err, hlog.ErrClosed) && s.closedClean.Load() {
		return nil
	}
	return err
}

// SetHardState records hs when the term or vote changed, or when force is
// set; a newer commit index alone is kept in memory (see the package
// comment). hs is a record of the node's WAL, durable after the next
// Sync; force also rewrites the hardstate file at once.
func (s *Storage) SetHardState(hs pb.HardState, force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hardState = hs
	if !force && hs.Term == s.savedTerm && hs.Vote == s.savedVote {
		return nil
	}
	data, err := hs.Marshal()
	if err != nil {
		return fmt.Errorf("encode hard state: %w", err)
	}
	// Recorded even when the file is written too: the WAL's latest
	// record, which recovery prefers, must never be older than the
	// file.
	if err := s.wal.SetState(s.group, data); err != nil {
		return fmt.Errorf("save hard state of %s: %w", s.dir, err)
	}
	s.savedTerm, s.savedVote = s.hardState.Term, s.hardState.Vote
	if !force {
		return nil
	}
	return s.writeHardState(s.hardState)
}

// writeHardState replaces the hardstate file with hs.
func (s *Storage) writeHardState(hs pb.HardState) error {
	data, err := hs.Marshal()
	if err != nil {
		return fmt.Errorf("encode hard state: %w", err)
	}
	if err := vfs.WriteFileAtomic(s.fs, s.dir, hardStateFile, vfs.Frame(fileMagic, data)); err != nil {
		return fmt.Errorf("save hard state of %s: %w", s.dir, err)
	}
	return nil
}

// SaveSnapshot durably records snap, taken locally from the state machine,
// as the latest snapshot, unless a snapshot at the same or a later index
// is already saved (a background save can finish after a newer snapshot
// was installed from a leader): the saved snapshot never moves backwards.
// The log is left alone: Compact trims it.
func (s *Storage) SaveSnapshot(snap pb.Snapshot) error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	return s.saveSnapshotLocked(snap)
}

func (s *Storage) saveSnapshotLocked(snap pb.Snapshot) error {
	framed, newer, err := s.frameNewer(snap, 0)
	if !newer || err != nil {
		return err
	}
	// Written holding saveMu only: this is the slow part and readers must not wait for it.
	if err := vfs.WriteFileAtomic(s.fs, s.dir, snapshotFile, framed); err != nil {
		return fmt.Errorf("save snapshot of %s at index %d: %w", s.dir, snap.Metadata.Index, err)
	}
	s.setSnapshot(snap)
	return nil
}

// SaveSnapshotLazily records snap as the latest snapshot, as SaveSnapshot
// does, but does not make it durable: it is written over the last lazy
// snapshot, in place, with no fsync, no new file and no rename: a durable
// save's fsyncs compete with the node's WAL fdatasyncs on the disk they
// share (decision 0019). A crash may lose or tear a lazy snapshot; Open
// then starts from the snapshot saved durably and replays the log from
// there. So the log must not be compacted on a lazy snapshot's account:
// one only shortens the replay after a restart.
func (s *Storage) SaveSnapshotLazily(snap pb.Snapshot) error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	b, newer, err := s.frameNewer(snap, lazyLengthBytes)
	if !newer || err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(b, uint64(len(b)-lazyLengthBytes))
	name := filepath.Join(s.dir, lazySnapshotFile)
	f, err := s.fs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("save snapshot of %s at index %d: %w", s.dir, snap.Metadata.Index, err)
	}
	_, err = f.WriteAt(b, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("save snapshot of %s at index %d in %s: %w (is the disk full?)", s.dir, snap.Metadata.Index, name, err)
	}
	s.setSnapshot(snap)
	return nil
}

// frameNewer encodes snap as a framed file's contents (vfs.Frame) after
// reserve bytes left for the caller, unless a snapshot at its index or a
// later one is already saved (newer is then false). The encoding is
// framed where it is written: a shard's snapshot grows with its backlog,
// to megabytes, and each copy of it costs the cores the publishers use.
func (s *Storage) frameNewer(snap pb.Snapshot, reserve int) (b []byte, newer bool, err error) {
	s.mu.Lock()
	current := s.snap.Metadata.Index
	s.mu.Unlock()
	if idx := snap.Metadata.Index; idx <= current && current > 0 {
		return nil, false, nil
	}
	head := reserve + vfs.FrameHeaderBytes
	b = make([]byte, head+snap.Size())
	if _, err := snap.MarshalTo(b[head:]); err != nil {
		return nil, false, fmt.Errorf("encode snapshot: %w", err)
	}
	vfs.SetFrameHeader(b[reserve:], fileMagic)
	return b, true, nil
}

func (s *Storage) setSnapshot(snap pb.Snapshot) {
	s.mu.Lock()
	s.snap = snap
	s.mu.Unlock()
}

// ApplySnapshot replaces the whole log with snap, received from a leader
// (or written by Bootstrap). A marker naming the snapshot is made durable
// first, so that a crash between saving the snapshot and resetting the
// log is finished by Open instead of being mistaken for lost entries.
func (s *Storage) ApplySnapshot(snap pb.Snapshot) error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	md := snap.Metadata
	if err := s.barrier(); err != nil {
		return err
	}
	if err := s.writeInstall(md); err != nil {
		return err
	}
	if err := s.saveSnapshotLocked(snap); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.log.Reset(md.Index+1, md.Term); err != nil {
		return fmt.Errorf("reset log of %s to snapshot %d: %w", s.dir, md.Index, err)
	}
	s.cache, s.cacheBytes = s.cache[:0], 0
	if s.hardState.Commit < md.Index {
		s.hardState.Commit = md.Index
	}
	return s.clearInstall()
}

// writeInstall durably marks the install of the snapshot md.
func (s *Storage) writeInstall(md pb.SnapshotMetadata) error {
	mark, err := (&pb.SnapshotMetadata{Index: md.Index, Term: md.Term}).Marshal()
	if err != nil {
		return fmt.Errorf("encode snapshot install marker: %w", err)
	}
	if err := vfs.WriteFileAtomic(s.fs, s.dir, installFile, vfs.Frame(installMagic, mark)); err != nil {
		return fmt.Errorf("install snapshot %d in %s: %w", md.Index, s.dir, err)
	}
	return nil
}

// readInstall returns the metadata in the install marker, nil if there is
// none.
func (s *Storage) readInstall() (*pb.SnapshotMetadata, error) {
	data, err := vfs.ReadFramed(s.fs, filepath.Join(s.dir, installFile), installMagic)
	var d *vfs.DamagedError
	if errors.As(err, &d) {
		// A marker is written whole before anything it covers is touched;
		// a damaged one covered nothing, or its reset is done.
		return nil, s.clearInstall()
	}
	if err != nil || data == nil {
		return nil, err
	}
	md := &pb.SnapshotMetadata{}
	if err := md.Unmarshal(data); err != nil {
		return nil, s.damaged(installFile, fmt.Sprintf("it does not decode: %v", err))
	}
	return md, nil
}

// clearInstall removes the install marker durably.
func (s *Storage) clearInstall() error {
	err := s.fs.Remove(filepath.Join(s.dir, installFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = vfs.SyncDir(s.fs, s.dir)
	}
	if err != nil {
		return fmt.Errorf("finish snapshot install in %s: %w", s.dir, err)
	}
	return nil
}

// Compact deletes whole log segments whose entries all lie below index.
// The caller guarantees those entries are covered by a durable snapshot and
// no longer needed by the state machine.
func (s *Storage) Compact(below uint64) (int, error) {
	n, err := s.Log().DeletePrefix(below)
	if err != nil {
		return n, fmt.Errorf("compact log of %s below %d: %w", s.dir, below, err)
	}
	return n, nil
}

// Log exposes the underlying log for statistics.
func (s *Storage) Log() *hlog.Log {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log
}

// Close closes the log, which syncs it: the WAL's later checkpoints need
// not flush it. The WAL keeps the group's hard state.
func (s *Storage) Close() error {
	err := s.Log().Close()
	if err == nil {
		s.closedClean.Store(true)
		s.wal.Forget(s.group)
	}
	return err
}

func raftError(err error) error {
	switch {
	case errors.Is(err, hlog.ErrCompacted):
		return raft.ErrCompacted
	case errors.Is(err, hlog.ErrUnavailable):
		return raft.ErrUnavailable
	}
	return err
}
