package host

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// logEnd is a log that ends at its value.
type logEnd uint64

func (l logEnd) LastIndex() (uint64, error) { return uint64(l), nil }

func TestRebuildStateKeepsOutOfElections(t *testing.T) {
	r := newRebuildState(true, 0)
	defer r.stop()
	for _, typ := range []pb.MessageType{pb.MsgVote, pb.MsgPreVote, pb.MsgTimeoutNow} {
		if r.step(&pb.Message{Type: typ}, logEnd(0)) {
			t.Errorf("a rebuilding replica steps %v", typ)
		}
	}
	r.finish()
	if !r.step(&pb.Message{Type: pb.MsgVote}, logEnd(0)) {
		t.Fatal("a rebuilt replica that caught up does not vote")
	}
	if r.now.Load() {
		t.Fatal("finished, but other goroutines still see it rebuilding")
	}
}

func TestRebuildStateClampsHeartbeatsToItsLog(t *testing.T) {
	r := newRebuildState(true, 0)
	defer r.stop()
	m := pb.Message{Type: pb.MsgHeartbeat, Commit: 50}
	if !r.step(&m, logEnd(7)) {
		t.Fatal("a heartbeat was dropped")
	}
	if m.Commit != 7 {
		t.Fatalf("heartbeat commit = %d, want it clamped to the log's last index, 7", m.Commit)
	}
	n := newRebuildState(false, 0)
	defer n.stop()
	m = pb.Message{Type: pb.MsgHeartbeat, Commit: 50}
	n.step(&m, logEnd(7))
	if m.Commit != 50 {
		t.Fatal("a replica that is not rebuilding clamped a heartbeat")
	}
}

// A rebuilding replica is caught up once it has applied the highest
// commit index a leader told it of, and not before it was told one.
func TestRebuildStateCaughtUpAtTheLeadersCommit(t *testing.T) {
	r := newRebuildState(true, 0)
	defer r.stop()
	if r.caughtUp(100) {
		t.Fatal("caught up before any leader said how far")
	}
	r.step(&pb.Message{Type: pb.MsgApp, Commit: 20}, logEnd(0))
	r.step(&pb.Message{Type: pb.MsgApp, Commit: 10}, logEnd(0))
	if r.caughtUp(19) {
		t.Fatal("caught up below the highest commit index it was told of")
	}
	snap := pb.Message{Type: pb.MsgSnap, Snapshot: &pb.Snapshot{Metadata: pb.SnapshotMetadata{Index: 30}}}
	r.step(&snap, logEnd(0))
	if r.caughtUp(20) || !r.caughtUp(30) {
		t.Fatal("the snapshot's index did not become the target")
	}
}

func TestRebuildStateAsksEveryReaddEveryTicks(t *testing.T) {
	r := newRebuildState(true, 5)
	defer r.stop()
	asked := 0
	for range 3 * readdEvery {
		if r.askDue(5, false) {
			asked++
		}
	}
	if asked != 3 {
		t.Fatalf("asked %d times in %d ticks, want 3", asked, 3*readdEvery)
	}
	for _, tt := range []struct {
		name    string
		applied uint64
		staging bool
		asking  bool
	}{
		{name: "applied something", applied: 6},
		{name: "staging a snapshot", applied: 5, staging: true},
		{name: "a request runs", applied: 5, asking: true},
	} {
		r.asking.Store(tt.asking)
		for range 2 * readdEvery {
			if r.askDue(tt.applied, tt.staging) {
				t.Fatalf("%s: asked to be re-added", tt.name)
			}
		}
		r.asking.Store(false)
	}
	r.finish()
	for range 2 * readdEvery {
		if r.askDue(5, false) {
			t.Fatal("a replica that is not rebuilding asked to be re-added")
		}
	}
}
