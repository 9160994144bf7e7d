package raftstore

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/vfs"
)

// fileHardState reads the hardstate file of group g on fs.
func fileHardState(t *testing.T, fs vfs.FS, n *walNode, g uint64) pb.HardState {
	t.Helper()
	data, err := vfs.ReadFramed(fs, filepath.Join(n.dir(g), hardStateFile), fileMagic)
	if err != nil || data == nil {
		t.Fatalf("read the hardstate file of group %d: %v", g, err)
	}
	var hs pb.HardState
	if err := hs.Unmarshal(data); err != nil {
		t.Fatal(err)
	}
	return hs
}

func hardState(term, vote, commit uint64) pb.HardState {
	return pb.HardState{Term: term, Vote: vote, Commit: commit}
}

func wantHardState(t *testing.T, s *Storage, term, vote, commit uint64) {
	t.Helper()
	hs, _, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if hs.Term != term || hs.Vote != vote || hs.Commit != commit {
		t.Fatalf("hard state term %d vote %d commit %d, want term %d vote %d commit %d",
			hs.Term, hs.Vote, hs.Commit, term, vote, commit)
	}
}

// Under the WAL an election's hard state is a WAL record, not a file
// rewritten: it survives a power loss once the WAL is synced, with the
// entries before it; one not synced yet is lost with them; and the WAL
// keeps it through checkpoints that delete the files it was in, power
// losses and a clean close, with the group's file never rewritten.
func TestWALHardStateSurvivesPowerLoss(t *testing.T) {
	fs := vfs.NewMem()
	n := newWALGroups(t, fs, 1, 2)
	s := n.groups[1]
	if err := s.SetHardState(hardState(5, 1, 1), false); err != nil {
		t.Fatal(err)
	}
	appendEach(t, s, 2, 4, func(i uint64) string { return "e" })
	if err := s.SetHardState(hardState(5, 1, 4), false); err != nil { // a commit alone: memory only
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	// Not synced: lost at the power loss, with nothing else lost.
	if err := s.SetHardState(hardState(6, 2, 4), false); err != nil {
		t.Fatal(err)
	}

	crashed := fs.CrashClone(nil)
	n2, err := openWALNode(t, crashed, "boot-2", 1, 2)
	if err != nil {
		t.Fatalf("reopen after a power loss: %v", err)
	}
	wantHardState(t, n2.groups[1], 5, 1, 1)
	wantHardState(t, n2.groups[2], 1, 0, 1)
	if last, _ := n2.groups[1].LastIndex(); last != 4 {
		t.Fatalf("last index %d after the power loss, want 4", last)
	}

	// Group 2 fills WAL files, which checkpoints delete.
	appendEach(t, n2.groups[2], 2, 300, func(i uint64) string { return fmt.Sprintf("g2-%d-%s", i, strings.Repeat("x", 30)) })
	if err := n2.groups[2].Sync(); err != nil {
		t.Fatal(err)
	}
	if err := n2.wal.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// The first WAL file, which held the state, is gone.
	names, err := crashed.ReadDir("/data/wal")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, "0000000000000001.seg") {
		t.Fatalf("WAL files after checkpoints: %v; want the first one deleted", names)
	}
	n3, err := openWALNode(t, crashed.CrashClone(nil), "boot-3", 1, 2)
	if err != nil {
		t.Fatalf("reopen after a checkpoint and a power loss: %v", err)
	}
	wantHardState(t, n3.groups[1], 5, 1, 1)
	if hs := fileHardState(t, n3.fs, n3, 1); hs.Term != 1 {
		t.Fatalf("the hardstate file holds term %d: the group's file was rewritten, want the state kept in the WAL", hs.Term)
	}
	if err := n3.groups[1].SetHardState(hardState(7, 1, 4), false); err != nil {
		t.Fatal(err)
	}
	n3.close() // a clean close
	n4, err := openWALNode(t, n3.fs, "boot-3", 1, 2)
	if err != nil {
		t.Fatalf("reopen after a clean close: %v", err)
	}
	defer n4.close()
	wantHardState(t, n4.groups[1], 7, 1, 4)
}

// A hard state in the WAL for a group whose directory was replaced by an
// empty one (a damaged replica moved aside to be rebuilt) belongs to the
// old files and is not loaded into the new.
func TestWALHardStateOfReplacedDirectoryIsIgnored(t *testing.T) {
	fs := vfs.NewMem()
	n := newWALGroups(t, fs, 1)
	if err := n.groups[1].SetHardState(hardState(5, 1, 1), false); err != nil {
		t.Fatal(err)
	}
	appendEach(t, n.groups[1], 2, 4, func(i uint64) string { return "e" })
	if err := n.groups[1].Sync(); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(nil)
	if err := crashed.RemoveAll(n.dir(1)); err != nil {
		t.Fatal(err)
	}
	n2, err := openWALNode(t, crashed, "boot-2", 1)
	if err != nil {
		t.Fatalf("open a new directory with the WAL holding the old one's state: %v", err)
	}
	defer n2.close()
	wantHardState(t, n2.groups[1], 0, 0, 0)
	if !n2.groups[1].IsEmpty() {
		t.Fatal("the new directory is not empty")
	}
}

// After a process crash the group's log still holds what the WAL holds
// for it, once written behind: reopening writes and syncs nothing. After
// a power loss that took the log's unsynced tail, the WAL's entries are
// written back.
func TestWALReplaySkipsEntriesTheLogHolds(t *testing.T) {
	fs := vfs.NewMem()
	n, err := openWALNodeWith(t, fs, "boot-1", 1, 1) // written behind at every call
	if err != nil {
		t.Fatal(err)
	}
	if err := n.groups[1].Bootstrap(pb.ConfState{Voters: []uint64{1}}); err != nil {
		t.Fatal(err)
	}
	appendEach(t, n.groups[1], 2, 20, func(i uint64) string { return fmt.Sprint("e", i) })
	if err := n.groups[1].Sync(); err != nil {
		t.Fatal(err)
	}
	if err := n.groups[1].WriteBehind(); err != nil {
		t.Fatal(err)
	}

	killed, err := openWALNode(t, fs.Clone(), "boot-1", 1)
	if err != nil {
		t.Fatalf("reopen after a process crash: %v", err)
	}
	if got := killed.groups[1].Log().SyncCount(); got != 0 {
		t.Fatalf("reopening after a process crash made %d fdatasyncs of the group's log, want none", got)
	}
	if last, _ := killed.groups[1].LastIndex(); last != 20 {
		t.Fatalf("last index %d after a process crash, want 20", last)
	}
	killed.close()

	lost, err := openWALNode(t, fs.CrashClone(nil), "boot-2", 1)
	if err != nil {
		t.Fatalf("reopen after a power loss: %v", err)
	}
	defer lost.close()
	if got := lost.groups[1].Log().SyncCount(); got == 0 {
		t.Fatal("the entries the power loss took from the group's log were not written back and synced")
	}
	ents, err := lost.groups[1].Entries(2, 21, 0)
	if err != nil || len(ents) != 19 || string(ents[18].Data) != "e20" {
		t.Fatalf("entries after a power loss: %d, %v", len(ents), err)
	}
}

// A group's log records nothing in its state file when it is first
// written after a clean stop: the WAL's state stands for it. A power
// loss that tears the writes of that run is still never taken for a
// clean close: the torn tails are cut and the WAL brings them back.
func TestWALLogsWrittenAfterACleanCloseSurviveATornPowerLoss(t *testing.T) {
	for trial := range 20 {
		seed := uint64(trial)
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			fs := vfs.NewMem()
			newWALGroups(t, fs, 1, 2).close()
			statePath := filepath.Join("/data/shards/1", LogDir, "state")
			before, err := vfs.ReadFile(fs, statePath)
			if err != nil {
				t.Fatal(err)
			}
			n, err := openWALNode(t, fs, "boot-2", 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			const total = 150
			for i := range total {
				for _, g := range []uint64{1, 2} {
					if err := n.groups[g].Append([]pb.Entry{entry(uint64(i+2), 1, fmt.Sprintf("g%d-%d", g, i))}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := n.wal.Sync(); err != nil {
				t.Fatal(err)
			}
			if after, err := vfs.ReadFile(fs, statePath); err != nil || string(after) != string(before) {
				t.Fatalf("the group's log rewrote its state file when first written (%v)", err)
			}
			crashed := fs.CrashClone(rand.New(rand.NewPCG(seed, 3)))
			n2, err := openWALNode(t, crashed, "boot-3", 1, 2)
			if err != nil {
				t.Fatalf("reopen after a torn power loss: %v", err)
			}
			defer n2.close()
			for _, g := range []uint64{1, 2} {
				checkEntries(t, n2.groups[g], g, total)
			}
		})
	}
}
