package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// restartHost closes hosts[id-1] and opens a new host on its directory,
// with group 1 configured by gc.
func restartHost(t *testing.T, net *memNet, hosts []*Host, id uint64, gc GroupConfig) error {
	t.Helper()
	dir := hosts[id-1].cfg.Dir
	hosts[id-1].Close()
	h := newTestHost(t, dir, func(c *Config) {
		c.NodeID = id
		c.SnapshotEntries = 20
		c.SegmentSize = 2048
		c.Transport = port{net: net, from: id}
	})
	net.mu.Lock()
	net.hosts[id] = h
	net.mu.Unlock()
	hosts[id-1] = h
	return h.AddGroup(gc)
}

func queueGroup() GroupConfig {
	return GroupConfig{ID: 1, Name: "q", Peers: []uint64{1, 2, 3}, StateMachine: &queueMachine{}}
}

// flipByteInLog damages the middle of the first log segment of group 1.
func flipByteInLog(t *testing.T, h *Host) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(groupDir(&h.cfg, queueGroup()), "log", "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no log segment: %v", err)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(segs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedReplicaIsRebuiltFromItsPeers: a replica whose log has a
// flipped bit refuses to open on its own, and with RepairFromPeers is
// moved aside and rebuilt from the other two, holding every event again.
func TestDamagedReplicaIsRebuiltFromItsPeers(t *testing.T) {
	net, hosts := startMemCluster(t)
	lead := leaderOf(t, hosts)
	victim := lead%3 + 1
	for i := range 50 {
		propose(t, hosts[lead-1], 1, fmt.Sprintf("pub %04d %s", i, strings.Repeat("x", 64)))
	}
	waitFor(t, hosts[victim-1], 1, func(st Status) bool { return st.Applied >= appliedOf(t, hosts[lead-1]) })
	want := pendingOf(t, hosts[lead-1])

	hosts[victim-1].Close()
	flipByteInLog(t, hosts[victim-1])
	if err := restartHost(t, net, hosts, victim, queueGroup()); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("a damaged replica without RepairFromPeers opened: %v", err)
	}
	gc := queueGroup()
	gc.RepairFromPeers = true
	if err := restartHost(t, net, hosts, victim, gc); err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	h := hosts[victim-1]
	if _, err := os.Stat(groupDir(&h.cfg, gc) + damagedSuffix); err != nil {
		t.Fatalf("the damaged files were not kept aside: %v", err)
	}
	waitFor(t, h, 1, func(st Status) bool { return st.Applied >= appliedOf(t, hosts[lead-1]) })
	if got := pendingOf(t, h); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rebuilt replica's pending = %v, want %v", got, want)
	}
	for n, idx := range want {
		cmd, err := h.Entry(1, idx)
		if err != nil || !strings.HasPrefix(string(cmd), fmt.Sprintf("pub %04d ", n)) {
			t.Fatalf("rebuilt replica's entry %d = %q, %v", idx, cmd, err)
		}
	}
	waitRebuilt(t, h)
}

// TestRejoiningReplicaDoesNotVoteUntilCaughtUp: a node that lost its data
// rejoins with an empty replica. While the leader is cut off, the one
// follower left cannot be elected with the empty replica's vote; once the
// leader is back and the replica has caught up, it votes again.
func TestRejoiningReplicaDoesNotVoteUntilCaughtUp(t *testing.T) {
	net, hosts := startMemCluster(t)
	lead := leaderOf(t, hosts)
	wiped := lead%3 + 1
	for i := range 30 {
		propose(t, hosts[lead-1], 1, fmt.Sprintf("pub %04d", i))
	}
	hosts[wiped-1].Close()
	if err := os.RemoveAll(hosts[wiped-1].cfg.Dir); err != nil {
		t.Fatal(err)
	}
	net.setCut(lead, true)
	gc := queueGroup()
	gc.Rejoin = true
	if err := restartHost(t, net, hosts, wiped, gc); err != nil {
		t.Fatal(err)
	}
	election := time.Duration(hosts[0].cfg.ElectionTicks) * hosts[0].cfg.TickInterval
	deadline := time.Now().Add(10 * election)
	for time.Now().Before(deadline) {
		for id, h := range hosts {
			if st, err := h.GroupStatus(1); err == nil && st.IsLeader && uint64(id+1) != lead {
				t.Fatalf("node %d was elected with the vote of an empty replica", id+1)
			}
		}
		time.Sleep(election / 4)
	}

	net.setCut(lead, false)
	h := hosts[wiped-1]
	waitFor(t, h, 1, func(st Status) bool { return st.Applied >= appliedOf(t, hosts[lead-1]) && st.Leader != 0 })
	waitRebuilt(t, h)
	// Caught up, it votes: without the old leader, the other two elect one.
	old := leaderOf(t, hosts)
	net.setCut(old, true)
	if got := leaderOf(t, hosts, old); got == old {
		t.Fatal("no new leader")
	}
}

func waitRebuilt(t *testing.T, h *Host) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, err := h.group(1)
		if err != nil {
			t.Fatal(err)
		}
		if rebuilding, _ := g.storage.Rebuilding(); !rebuilding {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the rebuilt replica is still marked as rebuilding")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
