package raftstore

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	pb "go.etcd.io/raft/v3/raftpb"

	hlog "herald/internal/log"
	"herald/internal/vfs"
)

// stagedLogDir holds the log a snapshot install will put in place of the
// group's log.
//
// A snapshot from a leader holds a state machine's metadata, not its data:
// a shard's undelivered events stay in log entries below the snapshot
// index. A replica that installs such a snapshot must receive those
// entries too, before the snapshot replaces its state, or it would hold
// offsets whose events it cannot read. The entries are written to a staged
// log first, off the group's loop; the install then swaps it in.
const stagedLogDir = "log.install"

// StagedLog is a log being filled with the entries that a snapshot from a
// leader needs beside it, from the oldest entry its state machine still
// reads up to the snapshot's own index. Only one may exist per storage at
// a time; it is written by one goroutine.
type StagedLog struct {
	fs  vfs.FS
	dir string
	log *hlog.Log
}

// StageLog starts a staged log whose first entry will be at index first;
// prevTerm is the term of the entry before it. A staged log left over
// from an earlier attempt is discarded.
func (s *Storage) StageLog(first, prevTerm uint64) (*StagedLog, error) {
	dir := filepath.Join(s.dir, stagedLogDir)
	if err := vfs.RemoveAllDurable(s.fs, dir); err != nil {
		return nil, fmt.Errorf("stage log in %s: %w", dir, err)
	}
	l, err := hlog.Open(dir, s.logOptions)
	if err != nil {
		return nil, fmt.Errorf("stage log in %s: %w", dir, err)
	}
	if err := l.Reset(first, prevTerm); err != nil {
		l.Close()
		return nil, fmt.Errorf("stage log in %s: %w", dir, err)
	}
	return &StagedLog{fs: s.fs, dir: dir, log: l}, nil
}

// Append adds entries, which must continue the staged log.
func (sl *StagedLog) Append(ents []pb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	if err := sl.log.Append(records(ents)); err != nil {
		return fmt.Errorf("stage log entries %d..%d in %s: %w", ents[0].Index, ents[len(ents)-1].Index, sl.dir, err)
	}
	return nil
}

// NextIndex is the index the next appended entry must have.
func (sl *StagedLog) NextIndex() uint64 { return sl.log.LastIndex() + 1 }

// Discard removes the staged log.
func (sl *StagedLog) Discard() error {
	sl.log.Close()
	return vfs.RemoveAllDurable(sl.fs, sl.dir)
}

// InstallSnapshotWithLog replaces the group's log with the staged one and
// records snap, received from a leader, as the latest snapshot. The staged
// log must end at the snapshot's index, with its term.
//
// The order makes a crash at any point safe: the staged log is durable
// before an install marker is written; the snapshot is saved only after
// the marker; and the logs are swapped after the snapshot is saved. Open
// finishes the swap if the snapshot was saved, and discards the staged log
// if it was not, leaving the group as it was before the install.
func (s *Storage) InstallSnapshotWithLog(snap pb.Snapshot, sl *StagedLog) error {
	md := snap.Metadata
	if t, err := sl.log.Term(md.Index); err != nil || t != md.Term || sl.log.LastIndex() != md.Index {
		return fmt.Errorf("install snapshot %d (term %d) in %s: the staged log ends at %d and does not hold it: %s",
			md.Index, md.Term, s.dir, sl.log.LastIndex(), termProblem(t, err))
	}
	if err := sl.log.Sync(); err != nil {
		return fmt.Errorf("install snapshot %d in %s: %w", md.Index, s.dir, err)
	}
	if err := sl.log.Close(); err != nil {
		return fmt.Errorf("install snapshot %d in %s: %w", md.Index, s.dir, err)
	}
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
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
	if err := s.swapInStagedLog(); err != nil {
		return fmt.Errorf("install snapshot %d in %s: %w (restart the node to finish the install)", md.Index, s.dir, err)
	}
	s.cache, s.cacheBytes = s.cache[:0], 0
	if s.hardState.Commit < md.Index {
		s.hardState.Commit = md.Index
	}
	return s.clearInstall()
}

// swapInStagedLog closes the log, puts the staged log in its place and
// opens it. Called with mu held.
func (s *Storage) swapInStagedLog() error {
	s.log.Close()
	if err := moveStagedLog(s.fs, s.dir); err != nil {
		return err
	}
	l, err := hlog.Open(filepath.Join(s.dir, LogDir), s.logOptions)
	if err != nil {
		return err
	}
	s.log = l
	return nil
}

// moveStagedLog replaces dir's log with its staged log, durably. Repeating
// it after a crash finishes it.
func moveStagedLog(fsys vfs.FS, dir string) error {
	if err := fsys.RemoveAll(filepath.Join(dir, LogDir)); err != nil {
		return err
	}
	if err := fsys.Rename(filepath.Join(dir, stagedLogDir), filepath.Join(dir, LogDir)); err != nil {
		return err
	}
	return vfs.SyncDir(fsys, dir)
}

// recoverStagedLog runs before the log is opened. A staged log whose
// install saved its snapshot (the marker and the snapshot name the same
// index) is moved into place; any other staged log belonged to an install
// that never took effect, and is removed.
func recoverStagedLog(fsys vfs.FS, dir string) error {
	staged := filepath.Join(dir, stagedLogDir)
	if _, err := fsys.Stat(staged); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	finish, err := stagedInstallSaved(fsys, dir)
	if err != nil {
		return err
	}
	if finish {
		return moveStagedLog(fsys, dir)
	}
	return vfs.RemoveAllDurable(fsys, staged)
}

// stagedInstallSaved reports whether an install marker exists and the
// saved snapshot is the one it names. Damaged files are left for load to
// report.
func stagedInstallSaved(fsys vfs.FS, dir string) (bool, error) {
	mark, err := vfs.ReadFramed(fsys, filepath.Join(dir, installFile), installMagic)
	if err != nil || mark == nil {
		return false, nil
	}
	data, err := vfs.ReadFramed(fsys, filepath.Join(dir, snapshotFile), fileMagic)
	if err != nil || data == nil {
		return false, nil
	}
	var inst pb.SnapshotMetadata
	var snap pb.Snapshot
	if inst.Unmarshal(mark) != nil || snap.Unmarshal(data) != nil {
		return false, nil
	}
	md := snap.Metadata
	return md.Index == inst.Index && md.Term == inst.Term, nil
}

func records(ents []pb.Entry) []hlog.Record {
	recs := make([]hlog.Record, len(ents))
	for i, e := range ents {
		recs[i] = hlog.Record{Index: e.Index, Term: e.Term, Type: uint8(e.Type), Data: e.Data}
	}
	return recs
}
