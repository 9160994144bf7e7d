package raftstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/vfs"
	"herald/internal/wal"
)

// walNode is a node's WAL and the storages of its groups, over one
// in-memory file system that can be crashed.
type walNode struct {
	t      *testing.T
	fs     *vfs.MemFS
	boot   string
	wal    *wal.WAL
	groups map[uint64]*Storage
}

func openWALNode(t *testing.T, fs *vfs.MemFS, boot string, groups ...uint64) (*walNode, error) {
	t.Helper()
	return openWALNodeWith(t, fs, boot, 0, groups...)
}

// openWALNodeWith is openWALNode with the groups' Options.WriteBehind.
func openWALNodeWith(t *testing.T, fs *vfs.MemFS, boot string, writeBehind int64, groups ...uint64) (*walNode, error) {
	t.Helper()
	w, err := wal.Open("/data/wal", wal.Options{FS: fs, BootID: boot, SegmentSize: 4096})
	if err != nil {
		return nil, err
	}
	n := &walNode{t: t, fs: fs, boot: boot, wal: w, groups: make(map[uint64]*Storage)}
	for _, g := range groups {
		s, err := Open(n.dir(g), Options{FS: fs, BootID: boot, SegmentSize: 2048, WAL: w, Group: g, WriteBehind: writeBehind})
		if err != nil {
			w.Close()
			return nil, err
		}
		n.groups[g] = s
	}
	w.Booted()
	return n, nil
}

// newWALGroups opens a node on fs with the given groups, each bootstrapped.
func newWALGroups(t *testing.T, fs *vfs.MemFS, groups ...uint64) *walNode {
	t.Helper()
	n, err := openWALNode(t, fs, "boot-1", groups...)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if err := n.groups[g].Bootstrap(pb.ConfState{Voters: []uint64{1}}); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// appendEach appends entries from..to of term 1 one at a time, with data(i).
func appendEach(t *testing.T, s *Storage, from, to uint64, data func(i uint64) string) {
	t.Helper()
	for i := from; i <= to; i++ {
		if err := s.Append([]pb.Entry{entry(i, 1, data(i))}); err != nil {
			t.Fatal(err)
		}
	}
}

func (n *walNode) dir(g uint64) string { return fmt.Sprintf("/data/shards/%d", g) }

func (n *walNode) close() {
	for _, s := range n.groups {
		if err := s.Close(); err != nil {
			n.t.Fatal(err)
		}
	}
	if err := n.wal.Close(); err != nil {
		n.t.Fatal(err)
	}
}

// Entries appended by many groups and made durable by one WAL sync survive
// a power loss that keeps only what was synced, although no group synced
// its own log; a checkpoint lets the WAL drop its files and the entries
// stay.
func TestWALEntriesSurvivePowerLossWithoutGroupSyncs(t *testing.T) {
	groups := []uint64{1, 2, 3, 4, 5}
	fs := vfs.NewMem()
	n := newWALGroups(t, fs, groups...)
	syncs := n.wal.SyncCount()
	const perGroup = 200
	for i := range perGroup {
		for _, g := range groups {
			if err := n.groups[g].Append([]pb.Entry{entry(uint64(i+2), 1, fmt.Sprintf("g%d-%d", g, i))}); err != nil {
				t.Fatal(err)
			}
		}
		if i == perGroup/2 {
			// Half the entries reach the groups' own logs and leave the WAL.
			if err := n.wal.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := n.groups[1].Sync(); err != nil { // one group's Sync covers everyone's appends
		t.Fatal(err)
	}
	if n.wal.SyncCount() == syncs {
		t.Fatal("Sync did not sync the WAL")
	}
	crashed := fs.CrashClone(nil)

	n2, err := openWALNode(t, crashed, "boot-2", groups...)
	if err != nil {
		t.Fatalf("reopen after a power loss: %v", err)
	}
	defer n2.close()
	for _, g := range groups {
		checkEntries(t, n2.groups[g], g, perGroup)
	}
}

// Entries a group's log holds in memory, not yet written behind, come
// back from the WAL after a process crash and after a power loss; a
// checkpoint writes and syncs them into the log, so that the WAL need
// not hold them any more.
func TestWALBringsBackEntriesHeldInMemory(t *testing.T) {
	fs := vfs.NewMem()
	n := newWALGroups(t, fs, 1)
	empty := n.groups[1].Log().SizeBytes()
	const count = 50
	for i := range count {
		if err := n.groups[1].Append([]pb.Entry{entry(uint64(i+2), 1, fmt.Sprintf("g1-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.groups[1].Sync(); err != nil {
		t.Fatal(err)
	}
	if err := n.groups[1].WriteBehind(); err != nil {
		t.Fatal(err)
	}
	if got := n.groups[1].Log().SizeBytes(); got != empty {
		t.Fatalf("the group's log wrote %d bytes below its write-behind bound", got-empty)
	}
	for name, clone := range map[string]*vfs.MemFS{"process crash": fs.Clone(), "power loss": fs.CrashClone(nil)} {
		n2, err := openWALNode(t, clone, "boot-2", 1)
		if err != nil {
			t.Fatalf("reopen after a %s: %v", name, err)
		}
		checkEntries(t, n2.groups[1], 1, count)
		n2.close()
	}

	if err := n.wal.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if got := n.groups[1].Log().SizeBytes(); got == empty {
		t.Fatal("the checkpoint did not write the entries held in memory to the group's log")
	}
	crashed := fs.CrashClone(nil)
	walOnly, err := openWALNode(t, crashed.Clone(), "boot-2")
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range walOnly.wal.Recovered(1) {
		if len(op.Entries) > 0 {
			t.Fatalf("the WAL still held entries %d.. of the group after its checkpoint", op.Entries[0].Index)
		}
	}
	walOnly.close()
	n2, err := openWALNode(t, crashed, "boot-2", 1)
	if err != nil {
		t.Fatalf("reopen after a checkpoint and a power loss: %v", err)
	}
	defer n2.close()
	checkEntries(t, n2.groups[1], 1, count)
}

func checkEntries(t *testing.T, s *Storage, g uint64, want int) {
	t.Helper()
	if last, _ := s.LastIndex(); last != uint64(want+1) {
		t.Fatalf("group %d: last index %d after reopening, want %d", g, last, want+1)
	}
	ents, err := s.Entries(2, uint64(want+2), 0)
	if err != nil {
		t.Fatalf("group %d: %v", g, err)
	}
	for i, e := range ents {
		if got, exp := string(e.Data), fmt.Sprintf("g%d-%d", g, i); got != exp {
			t.Fatalf("group %d: entry %d holds %q, want %q", g, e.Index, got, exp)
		}
	}
}

// A torn power loss may keep any part of a group's unsynced log, valid
// records after torn ones included. Whatever it keeps, the group reopens
// with every entry the WAL made durable: nothing was damaged, so nothing
// may be refused.
func TestWALReplayRepairsTornGroupLogs(t *testing.T) {
	for trial := range 60 {
		seed := uint64(trial)
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			fs := vfs.NewMem()
			n := newWALGroups(t, fs, 1, 2)
			rng := rand.New(rand.NewPCG(seed, 7))
			total := 20 + rng.IntN(200)
			for i := range total {
				for _, g := range []uint64{1, 2} {
					if err := n.groups[g].Append([]pb.Entry{entry(uint64(i+2), 1, fmt.Sprintf("g%d-%d", g, i))}); err != nil {
						t.Fatal(err)
					}
				}
				if rng.IntN(50) == 0 {
					if err := n.wal.Checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := n.wal.Sync(); err != nil {
				t.Fatal(err)
			}
			crashed := fs.CrashClone(rand.New(rand.NewPCG(seed, 9)))
			n2, err := openWALNode(t, crashed, "boot-2", 1, 2)
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

// A snapshot that replaces a group's log writes a barrier: entries the
// group had before it, those beyond the snapshot's index included, never
// come back over the new log at replay.
func TestWALBarrierKeepsReplacedEntriesOut(t *testing.T) {
	fs := vfs.NewMem()
	n := newWALGroups(t, fs, 1)
	s := n.groups[1]
	appendEach(t, s, 2, 30, func(uint64) string { return "old" })
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	snap := pb.Snapshot{Metadata: pb.SnapshotMetadata{ConfState: pb.ConfState{Voters: []uint64{1}}, Index: 20, Term: 2}}
	if err := s.ApplySnapshot(snap); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(nil)

	n2, err := openWALNode(t, crashed, "boot-2", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.close()
	if last, _ := n2.groups[1].LastIndex(); last != 20 {
		t.Fatalf("last index %d after reopening, want the snapshot's 20: entries from before the snapshot came back", last)
	}
}

// A group log cut after a power loss below what the WAL holds lost entries
// that nothing can bring back: the group is refused with the log named.
func TestWALRefusesACutItDoesNotCover(t *testing.T) {
	fs := vfs.NewMem()
	n := newWALGroups(t, fs, 1)
	appendEach(t, n.groups[1], 2, 10, func(uint64) string { return strings.Repeat("x", 100) })
	// The checkpoint flushes the group's log and marks the WAL flushed:
	// the WAL no longer holds these entries for replay.
	if err := n.wal.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := n.wal.Sync(); err != nil {
		t.Fatal(err)
	}
	// The machine loses power, and a bit of the flushed log flips: the
	// log cannot tell this from a torn write, but the WAL holds nothing
	// from there on.
	crashed := fs.CrashClone(nil)
	segs, err := crashed.Files(filepath.Join(n.dir(1), LogDir))
	if err != nil {
		t.Fatal(err)
	}
	var seg string
	for name := range segs {
		if strings.HasSuffix(name, ".seg") && name > seg {
			seg = name
		}
	}
	if err := crashed.FlipBit(seg, (segs[seg]-50)*8); err != nil {
		t.Fatal(err)
	}
	n2, err := openWALNode(t, crashed, "boot-2", 1)
	if err == nil {
		n2.close()
		t.Fatal("a log whose flushed entries were cut reopened without an error")
	}
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), n.dir(1)) {
		t.Fatalf("error %v: want a damaged-files error naming %s", err, n.dir(1))
	}
}
