package raftstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	hlog "herald/internal/log"
)

// TestRepairNoteAcceptsALoss opens a group whose log lost committed
// entries: refused as damaged, until a repair note says to accept the
// loss; then the commit index and term agree with the log, durably, the
// note is gone, and the next open needs none.
func TestRepairNoteAcceptsALoss(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "g")
	s := bootstrapped(t, dir, Options{})
	for i := uint64(2); i <= 50; i++ {
		if err := s.Append([]pb.Entry{entry(i, 3, "e")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetHardState(pb.HardState{Term: 2, Vote: 1, Commit: 50}, true); err != nil {
		t.Fatal(err)
	}
	s.Sync()
	s.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, LogDir, "*.seg"))
	for _, seg := range segs {
		os.Truncate(seg, 32+200) // the log loses its tail
	}
	if _, err := openStore(t, dir, Options{}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("open of a log that lost committed entries: %v, want damaged", err)
	}

	if err := hlog.WriteRepaired(nil, filepath.Join(dir, LogDir), "test"); err != nil {
		t.Fatal(err)
	}
	s, err := openStore(t, dir, Options{})
	if err != nil {
		t.Fatalf("open after a repair: %v", err)
	}
	last, _ := s.LastIndex()
	hs, _, _ := s.InitialState()
	lost := strings.Join(s.Lost(), "; ")
	if hs.Commit != last || hs.Term != 3 || hs.Vote != 0 || !strings.Contains(lost, "commit index is lowered") || !strings.Contains(lost, "term is raised") {
		t.Fatalf("after a repair: last %d, hard state %v, lost %q", last, hs, lost)
	}
	s.Close()
	if note, _ := hlog.Repaired(nil, filepath.Join(dir, LogDir)); note != "" {
		t.Fatalf("the repair note is still there: %q", note)
	}
	s = openTest(t, dir, Options{})
	if hs, _, _ := s.InitialState(); hs.Commit != last || len(s.Lost()) != 0 {
		t.Fatalf("the open after: hard state %v, lost %v", hs, s.Lost())
	}
}
