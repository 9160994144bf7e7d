package host

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// countingPort counts the raft messages a node sends.
type countingPort struct {
	port
	sent *atomic.Int64
}

func (p countingPort) Send(group uint64, msgs []pb.Message) {
	p.sent.Add(int64(len(msgs)))
	p.port.Send(group, msgs)
}

// startQuiescingCluster is startMemCluster with node-level liveness: a
// node is alive unless cut.
func startQuiescingCluster(t *testing.T) (*memNet, []*Host, *atomic.Int64) {
	t.Helper()
	net := newMemNet()
	sent := new(atomic.Int64)
	alive := func(id uint64) bool {
		net.mu.Lock()
		defer net.mu.Unlock()
		return !net.cut[id]
	}
	var hosts []*Host
	for id := uint64(1); id <= 3; id++ {
		h := newTestHost(t, t.TempDir(), func(c *Config) {
			c.NodeID = id
			c.Transport = countingPort{port{net: net, from: id}, sent}
			c.PeerAlive = alive
		})
		net.mu.Lock()
		net.hosts[id] = h
		net.mu.Unlock()
		hosts = append(hosts, h)
	}
	for _, h := range hosts {
		go h.AddGroup(queueGroup())
	}
	for _, h := range hosts {
		waitForGroup(t, h)
	}
	return net, hosts, sent
}

func waitForGroup(t *testing.T, h *Host) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := h.GroupStatus(1); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("group 1 never opened")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitQuiesced(t *testing.T, hosts ...*Host) {
	t.Helper()
	for _, h := range hosts {
		waitFor(t, h, 1, func(st Status) bool { return st.Quiesced })
	}
}

// TestIdleGroupsQuiesceAndWake: an idle three-replica group stops sending
// anything; a proposal wakes it and commits; idle again, it quiesces
// again; and when its leader's node dies, the followers wake and elect a
// new leader.
func TestIdleGroupsQuiesceAndWake(t *testing.T) {
	net, hosts, sent := startQuiescingCluster(t)
	lead := leaderOf(t, hosts)
	propose(t, hosts[lead-1], 1, "pub 1")
	waitQuiesced(t, hosts...)
	for _, h := range hosts {
		wantLogWritten(t, h)
	}

	before := sent.Load()
	tick := hosts[0].cfg.TickInterval
	time.Sleep(5 * time.Duration(hosts[0].cfg.ElectionTicks) * tick)
	if n := sent.Load() - before; n != 0 {
		t.Fatalf("quiesced groups sent %d messages in five election timeouts", n)
	}

	follower := lead%3 + 1
	propose(t, hosts[follower-1], 1, "pub 2") // forwarded by a quiesced follower to a quiesced leader
	for _, h := range hosts {
		waitFor(t, h, 1, func(st Status) bool { return st.Applied >= appliedOf(t, hosts[lead-1]) })
	}
	waitQuiesced(t, hosts...)

	net.setCut(lead, true)
	newLead := leaderOf(t, hosts, lead)
	propose(t, hosts[newLead-1], 1, "pub 3")
	if got := pendingOf(t, hosts[newLead-1]); len(got) != 3 {
		t.Fatalf("new leader has %d pending, want 3", len(got))
	}
}

// wantLogWritten checks that a quiesced group's log holds its entries in
// its segment files, not only in memory (log.Options.WriteBehind): a node
// killed while its groups are quiet must not have to write and sync every
// group's log again from the WAL when it starts.
func wantLogWritten(t *testing.T, h *Host) {
	t.Helper()
	st := statusOf(t, h)
	if empty := int64(32 * st.LogSegments); st.LogBytes <= empty {
		t.Fatalf("node %d: a quiesced group's log holds %d bytes in %d segment files, no entries (last index %d)",
			h.cfg.NodeID, st.LogBytes, st.LogSegments, st.LastIndex)
	}
}

// TestGroupAloneQuiesces: a group of one node quiesces without any peer,
// with its entries written to its log, and serves proposals at once when
// woken.
func TestGroupAloneQuiesces(t *testing.T) {
	h := newTestHost(t, t.TempDir(), nil)
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		waitFor(t, h, 1, func(st Status) bool { return st.Quiesced })
		wantLogWritten(t, h)
		if got := propose(t, h, 1, fmt.Sprint("cmd ", i)); got != i+1 {
			t.Fatalf("proposal %d applied as %d", i, got)
		}
	}
}

// TestQuiescedLeaderCutOffStepsDown: a quiesced leader whose followers'
// nodes stop answering wakes when told (PeerDown), ticks, and steps down
// for want of a quorum (CheckQuorum), instead of leading on, asleep.
func TestQuiescedLeaderCutOffStepsDown(t *testing.T) {
	net, hosts, _ := startQuiescingCluster(t)
	lead := leaderOf(t, hosts)
	propose(t, hosts[lead-1], 1, "pub 1")
	waitQuiesced(t, hosts...)

	var followers []uint64
	for id := uint64(1); id <= 3; id++ {
		if id != lead {
			followers = append(followers, id)
			net.setCut(id, true)
		}
	}
	hosts[lead-1].PeerDown(followers[0])
	waitFor(t, hosts[lead-1], 1, func(st Status) bool { return !st.IsLeader })
}
