package raftstore

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"herald/internal/vfs"
)

// fileHardState reads the hardstate file of group g on fs.
func fileHardState(t *testing.T, fs vfs.FS, n *walNode, g uint64) *pb.HardState {
	t.Helper()
	data, err := vfs.ReadFramed(fs, filepath.Join(n.dir(g), hardStateFile), fileMagic)
	if err != nil || data == nil {
		t.Fatalf("read the hardstate file of group %d: %v", g, err)
	}
	hs := &pb.HardState{}
	if err := proto.Unmarshal(data, hs); err != nil {
		t.Fatal(err)
	}
	return hs
}

func hardState(term, vote, commit uint64) *pb.HardState {
	return &pb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
}

func wantHardState(t *testing.T, s *Storage, term, vote, commit uint64) {
	t.Helper()
	hs, _, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if hs.GetTerm() != term || hs.GetVote() != vote || hs.GetCommit() != commit {
		t.Fatalf("hard state term %d vote %d commit %d, want term %d vote %d commit %d",
			hs.GetTerm(), hs.GetVote(), hs.GetCommit(), term, vote, commit)
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
	files := n2.wal.Files()
	if err := n2.wal.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if files < 3 || n2.wal.Files() >= files {
		t.Fatalf("WAL files %d before the checkpoint and %d after: want several, then fewer", files, n2.wal.Files())
	}
	n3, err := openWALNode(t, crashed.CrashClone(nil), "boot-3", 1, 2)
	if err != nil {
		t.Fatalf("reopen after a checkpoint and a power loss: %v", err)
	}
	wantHardState(t, n3.groups[1], 5, 1, 1)
	if hs := fileHardState(t, n3.fs, n3, 1); hs.GetTerm() != 1 {
		t.Fatalf("the hardstate file holds term %d: the group's file was rewritten, want the state kept in the WAL", hs.GetTerm())
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
