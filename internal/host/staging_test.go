package host

import (
	"context"
	"errors"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/raftstore"
	"herald/internal/vfs"
	"herald/internal/wal"
)

// stagingStorage opens a group's storage in memory, to stage logs in.
func stagingStorage(t *testing.T) (*raftstore.Storage, vfs.FS) {
	t.Helper()
	fs := vfs.NewMem()
	w, err := wal.Open("/data/wal", wal.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	st, err := raftstore.Open("/data/g", raftstore.Options{FS: fs, WAL: w, Group: 1})
	if err != nil {
		w.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		w.Close()
	})
	return st, fs
}

func snapshotMsg(index uint64) *pb.Message {
	return &pb.Message{Type: pb.MsgSnap, Snapshot: &pb.Snapshot{Metadata: pb.SnapshotMetadata{Index: index}}}
}

// stagedExists reports whether a staged log is on disk.
func stagedExists(t *testing.T, fs vfs.FS) bool {
	t.Helper()
	names, err := fs.ReadDir("/data/g")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n == "log.install" {
			return true
		}
	}
	return false
}

func TestSnapshotStagingOneAtATimeUntilInstalled(t *testing.T) {
	st, fs := stagingStorage(t)
	s := newSnapshotStaging()
	s.start(snapshotMsg(10), func(context.Context) (*raftstore.StagedLog, error) { return st.StageLog(5, 1) })
	if !s.busy() {
		t.Fatal("not busy while fetching")
	}
	if err := s.finished(<-s.done); err != nil {
		t.Fatal(err)
	}
	if !s.busy() {
		t.Fatal("not busy while a staged log waits for its install")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a second fetch started while a staged log waits for its install")
			}
		}()
		s.start(snapshotMsg(11), nil)
	}()
	if sl := s.take(11); sl != nil {
		t.Fatal("took the staged log for another snapshot's install")
	}
	sl := s.take(10)
	if sl == nil {
		t.Fatal("the staged log of the snapshot at 10 is not there for its install")
	}
	if s.busy() {
		t.Fatal("busy after its staged log was taken")
	}
	if !stagedExists(t, fs) {
		t.Fatal("taking the staged log removed it")
	}
	sl.Discard()
}

func TestSnapshotStagingFailedFetchStagesNothing(t *testing.T) {
	s := newSnapshotStaging()
	fetchErr := errors.New("leader unreachable")
	s.start(snapshotMsg(10), func(context.Context) (*raftstore.StagedLog, error) { return nil, fetchErr })
	if err := s.finished(<-s.done); !errors.Is(err, fetchErr) {
		t.Fatalf("finished = %v, want the fetch's error", err)
	}
	if s.busy() || s.take(10) != nil {
		t.Fatal("a failed fetch left something staged")
	}
}

func TestSnapshotStagingDiscardRemovesAnUnusedLog(t *testing.T) {
	st, fs := stagingStorage(t)
	s := newSnapshotStaging()
	s.start(snapshotMsg(10), func(context.Context) (*raftstore.StagedLog, error) { return st.StageLog(5, 1) })
	if err := s.finished(<-s.done); err != nil {
		t.Fatal(err)
	}
	if err := s.discard(); err != nil {
		t.Fatal(err)
	}
	if s.busy() || stagedExists(t, fs) {
		t.Fatal("the unused staged log is still there")
	}
	if err := s.discard(); err != nil {
		t.Fatalf("discard with nothing staged: %v", err)
	}
}

// stop cancels a running fetch and removes what it staged, reported or
// not.
func TestSnapshotStagingStopCancelsAndRemoves(t *testing.T) {
	st, fs := stagingStorage(t)
	s := newSnapshotStaging()
	s.start(snapshotMsg(10), func(ctx context.Context) (*raftstore.StagedLog, error) {
		sl, err := st.StageLog(5, 1)
		<-ctx.Done() // a fetch waiting for the leader
		return sl, err
	})
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if stagedExists(t, fs) {
		t.Fatal("stop left the staged log of the cancelled fetch")
	}
	if err := newSnapshotStaging().stop(); err != nil {
		t.Fatalf("stop with nothing started: %v", err)
	}
}
