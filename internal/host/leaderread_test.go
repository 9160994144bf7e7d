package host

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// TestNewLeaderIsNamedOnceItHasAppliedItsPredecessorsCommits: node 1
// commits and applies an entry, but its followers never hear that it was
// committed; node 1 is then cut off and one of them is elected. That one
// must not name itself the leader (Host.Leader, which the node's reads
// follow) while its state lacks the entry: a fetch served from it would
// hand out an event whose ack was already confirmed.
func TestNewLeaderIsNamedOnceItHasAppliedItsPredecessorsCommits(t *testing.T) {
	w := &wire{hosts: make(map[uint64]*Host)}
	var isolated atomic.Bool // node 1 is cut off
	hosts := threeHostsLedBy1(t, w, &isolated)
	propose(t, hosts[1], 1, "before")
	eventually(t, "the followers apply what was committed before", func() bool {
		return slices.Contains(machineState(t, hosts[2], 1), "before") && slices.Contains(machineState(t, hosts[3], 1), "before")
	})

	st, err := hosts[1].GroupStatus(1)
	if err != nil {
		t.Fatal(err)
	}
	acked := st.LastIndex + 1 // the index "acked" takes
	w.mu.Lock()
	w.drop = func(m *pb.Message) bool { return m.From == 1 && m.Commit >= acked }
	w.mu.Unlock()
	propose(t, hosts[1], 1, "acked")
	for _, id := range []uint64{2, 3} {
		if slices.Contains(machineState(t, hosts[id], 1), "acked") {
			t.Fatalf("node %d applied the entry although it was never told that it committed", id)
		}
	}

	// Cut node 1 off, and hold back the followers' answers to appends, so
	// that whoever is elected cannot commit the empty entry of its term.
	isolated.Store(true)
	w.mu.Lock()
	w.drop = func(m *pb.Message) bool {
		return m.From == 1 || m.To == 1 || m.Type == pb.MsgAppResp
	}
	w.mu.Unlock()
	var elected uint64
	eventually(t, "node 2 or 3 is elected", func() bool {
		for _, id := range []uint64{2, 3} {
			if st, err := hosts[id].GroupStatus(1); err == nil && st.IsLeader {
				elected = id
				return true
			}
		}
		return false
	})
	for range 20 {
		if l, _ := hosts[elected].Leader(1); l == elected {
			t.Fatalf("node %d names itself the leader before it has applied the entry its predecessor committed (its state: %v)",
				elected, machineState(t, hosts[elected], 1))
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Once its empty entry commits, it has applied everything.
	w.mu.Lock()
	w.drop = func(m *pb.Message) bool { return m.From == 1 || m.To == 1 }
	w.mu.Unlock()
	eventually(t, "the new leader names itself", func() bool {
		l, _ := hosts[elected].Leader(1)
		return l == elected
	})
	if got := machineState(t, hosts[elected], 1); !slices.Contains(got, "acked") {
		t.Fatalf("node %d leads without the committed entry: %v", elected, got)
	}
}

// TestReadBarrierConfirmsTheLeadership: a barrier returns on the leader
// once a quorum has answered, also when the first answers are lost; it
// fails on a follower; and on a leader cut off from its followers, which
// still believes it leads while the others elect a new one, it never
// returns as if it could serve reads.
func TestReadBarrierConfirmsTheLeadership(t *testing.T) {
	ctx := context.Background()
	w := &wire{hosts: make(map[uint64]*Host)}
	var isolated atomic.Bool // node 1 is cut off
	hosts := threeHostsLedBy1(t, w, &isolated)
	if err := hosts[2].ReadBarrier(ctx, 1); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("read barrier on a follower: %v, want ErrNotLeader", err)
	}

	// The first answers to the barrier's heartbeats are lost.
	var lost atomic.Int32
	w.mu.Lock()
	w.drop = func(m *pb.Message) bool {
		return m.Type == pb.MsgHeartbeatResp && len(m.Context) > 0 && lost.Add(1) <= 2
	}
	w.mu.Unlock()
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := hosts[1].ReadBarrier(bctx, 1); err != nil {
		t.Fatalf("read barrier on the leader: %v", err)
	}
	if lost.Load() < 2 {
		t.Fatalf("%d answers were dropped; the test meant to lose 2", lost.Load())
	}

	// Cut node 1 off. Whatever it answers before it steps down, it is
	// never "you may read".
	isolated.Store(true)
	w.mu.Lock()
	w.drop = func(m *pb.Message) bool { return m.From == 1 || m.To == 1 }
	w.mu.Unlock()
	barrier := make(chan error, 1)
	go func() {
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		barrier <- hosts[1].ReadBarrier(bctx, 1)
	}()
	var leader uint64
	eventually(t, "node 2 or 3 leads", func() bool {
		leader, _ = hosts[2].Leader(1)
		return leader == 2 || leader == 3
	})
	propose(t, hosts[leader], 1, "after")
	if err := hosts[leader].ReadBarrier(ctx, 1); err != nil {
		t.Fatalf("read barrier on the new leader: %v", err)
	}
	if err := <-barrier; err == nil {
		t.Fatal("the cut-off leader's read barrier returned as if it still led")
	} else if !errors.Is(err, ErrNotLeader) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the cut-off leader's read barrier: %v, want ErrNotLeader or a deadline", err)
	}
}

// threeHostsLedBy1 wires three hosts running group 1, which node 1 leads;
// once isolated is set, node 1 does not answer the others' liveness checks.
func threeHostsLedBy1(t *testing.T, w *wire, isolated *atomic.Bool) map[uint64]*Host {
	hosts := wiredHosts(t, w, func(c *Config) {
		c.PeerAlive = func(node uint64) bool { return node != 1 || !isolated.Load() }
	})
	for id := uint64(1); id <= 3; id++ {
		if err := hosts[id].AddGroup(GroupConfig{ID: 1, Name: "g", Peers: []uint64{1, 2, 3}, Campaign: id == 1, StateMachine: &listMachine{}}); err != nil {
			t.Fatal(err)
		}
	}
	makeLeader(t, hosts, 1, 1)
	return hosts
}
