package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	hlog "herald/internal/log"
	"herald/internal/wal"
)

func entry(index, term uint64, data string) pb.Entry {
	return pb.Entry{Index: index, Term: term, Type: pb.EntryNormal, Data: []byte(data)}
}

// testGroup is the group id of a test's storage in its WAL.
const testGroup = 1

// testStore is a group's storage and the node's WAL it was opened with,
// in a directory next to the group's: Close closes both, as a node's
// stop does, and a reopen opens both again (a WAL hands a group its
// recovered records once per open).
type testStore struct {
	*Storage
	wal *wal.WAL
}

// walDirOf is the directory of the WAL next to the group directory dir.
func walDirOf(dir string) string { return filepath.Join(filepath.Dir(dir), "wal") }

// openStore opens the WAL next to dir on opts.FS with opts.BootID, then
// the storage in dir with it; the WAL is closed if the storage does not
// open. Both are closed at cleanup if the test has not closed them.
func openStore(t *testing.T, dir string, opts Options) (*testStore, error) {
	t.Helper()
	w, err := wal.Open(walDirOf(dir), wal.Options{FS: opts.FS, BootID: opts.BootID})
	if err != nil {
		return nil, err
	}
	opts.WAL, opts.Group = w, testGroup
	s, err := Open(dir, opts)
	if err != nil {
		w.Close()
		return nil, err
	}
	if err := w.Booted(); err != nil {
		s.Close()
		w.Close()
		return nil, err
	}
	ts := &testStore{Storage: s, wal: w}
	t.Cleanup(func() { ts.Close() })
	return ts, nil
}

// Close closes the storage, then the WAL.
func (s *testStore) Close() error {
	err := s.Storage.Close()
	if errors.Is(err, hlog.ErrClosed) {
		err = nil
	}
	werr := s.wal.Close()
	if errors.Is(werr, hlog.ErrClosed) {
		werr = nil
	}
	return errors.Join(err, werr)
}

func openTest(t *testing.T, dir string, opts Options) *testStore {
	t.Helper()
	s, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func bootstrapped(t *testing.T, dir string, opts Options) *testStore {
	t.Helper()
	s := openTest(t, dir, opts)
	if !s.IsEmpty() {
		t.Fatal("new storage is not empty")
	}
	if err := s.Bootstrap(pb.ConfState{Voters: []uint64{1}}); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBootstrapAndInitialState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "g")
	s := bootstrapped(t, dir, Options{})
	if s.IsEmpty() {
		t.Fatal("bootstrapped storage reports empty")
	}
	if err := s.Bootstrap(pb.ConfState{Voters: []uint64{1}}); err == nil {
		t.Fatal("bootstrapping twice succeeded")
	}
	hs, cs, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if hs.Term != 1 || hs.Commit != 1 || len(cs.Voters) != 1 || cs.Voters[0] != 1 {
		t.Fatalf("initial state = %v %v", hs, cs)
	}
	if fi, _ := s.FirstIndex(); fi != 2 {
		t.Fatalf("first index after bootstrap = %d, want 2", fi)
	}
	if li, _ := s.LastIndex(); li != 1 {
		t.Fatalf("last index after bootstrap = %d, want 1", li)
	}
	if term, err := s.Term(1); err != nil || term != 1 {
		t.Fatalf("Term(1) = %d, %v", term, err)
	}
}

func TestAppendReadBackFromCacheAndLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "g")
	// A tiny cache forces reads of older entries to go to the log files.
	s := bootstrapped(t, dir, Options{CacheBytes: 10, SegmentSize: 256})
	var ents []pb.Entry
	for i := uint64(2); i < 40; i++ {
		ents = append(ents, entry(i, 2, strings.Repeat("x", int(i))))
	}
	if err := s.Append(ents); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Entries(2, 40, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 38 {
		t.Fatalf("read %d entries, want 38", len(got))
	}
	for i, e := range got {
		if e.Index != uint64(i+2) || string(e.Data) != strings.Repeat("x", i+2) || e.Term != 2 {
			t.Fatalf("entry %d = %v", i+2, e)
		}
	}
	// maxSize limits the batch but always returns one entry.
	if got, _ := s.Entries(10, 40, 1); len(got) != 1 {
		t.Fatalf("Entries with maxSize 1 returned %d entries", len(got))
	}
	if _, err := s.Entries(2, 41, 0); !errors.Is(err, raft.ErrUnavailable) {
		t.Fatalf("reading past the end: err = %v, want ErrUnavailable", err)
	}
	// A conflicting tail is overwritten.
	if err := s.Append([]pb.Entry{entry(30, 3, "new")}); err != nil {
		t.Fatal(err)
	}
	if li, _ := s.LastIndex(); li != 30 {
		t.Fatalf("last index after overwrite = %d, want 30", li)
	}
	if term, _ := s.Term(30); term != 3 {
		t.Fatalf("term of overwritten entry = %d, want 3", term)
	}
}

// A hard state whose term and vote did not change (a newer commit index
// alone) is not recorded: not in the hardstate file, not in the WAL, so
// that a reopen finds the commit index recorded last. A term or vote
// change is recorded in the WAL, not the file, and survives a reopen.
func TestHardStateWrittenOnlyOnTermOrVoteChange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "g")
	s := bootstrapped(t, dir, Options{})
	path := filepath.Join(dir, hardStateFile)
	before, _ := os.Stat(path)
	if err := s.Append([]pb.Entry{entry(2, 1, "a")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHardState(pb.HardState{Term: 1, Commit: 2}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if !before.ModTime().Equal(after.ModTime()) || !os.SameFile(before, after) {
		t.Fatal("hardstate file rewritten although only the commit index could have changed")
	}
	s.Close()
	s = openTest(t, dir, Options{})
	if hs, _, _ := s.InitialState(); hs.Commit != 1 {
		t.Fatalf("reopened commit index = %d, want the bootstrap's 1: a change of the commit index alone was recorded", hs.Commit)
	}
	if err := s.Append([]pb.Entry{entry(2, 5, "a")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHardState(pb.HardState{Term: 5, Vote: 1, Commit: 2}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	after, _ = os.Stat(path)
	if !before.ModTime().Equal(after.ModTime()) || !os.SameFile(before, after) {
		t.Fatal("hardstate file rewritten at a term change: the WAL records it")
	}
	s.Close()
	s2 := openTest(t, dir, Options{})
	hs, _, _ := s2.InitialState()
	if hs.Term != 5 || hs.Vote != 1 || hs.Commit != 2 {
		t.Fatalf("reopened hard state = %v, want term 5 vote 1 commit 2", hs)
	}
}

func TestSnapshotRaisesCommitAndSurvivesReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "g")
	s := bootstrapped(t, dir, Options{SegmentSize: 256})
	var ents []pb.Entry
	for i := uint64(2); i <= 50; i++ {
		ents = append(ents, entry(i, 1, "entry-data-entry-data"))
	}
	s.Append(ents)
	s.Sync()
	snap := pb.Snapshot{Data: []byte("state"), Metadata: pb.SnapshotMetadata{
		Index: 40, Term: 1, ConfState: pb.ConfState{Voters: []uint64{1}}}}
	if err := s.SaveSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Compact(30); err != nil || n == 0 {
		t.Fatalf("Compact(30) deleted %d segments, err %v", n, err)
	}
	fi, _ := s.FirstIndex()
	if fi > 30 || fi <= 2 {
		t.Fatalf("first index after compacting below 30 = %d", fi)
	}
	if _, err := s.Entries(1, 5, 0); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("reading compacted entries: err = %v, want ErrCompacted", err)
	}
	s.Close()
	s2 := openTest(t, dir, Options{})
	hs, _, _ := s2.InitialState()
	if hs.Commit != 40 {
		t.Fatalf("commit after reopen = %d, want it raised to the snapshot index 40", hs.Commit)
	}
	got, _ := s2.Snapshot()
	if string(got.Data) != "state" || got.Metadata.Index != 40 {
		t.Fatalf("reopened snapshot = %v", got)
	}
	if li, _ := s2.LastIndex(); li != 50 {
		t.Fatalf("log lost entries above the snapshot: last index %d, want 50", li)
	}
}

func TestApplySnapshotReplacesLogEvenAcrossACrash(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "g")
	s := bootstrapped(t, dir, Options{})
	s.Append([]pb.Entry{entry(2, 1, "a"), entry(3, 1, "b")})
	s.Sync()
	// Simulate a crash after the leader's snapshot file was saved but before
	// the log was reset: the install marker and the snapshot are written.
	snap := pb.Snapshot{Data: []byte("leader"), Metadata: pb.SnapshotMetadata{
		Index: 100, Term: 4, ConfState: pb.ConfState{Voters: []uint64{1, 2, 3}}}}
	if err := s.writeInstall(snap.Metadata); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := openTest(t, dir, Options{})
	if fi, _ := s2.FirstIndex(); fi != 101 {
		t.Fatalf("first index = %d, want 101 (log reset to the snapshot)", fi)
	}
	if term, _ := s2.Term(100); term != 4 {
		t.Fatalf("Term(100) = %d, want 4", term)
	}
	if err := s2.Append([]pb.Entry{entry(101, 4, "next")}); err != nil {
		t.Fatalf("append after snapshot: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, installFile)); !os.IsNotExist(err) {
		t.Fatalf("the install marker is still there after the install was finished: %v", err)
	}
}

func TestDamagedFilesAreReportedByName(t *testing.T) {
	for _, name := range []string{snapshotFile, hardStateFile} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "g")
			s := bootstrapped(t, dir, Options{})
			s.Close()
			path := filepath.Join(dir, name)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-1] ^= 0xff
			os.WriteFile(path, b, 0o644)
			if name == hardStateFile {
				// The hardstate file is read only when the WAL holds
				// no state for the group, as when it lost its files:
				// otherwise the WAL's state, newer, stands for it.
				if err := os.RemoveAll(walDirOf(dir)); err != nil {
					t.Fatal(err)
				}
			}
			_, err = openStore(t, dir, Options{})
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "herald repair") {
				t.Fatalf("open with damaged %s: err = %v, want one naming the file and what to do", name, err)
			}
		})
	}
}

// A log that lost the entries a snapshot covers is reported, not reset:
// only an interrupted install, which leaves its marker, may reset it.
// The log loses whole segments, which its recovery cannot tell from a
// log that ends there: a torn tail would be a cut, which the WAL's
// replay checks first (TestWALRefusesACutItDoesNotCover).
func TestLostLogIsReportedNotReset(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "g")
	s := bootstrapped(t, dir, Options{SegmentSize: 256})
	for i := uint64(2); i <= 50; i++ {
		if err := s.Append([]pb.Entry{entry(i, 1, "e")}); err != nil {
			t.Fatal(err)
		}
	}
	s.Sync()
	snap := pb.Snapshot{Data: []byte("state"), Metadata: pb.SnapshotMetadata{
		Index: 40, Term: 1, ConfState: pb.ConfState{Voters: []uint64{1}}}}
	if err := s.SaveSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// The log loses its tail, the snapshot's index included: the
	// segments from the one holding index 30 on.
	logPath := filepath.Join(dir, LogDir)
	all, _ := filepath.Glob(filepath.Join(logPath, "*.seg"))
	var segs []string
	for i, seg := range all {
		if i+1 < len(all) && filepath.Base(all[i+1]) <= fmt.Sprintf("%016x.seg", 30) {
			segs = append(segs, seg)
			continue
		}
		if err := os.Remove(seg); err != nil {
			t.Fatal(err)
		}
	}
	if len(segs) == 0 {
		t.Fatalf("segments %v: want some to stay", all)
	}
	_, err := openStore(t, dir, Options{SegmentSize: 256})
	if err == nil || !strings.Contains(err.Error(), "snapshot at index 40") || !strings.Contains(err.Error(), "herald repair") {
		t.Fatalf("open with a log that lost the snapshot's entries: %v, want an error saying so", err)
	}
	if segs2, _ := filepath.Glob(filepath.Join(logPath, "*.seg")); len(segs2) != len(segs) {
		t.Fatalf("the failed open changed the log: %v became %v", segs, segs2)
	}
}

// A background save of an older snapshot never replaces a newer one.
func TestSaveSnapshotNeverMovesBackwards(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "g")
	s := bootstrapped(t, dir, Options{})
	newer := pb.Snapshot{Data: []byte("newer"), Metadata: pb.SnapshotMetadata{
		Index: 100, Term: 3, ConfState: pb.ConfState{Voters: []uint64{1}}}}
	if err := s.ApplySnapshot(newer); err != nil {
		t.Fatal(err)
	}
	older := pb.Snapshot{Data: []byte("older"), Metadata: pb.SnapshotMetadata{
		Index: 60, Term: 2, ConfState: pb.ConfState{Voters: []uint64{1}}}}
	if err := s.SaveSnapshot(older); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Snapshot(); string(got.Data) != "newer" {
		t.Fatalf("in memory the snapshot went back to %q", got.Data)
	}
	s.Close()
	s2 := openTest(t, dir, Options{})
	if got, _ := s2.Snapshot(); string(got.Data) != "newer" || got.Metadata.Index != 100 {
		t.Fatalf("on disk the snapshot went back to %q at %d", got.Data, got.Metadata.Index)
	}
}

// Storage opens only with the node's WAL, and says so otherwise.
func TestOpenRequiresAWAL(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "g")
	_, err := Open(dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "Options.WAL") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("open without a WAL: %v, want an error naming the directory and Options.WAL", err)
	}
	if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
		t.Fatalf("open without a WAL created %s: %v", dir, serr)
	}
}
