package host

import (
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/raftstore"
	"herald/internal/wal"
)

// A conf change that does not decode stops the group with an error naming
// the entry; skipping it would let replicas disagree on membership.
func TestUndecodableConfChangeStopsTheGroup(t *testing.T) {
	dir := t.TempDir()
	h := newTestHost(t, dir, nil)
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	h.Booted() // so that closing leaves nothing in the WAL to replay over the entry written below
	propose(t, h, 1, "a")
	st, _ := h.GroupStatus(1)
	h.Close()

	// The group's storage opens with the node's WAL, as the host opens
	// it; Booted is not called, so that the WAL keeps what other groups
	// would take from it.
	w, err := wal.Open(filepath.Join(dir, walDir), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := raftstore.Open(filepath.Join(dir, "shards", "1-g"), raftstore.Options{WAL: w, Group: 1})
	if err != nil {
		w.Close()
		t.Fatal(err)
	}
	term, err := s.Term(st.LastIndex)
	if err != nil {
		t.Fatal(err)
	}
	bad := pb.Entry{Index: st.LastIndex + 1, Term: term, Type: pb.EntryConfChange, Data: []byte{0xff, 0xff, 0xff}}
	if err := s.Append([]pb.Entry{bad}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	h2 := newTestHost(t, dir, nil)
	err = h2.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}})
	if err == nil || !strings.Contains(err.Error(), "conf change at index") {
		t.Fatalf("AddGroup over a log with an undecodable conf change: %v, want the group stopped with the entry named", err)
	}
}
