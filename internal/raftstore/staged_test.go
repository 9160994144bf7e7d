package raftstore

import (
	"fmt"
	"syscall"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/vfs"
)

// oldLog is what the group holds before the install: the bootstrap
// snapshot and entries 2..10 of term 1.
func oldLog(t *testing.T, fs *vfs.MemFS) *testStore {
	t.Helper()
	s := bootstrapped(t, "/g", Options{FS: fs, SegmentSize: 512})
	var ents []pb.Entry
	for i := uint64(2); i <= 10; i++ {
		ents = append(ents, entry(i, 1, fmt.Sprint("old-", i)))
	}
	if err := s.Append(ents); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	return s
}

// leaderSnapshot is a snapshot at index 60, term 2, whose state needs the
// entries from 50 on.
var leaderSnapshot = pb.Snapshot{Data: []byte("state at 60"), Metadata: pb.SnapshotMetadata{
	Index: 60, Term: 2, ConfState: pb.ConfState{Voters: []uint64{1}}}}

func stageAndInstall(s *Storage) error {
	sl, err := s.StageLog(50, 2)
	if err != nil {
		return err
	}
	for i := uint64(50); i <= 60; i += 4 {
		var ents []pb.Entry
		for j := i; j < min(i+4, 61); j++ {
			ents = append(ents, entry(j, 2, fmt.Sprint("new-", j)))
		}
		if err := sl.Append(ents); err != nil {
			return err
		}
	}
	return s.InstallSnapshotWithLog(leaderSnapshot, sl)
}

// checkOldOrNew says which whole state the storage holds, or fails.
func checkOldOrNew(t *testing.T, s *testStore) string {
	t.Helper()
	snap, _ := s.Snapshot()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	prefix, lo, hi := "old-", uint64(2), uint64(10)
	state := "old"
	if snap.Metadata.Index == 60 {
		prefix, lo, hi, state = "new-", 50, 60, "new"
		if string(snap.Data) != "state at 60" {
			t.Fatalf("snapshot data = %q", snap.Data)
		}
	} else if snap.Metadata.Index != 1 {
		t.Fatalf("snapshot index = %d, want 1 (before the install) or 60", snap.Metadata.Index)
	}
	if first != lo || last != hi {
		t.Fatalf("%s snapshot with log %d..%d, want %d..%d", state, first, last, lo, hi)
	}
	ents, err := s.Entries(lo, hi+1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if want := fmt.Sprint(prefix, e.Index); string(e.Data) != want {
			t.Fatalf("entry %d = %q, want %q", e.Index, e.Data, want)
		}
	}
	return state
}

func TestInstallSnapshotWithLogReplacesLogAndSurvivesRestart(t *testing.T) {
	fs := vfs.NewMem()
	s := oldLog(t, fs)
	if err := stageAndInstall(s.Storage); err != nil {
		t.Fatal(err)
	}
	if got := checkOldOrNew(t, s); got != "new" {
		t.Fatalf("after the install the storage holds the %s state", got)
	}
	hs, _, _ := s.InitialState()
	if hs.Commit < 60 {
		t.Fatalf("commit = %d after installing snapshot 60", hs.Commit)
	}
	reopened := openTest(t, "/g", Options{FS: fs.CrashClone(nil), SegmentSize: 512})
	if got := checkOldOrNew(t, reopened); got != "new" {
		t.Fatalf("after a power loss the storage holds the %s state", got)
	}
	if err := reopened.Append([]pb.Entry{entry(61, 2, "next")}); err != nil {
		t.Fatalf("append after the install: %v", err)
	}
}

func TestInstallSnapshotWithLogRefusesALogThatDoesNotEndAtTheSnapshot(t *testing.T) {
	fs := vfs.NewMem()
	s := oldLog(t, fs)
	sl, err := s.StageLog(50, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := sl.Append([]pb.Entry{entry(50, 2, "new-50")}); err != nil {
		t.Fatal(err)
	}
	if err := s.InstallSnapshotWithLog(leaderSnapshot, sl); err == nil {
		t.Fatal("installed snapshot 60 with a staged log ending at 50")
	}
	if got := checkOldOrNew(t, s); got != "old" {
		t.Fatalf("a refused install left the %s state", got)
	}
}

// TestStagedInstallIsAtomicAcrossPowerLoss fails each file system
// operation of staging and installing in turn, then loses power: the
// reopened storage holds either the whole old state or the whole new one.
func TestStagedInstallIsAtomicAcrossPowerLoss(t *testing.T) {
	ops := 0
	countFS := vfs.NewMem()
	s := oldLog(t, countFS)
	countFS.SetInjector(func(vfs.Op) error { ops++; return nil })
	if err := stageAndInstall(s.Storage); err != nil {
		t.Fatal(err)
	}
	countFS.SetInjector(nil)

	seen := map[string]int{}
	for k := 1; k <= ops; k++ {
		fs := vfs.NewMem()
		s := oldLog(t, fs)
		n := 0
		fs.SetInjector(func(op vfs.Op) error {
			if n++; n == k {
				return vfs.InjectedError(op, syscall.EIO)
			}
			return nil
		})
		err := stageAndInstall(s.Storage)
		crashed := fs.CrashClone(nil)
		fs.SetInjector(nil)
		s.Close()
		reopened, oerr := openStore(t, "/g", Options{FS: crashed, SegmentSize: 512})
		if oerr != nil {
			t.Fatalf("failing operation %d of %d, then a power loss: reopen: %v", k, ops, oerr)
		}
		state := checkOldOrNew(t, reopened)
		reopened.Close()
		if err == nil && state != "new" {
			t.Fatalf("failing operation %d of %d: the install succeeded, and a power loss lost it", k, ops)
		}
		seen[state]++
	}
	if seen["old"] == 0 || seen["new"] == 0 {
		t.Fatalf("states seen %v: want both", seen)
	}
	t.Logf("states after each of %d operations failed and a power loss: %v", ops, seen)
}
