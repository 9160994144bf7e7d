package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/raft/v3/raftpb"

	clusterv1 "herald/proto/herald/cluster/v1"
)

// memNet connects hosts in one process. A node that is cut neither sends
// nor receives anything, calls included.
type memNet struct {
	mu    sync.Mutex
	hosts map[uint64]*Host
	cut   map[uint64]bool
}

func newMemNet() *memNet {
	return &memNet{hosts: make(map[uint64]*Host), cut: make(map[uint64]bool)}
}

// port is one node's side of the network: what its host sends through.
type port struct {
	net  *memNet
	from uint64
}

func (n *memNet) reachable(from, to uint64) (*Host, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, ok := n.hosts[to]
	return h, ok && !n.cut[from] && !n.cut[to]
}

func (n *memNet) setCut(id uint64, cut bool) {
	n.mu.Lock()
	n.cut[id] = cut
	n.mu.Unlock()
}

func (p port) Send(group uint64, msgs []pb.Message) {
	for _, m := range msgs {
		h, ok := p.net.reachable(p.from, m.To)
		if ok {
			ok = h.Receive(group, m) == nil
		}
		if sender, _ := p.net.reachable(p.from, p.from); sender != nil {
			if m.Type == pb.MsgSnap {
				sender.ReportSnapshot(group, m.To, !ok)
			} else if !ok {
				sender.ReportUnreachable(group, m.To)
			}
		}
	}
}

func (p port) Entries(ctx context.Context, to uint64, req *clusterv1.EntriesRequest) (*clusterv1.EntriesResponse, error) {
	h, ok := p.net.reachable(p.from, to)
	if !ok {
		return nil, fmt.Errorf("node %d is unreachable", to)
	}
	return h.ServeEntries(ctx, req)
}

func (p port) Readd(ctx context.Context, to uint64, req *clusterv1.ReaddRequest) (*clusterv1.ReaddResponse, error) {
	h, ok := p.net.reachable(p.from, to)
	if !ok {
		return nil, fmt.Errorf("node %d is unreachable", to)
	}
	return h.ServeReadd(ctx, req)
}

// queueMachine is a queue: "pub ..." adds the entry's index to the
// pending ones, "ack" removes the oldest. Like a shard, it keeps only
// indexes and reads the events from the log, so it needs the entries from
// its oldest pending index on.
type queueMachine struct {
	applied uint64
	pending []uint64
}

func (m *queueMachine) Apply(index uint64, cmd []byte) any {
	m.applied = index
	switch {
	case strings.HasPrefix(string(cmd), "pub "):
		m.pending = append(m.pending, index)
	case string(cmd) == "ack" && len(m.pending) > 0:
		m.pending = m.pending[1:]
	}
	return len(m.pending)
}

func (m *queueMachine) Snapshot() ([]byte, error) {
	b := binary.AppendUvarint(nil, m.applied)
	for _, p := range m.pending {
		b = binary.AppendUvarint(b, p)
	}
	return b, nil
}

func (m *queueMachine) Restore(data []byte) error {
	m.applied, m.pending = 0, nil
	if len(data) == 0 {
		return nil
	}
	v, n := binary.Uvarint(data)
	m.applied, data = v, data[n:]
	for len(data) > 0 {
		v, n := binary.Uvarint(data)
		if n <= 0 {
			return errors.New("queue snapshot does not decode")
		}
		m.pending, data = append(m.pending, v), data[n:]
	}
	return nil
}

func (m *queueMachine) CompactIndex() uint64 {
	if len(m.pending) > 0 {
		return m.pending[0]
	}
	return m.applied + 1
}

// startMemCluster starts three hosts, each running group 1 over a queue.
func startMemCluster(t *testing.T) (*memNet, []*Host) {
	t.Helper()
	net := newMemNet()
	var hosts []*Host
	for id := uint64(1); id <= 3; id++ {
		h := newTestHost(t, t.TempDir(), func(c *Config) {
			c.NodeID = id
			c.SnapshotEntries = 20
			c.SegmentSize = 2048
			c.Transport = port{net: net, from: id}
		})
		net.mu.Lock()
		net.hosts[id] = h
		net.mu.Unlock()
		hosts = append(hosts, h)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, h := range hosts {
		wg.Go(func() {
			errs[i] = h.AddGroup(GroupConfig{ID: 1, Name: "q", Peers: []uint64{1, 2, 3}, StateMachine: &queueMachine{}})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return net, hosts
}

// leaderOf waits until exactly one of the hosts not excluded leads group
// 1, and returns it.
func leaderOf(t *testing.T, hosts []*Host, excluded ...uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var leaders []uint64
		for i, h := range hosts {
			id := uint64(i + 1)
			if st, err := h.GroupStatus(1); err == nil && st.IsLeader && !slices.Contains(excluded, id) {
				leaders = append(leaders, id)
			}
		}
		if len(leaders) == 1 {
			return leaders[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no single leader elected")
	return 0
}

func pendingOf(t *testing.T, h *Host) []uint64 {
	t.Helper()
	var out []uint64
	err := h.View(context.Background(), 1, func(sm StateMachine, _ uint64) {
		out = append(out, sm.(*queueMachine).pending...)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLaggingReplicaReceivesTheEntriesItsSnapshotNeeds: a follower is cut
// off while the leader publishes, snapshots and compacts its log past
// everything the follower has. Healed, it catches up through a snapshot,
// which holds only the pending indexes; it must receive the entries
// holding them too. Made leader, it reads every pending event.
func TestLaggingReplicaReceivesTheEntriesItsSnapshotNeeds(t *testing.T) {
	net, hosts := startMemCluster(t)
	lead := leaderOf(t, hosts)
	follower := lead%3 + 1
	publish := func(through uint64, from, to int) {
		for i := from; i < to; i++ {
			propose(t, hosts[through-1], 1, fmt.Sprintf("pub %04d %s", i, strings.Repeat("x", 64)))
		}
	}
	publish(lead, 0, 10)
	waitFor(t, hosts[follower-1], 1, func(st Status) bool { return st.Applied >= appliedOf(t, hosts[lead-1]) })

	net.setCut(follower, true)
	followerLast := statusOf(t, hosts[follower-1]).LastIndex
	publish(lead, 10, 300)
	for range 100 { // acks move the pending head, so the log is compacted
		propose(t, hosts[lead-1], 1, "ack")
	}
	waitFor(t, hosts[lead-1], 1, func(st Status) bool { return st.FirstIndex > followerLast+1 })
	want := pendingOf(t, hosts[lead-1])
	if len(want) != 200 {
		t.Fatalf("leader has %d pending, want 200", len(want))
	}

	net.setCut(follower, false)
	waitFor(t, hosts[follower-1], 1, func(st Status) bool { return st.Applied >= appliedOf(t, hosts[lead-1]) })
	if got := statusOf(t, hosts[follower-1]); got.SnapIndex <= followerLast {
		t.Fatalf("the follower caught up without a snapshot (snapshot index %d, its log ended at %d): the test did not test installs", got.SnapIndex, followerLast)
	}
	sent, installs, entries := counterValue(t, hosts[lead-1].metrics.snapshotsSent),
		counterValue(t, hosts[follower-1].metrics.snapshotInstalls), counterValue(t, hosts[follower-1].metrics.snapshotEntries)
	if sent < 1 || installs < 1 || entries < 1 {
		t.Errorf("metrics: the leader sent %v snapshots; the follower installed %v, with %v entries; want at least one of each", sent, installs, entries)
	}

	// Make the follower leader: cut whichever other node leads until it does.
	for attempt := 0; ; attempt++ {
		l := leaderOf(t, hosts)
		if l == follower {
			break
		}
		if attempt == 20 {
			t.Fatalf("node %d never became leader", follower)
		}
		net.setCut(l, true)
		leaderOf(t, hosts, l)
		net.setCut(l, false)
	}
	f := hosts[follower-1]
	if got := pendingOf(t, f); !slices.Equal(got, want) {
		t.Fatalf("new leader's pending = %v..., want %v...", head(got), head(want))
	}
	for n, idx := range want {
		cmd, err := f.Entry(1, idx)
		if err != nil {
			t.Fatalf("pending event %d (index %d) is not readable on the new leader: %v", n, idx, err)
		}
		if wantCmd := fmt.Sprintf("pub %04d %s", n+100, strings.Repeat("x", 64)); string(cmd) != wantCmd {
			t.Fatalf("index %d holds %q, want %q", idx, cmd, wantCmd)
		}
	}
	publish(follower, 300, 310)
}

// TestSnapshotWhoseStateNeedsNoEntriesInstallsWithoutFetching: when the
// state reads nothing from the log (everything was acknowledged), the
// snapshot alone brings a lagging follower up to date.
func TestSnapshotWhoseStateNeedsNoEntriesInstallsWithoutFetching(t *testing.T) {
	net, hosts := startMemCluster(t)
	lead := leaderOf(t, hosts)
	follower := lead%3 + 1
	net.setCut(follower, true)
	followerLast := statusOf(t, hosts[follower-1]).LastIndex
	for i := range 100 {
		propose(t, hosts[lead-1], 1, fmt.Sprintf("pub %04d %s", i, strings.Repeat("x", 64)))
		propose(t, hosts[lead-1], 1, "ack")
	}
	waitFor(t, hosts[lead-1], 1, func(st Status) bool { return st.FirstIndex > followerLast+1 })
	net.setCut(follower, false)
	waitFor(t, hosts[follower-1], 1, func(st Status) bool { return st.Applied >= appliedOf(t, hosts[lead-1]) })
	if got := pendingOf(t, hosts[follower-1]); len(got) != 0 {
		t.Fatalf("follower has pending %v, want none", got)
	}
}

func statusOf(t *testing.T, h *Host) Status {
	t.Helper()
	st, err := h.GroupStatus(1)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func appliedOf(t *testing.T, h *Host) uint64 { return statusOf(t, h).Applied }

func head(s []uint64) []uint64 { return s[:min(len(s), 5)] }

// counterValue reads a counter as a scrape would.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gather a counter: %d families, %v", len(mfs), err)
	}
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}
