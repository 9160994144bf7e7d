package raftstore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/vfs"
)

// snapshotAt is a snapshot at index (term 1) whose data names the index.
func snapshotAt(index uint64) pb.Snapshot {
	return pb.Snapshot{Data: fmt.Appendf(nil, "state at %d", index), Metadata: pb.SnapshotMetadata{
		Index: index, Term: 1, ConfState: pb.ConfState{Voters: []uint64{1}}}}
}

// appendSynced appends entries from..to (term 1) to the group and makes
// them durable in the node's WAL.
func appendSynced(t *testing.T, n *walNode, group, from, to uint64) {
	t.Helper()
	var ents []pb.Entry
	for i := from; i <= to; i++ {
		ents = append(ents, entry(i, 1, fmt.Sprintf("entry %d", i)))
	}
	if err := n.groups[group].Append(ents); err != nil {
		t.Fatal(err)
	}
	if err := n.wal.Sync(); err != nil {
		t.Fatal(err)
	}
}

// checkReopenedSnapshot checks that s holds the snapshot saved at one of
// the indexes want, whole, with the log continuing from it and the
// commit index at it or above; it returns the index.
func checkReopenedSnapshot(t *testing.T, s *Storage, want ...uint64) uint64 {
	t.Helper()
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	idx := snap.Metadata.Index
	ok := false
	for _, w := range want {
		ok = ok || idx == w
	}
	if !ok {
		t.Fatalf("reopened with the snapshot at %d, want one of %v", idx, want)
	}
	if got := string(snap.Data); got != fmt.Sprintf("state at %d", idx) {
		t.Fatalf("the snapshot at %d holds %q", idx, got)
	}
	if term, err := s.Term(idx); err != nil || term != 1 {
		t.Fatalf("the log does not continue from the snapshot at %d: term %d, %v", idx, term, err)
	}
	hs, _, err := s.InitialState()
	if err != nil || hs.Commit < idx {
		t.Fatalf("commit index %d below the snapshot at %d (%v)", hs.Commit, idx, err)
	}
	return idx
}

// A lazy snapshot is the one a group reopens with after a stop or a
// process crash, which lose nothing the kernel was given.
func TestLazySnapshotSurvivesAProcessCrash(t *testing.T) {
	fs := vfs.NewMem()
	n := newWALGroups(t, fs, 1)
	appendSynced(t, n, 1, 2, 60)
	if err := n.groups[1].SaveSnapshot(snapshotAt(20)); err != nil {
		t.Fatal(err)
	}
	if err := n.groups[1].SaveSnapshotLazily(snapshotAt(40)); err != nil {
		t.Fatal(err)
	}
	if got, _ := n.groups[1].Snapshot(); got.Metadata.Index != 40 {
		t.Fatalf("in memory the snapshot is at %d after a lazy save at 40", got.Metadata.Index)
	}
	n2, err := openWALNode(t, fs.Clone(), "boot-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.close()
	checkReopenedSnapshot(t, n2.groups[1], 40)
	if li, _ := n2.groups[1].LastIndex(); li != 60 {
		t.Fatalf("last index %d after reopening, want 60", li)
	}
}

// A power loss may lose a lazy snapshot or tear it, written over an older
// one in place: the group then reopens with the snapshot saved durably,
// or with a lazy one left whole that is newer, and never reports damage.
// A lazy snapshot older than the durable one is never taken.
func TestLazySnapshotTornByAPowerLossFallsBack(t *testing.T) {
	seen := map[uint64]int{}
	for trial := range 64 {
		fs := vfs.NewMem()
		n := newWALGroups(t, fs, 1)
		appendSynced(t, n, 1, 2, 90)
		s := n.groups[1]
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		// An old lazy snapshot the kernel wrote back, below the durable one
		// saved after it (whose directory sync makes the lazy file's name
		// durable too).
		must(s.SaveSnapshotLazily(snapshotAt(30)))
		f, err := fs.OpenFile(filepath.Join(s.dir, lazySnapshotFile), os.O_RDWR, 0)
		must(err)
		must(f.Sync())
		must(f.Close())
		must(s.SaveSnapshot(snapshotAt(50)))
		// Lazy snapshots over it, the last of them cut short by the power
		// loss.
		must(s.SaveSnapshotLazily(snapshotAt(70)))
		must(s.SaveSnapshotLazily(snapshotAt(80)))
		crashed := fs.CrashClone(rand.New(rand.NewPCG(uint64(trial), 11)))
		n2, err := openWALNode(t, crashed, "boot-2", 1)
		if err != nil {
			t.Fatalf("trial %d: reopen after a power loss: %v", trial, err)
		}
		seen[checkReopenedSnapshot(t, n2.groups[1], 50, 70, 80)]++
		if li, _ := n2.groups[1].LastIndex(); li != 90 {
			t.Fatalf("trial %d: last index %d after the power loss, want 90", trial, li)
		}
		n2.close()
		n.close()
	}
	if seen[50] == 0 || seen[80] == 0 {
		t.Fatalf("reopened snapshots by index over the trials: %v; want both the durable one (50) and the whole lazy one (80) seen", seen)
	}
}
