package raftstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

func entry(index, term uint64, data string) *pb.Entry {
	return &pb.Entry{Index: new(index), Term: new(term), Type: pb.EntryNormal.Enum(), Data: []byte(data)}
}

func openTest(t *testing.T, dir string, opts Options) *Storage {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func bootstrapped(t *testing.T, dir string, opts Options) *Storage {
	t.Helper()
	s := openTest(t, dir, opts)
	if !s.IsEmpty() {
		t.Fatal("new storage is not empty")
	}
	if err := s.Bootstrap(&pb.ConfState{Voters: []uint64{1}}); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBootstrapAndInitialState(t *testing.T) {
	dir := t.TempDir()
	s := bootstrapped(t, dir, Options{})
	if s.IsEmpty() {
		t.Fatal("bootstrapped storage reports empty")
	}
	if err := s.Bootstrap(&pb.ConfState{Voters: []uint64{1}}); err == nil {
		t.Fatal("bootstrapping twice succeeded")
	}
	hs, cs, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if hs.GetTerm() != 1 || hs.GetCommit() != 1 || len(cs.Voters) != 1 || cs.Voters[0] != 1 {
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
	dir := t.TempDir()
	// A tiny cache forces reads of older entries to go to the log files.
	s := bootstrapped(t, dir, Options{CacheBytes: 10, SegmentSize: 256})
	var ents []*pb.Entry
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
		if e.GetIndex() != uint64(i+2) || string(e.Data) != strings.Repeat("x", i+2) || e.GetTerm() != 2 {
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
	if err := s.Append([]*pb.Entry{entry(30, 3, "new")}); err != nil {
		t.Fatal(err)
	}
	if li, _ := s.LastIndex(); li != 30 {
		t.Fatalf("last index after overwrite = %d, want 30", li)
	}
	if term, _ := s.Term(30); term != 3 {
		t.Fatalf("term of overwritten entry = %d, want 3", term)
	}
}

func TestHardStateWrittenOnlyOnTermOrVoteChange(t *testing.T) {
	dir := t.TempDir()
	s := bootstrapped(t, dir, Options{})
	path := filepath.Join(dir, hardStateFile)
	before, _ := os.Stat(path)
	if err := s.SetHardState(&pb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}, false); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if !before.ModTime().Equal(after.ModTime()) || !os.SameFile(before, after) {
		t.Fatal("hardstate file rewritten although only the commit index could have changed")
	}
	if err := s.Append([]*pb.Entry{entry(2, 5, "a")}); err != nil {
		t.Fatal(err)
	}
	s.Sync()
	if err := s.SetHardState(&pb.HardState{Term: new(uint64(5)), Vote: new(uint64(1)), Commit: new(uint64(2))}, false); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := openTest(t, dir, Options{})
	hs, _, _ := s2.InitialState()
	if hs.GetTerm() != 5 || hs.GetVote() != 1 || hs.GetCommit() != 2 {
		t.Fatalf("reopened hard state = %v, want term 5 vote 1 commit 2", hs)
	}
}

func TestSnapshotRaisesCommitAndSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s := bootstrapped(t, dir, Options{SegmentSize: 256})
	var ents []*pb.Entry
	for i := uint64(2); i <= 50; i++ {
		ents = append(ents, entry(i, 1, "entry-data-entry-data"))
	}
	s.Append(ents)
	s.Sync()
	snap := &pb.Snapshot{Data: []byte("state"), Metadata: &pb.SnapshotMetadata{
		Index: new(uint64(40)), Term: new(uint64(1)), ConfState: &pb.ConfState{Voters: []uint64{1}}}}
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
	if hs.GetCommit() != 40 {
		t.Fatalf("commit after reopen = %d, want it raised to the snapshot index 40", hs.GetCommit())
	}
	got, _ := s2.Snapshot()
	if string(got.Data) != "state" || got.GetMetadata().GetIndex() != 40 {
		t.Fatalf("reopened snapshot = %v", got)
	}
	if li, _ := s2.LastIndex(); li != 50 {
		t.Fatalf("log lost entries above the snapshot: last index %d, want 50", li)
	}
}

func TestApplySnapshotReplacesLogEvenAcrossACrash(t *testing.T) {
	dir := t.TempDir()
	s := bootstrapped(t, dir, Options{})
	s.Append([]*pb.Entry{entry(2, 1, "a"), entry(3, 1, "b")})
	s.Sync()
	// Simulate a crash after the leader's snapshot file was saved but before
	// the log was reset: the install marker and the snapshot are written.
	snap := &pb.Snapshot{Data: []byte("leader"), Metadata: &pb.SnapshotMetadata{
		Index: new(uint64(100)), Term: new(uint64(4)), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}
	if err := s.writeInstall(snap.GetMetadata()); err != nil {
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
	if err := s2.Append([]*pb.Entry{entry(101, 4, "next")}); err != nil {
		t.Fatalf("append after snapshot: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, installFile)); !os.IsNotExist(err) {
		t.Fatalf("the install marker is still there after the install was finished: %v", err)
	}
}

func TestDamagedFilesAreReportedByName(t *testing.T) {
	for _, name := range []string{snapshotFile, hardStateFile} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := bootstrapped(t, dir, Options{})
			s.Close()
			path := filepath.Join(dir, name)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-1] ^= 0xff
			os.WriteFile(path, b, 0o644)
			_, err = Open(dir, Options{})
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "herald repair") {
				t.Fatalf("open with damaged %s: err = %v, want one naming the file and what to do", name, err)
			}
		})
	}
}

// A log that lost the entries a snapshot covers is reported, not reset:
// only an interrupted install, which leaves its marker, may reset it.
func TestLostLogIsReportedNotReset(t *testing.T) {
	dir := t.TempDir()
	s := bootstrapped(t, dir, Options{})
	for i := uint64(2); i <= 50; i++ {
		if err := s.Append([]*pb.Entry{entry(i, 1, "e")}); err != nil {
			t.Fatal(err)
		}
	}
	s.Sync()
	snap := &pb.Snapshot{Data: []byte("state"), Metadata: &pb.SnapshotMetadata{
		Index: new(uint64(40)), Term: new(uint64(1)), ConfState: &pb.ConfState{Voters: []uint64{1}}}}
	if err := s.SaveSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// The log loses its tail, the snapshot's index included.
	logPath := filepath.Join(dir, LogDir)
	segs, _ := filepath.Glob(filepath.Join(logPath, "*.seg"))
	for _, seg := range segs {
		os.Truncate(seg, 32+200)
	}
	_, err := Open(dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "snapshot at index 40") || !strings.Contains(err.Error(), "herald repair") {
		t.Fatalf("open with a log that lost the snapshot's entries: %v, want an error saying so", err)
	}
	if segs2, _ := filepath.Glob(filepath.Join(logPath, "*.seg")); len(segs2) != len(segs) {
		t.Fatalf("the failed open changed the log: %v became %v", segs, segs2)
	}
}

// A background save of an older snapshot never replaces a newer one.
func TestSaveSnapshotNeverMovesBackwards(t *testing.T) {
	dir := t.TempDir()
	s := bootstrapped(t, dir, Options{})
	newer := &pb.Snapshot{Data: []byte("newer"), Metadata: &pb.SnapshotMetadata{
		Index: new(uint64(100)), Term: new(uint64(3)), ConfState: &pb.ConfState{Voters: []uint64{1}}}}
	if err := s.ApplySnapshot(newer); err != nil {
		t.Fatal(err)
	}
	older := &pb.Snapshot{Data: []byte("older"), Metadata: &pb.SnapshotMetadata{
		Index: new(uint64(60)), Term: new(uint64(2)), ConfState: &pb.ConfState{Voters: []uint64{1}}}}
	if err := s.SaveSnapshot(older); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Snapshot(); string(got.Data) != "newer" {
		t.Fatalf("in memory the snapshot went back to %q", got.Data)
	}
	s.Close()
	s2 := openTest(t, dir, Options{})
	if got, _ := s2.Snapshot(); string(got.Data) != "newer" || got.GetMetadata().GetIndex() != 100 {
		t.Fatalf("on disk the snapshot went back to %q at %d", got.Data, got.GetMetadata().GetIndex())
	}
}
