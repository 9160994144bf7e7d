package host

import (
	"errors"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

func never() bool  { return false }
func always() bool { return true }

// appendBytes counts n bytes of entries as appended.
func appendBytes(s *snapshotScheduler, n int) {
	s.appended([]*pb.Entry{{Data: make([]byte, n)}})
}

func TestSnapshotSchedulerDueByEntriesOrBytes(t *testing.T) {
	s := newSnapshotScheduler(100, 1000, 50, 10)
	if s.due(50, never) {
		t.Fatal("due with nothing applied since the last snapshot")
	}
	if s.due(149, never) {
		t.Fatal("due after 99 entries of 100")
	}
	if !s.due(150, never) {
		t.Fatal("not due after 100 entries")
	}
	appendBytes(s, 999)
	if s.due(60, never) {
		t.Fatal("due after 999 bytes of 1000")
	}
	appendBytes(s, 1)
	if !s.due(60, never) {
		t.Fatal("not due after 1000 bytes")
	}
	s.taken()
	if s.due(60, never) {
		t.Fatal("due right after a snapshot was taken: its bytes still count")
	}
}

// A large snapshot is taken only once the log since holds
// snapshotCostFactor times its size, or as many times the entries.
func TestSnapshotSchedulerLargeSnapshotCostsLess(t *testing.T) {
	const entries, size = 100, snapshotCostFloor
	s := newSnapshotScheduler(entries, 1000, 0, size)
	appendBytes(s, 1000)
	if s.due(entries, never) {
		t.Fatal("a snapshot of the cost floor is due after the plain counts")
	}
	if !s.due(snapshotCostFactor*entries, never) {
		t.Fatal("not due after snapshotCostFactor times the entries")
	}
	appendBytes(s, snapshotCostFactor*size)
	if !s.due(entries, never) {
		t.Fatal("not due after snapshotCostFactor times its size")
	}
}

// A snapshot that frees a segment of the log is taken whatever the
// counts, but never while nothing was applied or one is in flight.
func TestSnapshotSchedulerFreeingASegmentIsDue(t *testing.T) {
	s := newSnapshotScheduler(100, 1000, 50, 10)
	if !s.due(51, always) {
		t.Fatal("not due although it frees a segment")
	}
	if s.due(50, always) {
		t.Fatal("due with nothing applied since the last snapshot")
	}
	s.start(func() snapResult { return snapResult{index: 51, bytes: 20} })
	if s.due(1000, always) {
		t.Fatal("due while a snapshot is in flight")
	}
	s.finished(<-s.done)
	s.wait()
	if s.index != 51 || s.lastBytes != 20 || s.at.Load() != 51 {
		t.Fatalf("after the snapshot: index %d, bytes %d, at %d; want 51, 20, 51", s.index, s.lastBytes, s.at.Load())
	}
}

func TestSnapshotSchedulerOneInFlight(t *testing.T) {
	s := newSnapshotScheduler(1, 1, 0, 0)
	release := make(chan struct{})
	s.start(func() snapResult { <-release; return snapResult{index: 1} })
	defer func() {
		if recover() == nil {
			t.Fatal("a second snapshot started while one was in flight")
		}
		close(release)
		s.wait()
	}()
	s.start(func() snapResult { return snapResult{index: 2} })
}

func TestSnapshotSchedulerFailedSnapshotRecordsNothing(t *testing.T) {
	s := newSnapshotScheduler(1, 1, 5, 10)
	s.start(func() snapResult { return snapResult{index: 9, err: errors.New("disk")} })
	if err := s.finished(<-s.done); err == nil {
		t.Fatal("a failed snapshot reported no error")
	}
	if s.busy() || s.index != 5 || s.at.Load() != 5 {
		t.Fatalf("after a failure: busy %v, index %d, at %d; want false, 5, 5", s.busy(), s.index, s.at.Load())
	}
}

// A snapshot written while a leader's snapshot was installed above it
// does not move the index back.
func TestSnapshotSchedulerInstalledSnapshotIsNotOvertaken(t *testing.T) {
	s := newSnapshotScheduler(1, 1, 5, 10)
	appendBytes(s, 100)
	s.installed(20, 30)
	if s.sinceBytes != 0 || s.at.Load() != 20 {
		t.Fatalf("after an install: %d bytes since, at %d; want 0, 20", s.sinceBytes, s.at.Load())
	}
	if err := s.finished(snapResult{index: 9, bytes: 11}); err != nil {
		t.Fatal(err)
	}
	if s.index != 20 || s.lastBytes != 30 {
		t.Fatalf("an older snapshot overtook the installed one: index %d, bytes %d", s.index, s.lastBytes)
	}
}

func TestSnapshotSchedulerAbandonWaitsForTheOneInFlight(t *testing.T) {
	s := newSnapshotScheduler(1, 1, 0, 0)
	if _, ok := s.abandon(); ok {
		t.Fatal("abandoned a snapshot with none in flight")
	}
	s.start(func() snapResult { return snapResult{index: 3} })
	r, ok := s.abandon()
	if !ok || r.index != 3 {
		t.Fatalf("abandon = %+v, %v; want the snapshot at 3", r, ok)
	}
	if s.busy() || s.index != 0 {
		t.Fatalf("after abandon: busy %v, index %d; want false, 0", s.busy(), s.index)
	}
	s.wait()
}
