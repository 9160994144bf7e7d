package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	clusterv1 "herald/proto/herald/cluster/v1"
)

// wire connects the hosts of a membership test in one process.
type wire struct {
	mu      sync.Mutex
	hosts   map[uint64]*Host
	appends int                      // append messages (MsgApp) sent
	drop    func(m *pb.Message) bool // messages lost on the way, when set
}

type wireEnd struct {
	w    *wire
	from uint64
}

func (e wireEnd) Send(group uint64, msgs []pb.Message) {
	for _, m := range msgs {
		e.w.mu.Lock()
		to, from := e.w.hosts[m.To], e.w.hosts[e.from]
		if m.Type == pb.MsgApp {
			e.w.appends++
		}
		if e.w.drop != nil && e.w.drop(&m) {
			e.w.mu.Unlock()
			continue
		}
		e.w.mu.Unlock()
		ok := to != nil && to.Receive(group, m) == nil
		if from == nil {
			continue
		}
		if m.Type == pb.MsgSnap {
			from.ReportSnapshot(group, m.To, !ok)
		} else if !ok {
			from.ReportUnreachable(group, m.To)
		}
	}
}

func (e wireEnd) Entries(context.Context, uint64, *clusterv1.EntriesRequest) (*clusterv1.EntriesResponse, error) {
	return nil, errors.New("no calls in membership tests")
}

func (e wireEnd) Readd(context.Context, uint64, *clusterv1.ReaddRequest) (*clusterv1.ReaddResponse, error) {
	return nil, errors.New("no calls in membership tests")
}

func (w *wire) host(t *testing.T, id uint64) *Host {
	h := newTestHost(t, t.TempDir(), func(c *Config) {
		c.NodeID = id
		c.SnapshotEntries = 8 // so that a new replica may need a snapshot
		c.Transport = wireEnd{w: w, from: id}
	})
	w.mu.Lock()
	w.hosts[id] = h
	w.mu.Unlock()
	return h
}

// makeLeader waits until node id leads group: a node that campaigns may
// win before its peers have the group, or lose; whoever wins hands the
// leadership to id.
func makeLeader(t *testing.T, hosts map[uint64]*Host, group, id uint64) {
	t.Helper()
	eventually(t, fmt.Sprintf("node %d leads", id), func() bool {
		l, _ := hosts[id].Leader(group)
		if l != 0 && l != id {
			hosts[l].TransferLeadership(context.Background(), group, id)
		}
		return l == id
	})
}

// eventually polls cond until it holds or ten seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMoveReplicaThroughLearner moves a group's replica from node 3 to a
// new node 4 the way a drain does: 4 joins as a learner, bootstrapped
// with the group's original voters; once caught up it is promoted, then 3
// is removed; the leadership is handed to 4, which then has every entry.
// A follower cannot change the membership or hand over the leadership.
func TestMoveReplicaThroughLearner(t *testing.T) {
	ctx := context.Background()
	w := &wire{hosts: make(map[uint64]*Host)}
	hosts := map[uint64]*Host{}
	for id := uint64(1); id <= 3; id++ {
		hosts[id] = w.host(t, id)
	}
	for id := uint64(1); id <= 3; id++ {
		if err := hosts[id].AddGroup(GroupConfig{ID: 7, Name: "g", Peers: []uint64{1, 2, 3}, Campaign: id == 1, StateMachine: &listMachine{}}); err != nil {
			t.Fatal(err)
		}
	}
	makeLeader(t, hosts, 7, 1)
	var want []string
	for i := range 20 {
		cmd := string(rune('a' + i))
		propose(t, hosts[1], 7, cmd)
		want = append(want, cmd)
	}

	if err := hosts[2].ChangeMembership(ctx, 7, AddLearner, 4); !errors.Is(err, ErrNotLeader) {
		t.Errorf("a follower changed the membership: %v, want ErrNotLeader", err)
	}
	if err := hosts[2].TransferLeadership(ctx, 7, 2); !errors.Is(err, ErrNotLeader) {
		t.Errorf("a follower transferred the leadership: %v, want ErrNotLeader", err)
	}
	if err := hosts[1].ChangeMembership(ctx, 7, AddLearner, 0); err == nil {
		t.Error("adding node 0 was accepted")
	}

	hosts[4] = w.host(t, 4)
	if err := hosts[1].ChangeMembership(ctx, 7, AddLearner, 4); err != nil {
		t.Fatal(err)
	}
	if err := hosts[4].AddGroup(GroupConfig{ID: 7, Name: "g", Peers: []uint64{1, 2, 3}, StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node 4 catches up as a learner", func() bool {
		m, err := hosts[1].Membership(ctx, 7)
		return err == nil && slices.Equal(m.Learners, []uint64{4}) && m.CaughtUp(4)
	})
	if err := hosts[1].ChangeMembership(ctx, 7, AddVoter, 4); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node 4 votes", func() bool {
		m, _ := hosts[1].Membership(ctx, 7)
		return slices.Equal(m.Voters, []uint64{1, 2, 3, 4}) && len(m.Learners) == 0
	})
	if err := hosts[1].ChangeMembership(ctx, 7, RemoveMember, 3); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node 3 is removed on node 4 too", func() bool {
		m, _ := hosts[4].Membership(ctx, 7)
		return slices.Equal(m.Voters, []uint64{1, 2, 4})
	})
	if err := hosts[3].RemoveGroup(7, true); err != nil {
		t.Fatal(err)
	}
	propose(t, hosts[1], 7, "after the move")
	want = append(want, "after the move")

	if err := hosts[1].TransferLeadership(ctx, 7, 4); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node 4 leads", func() bool { l, _ := hosts[4].Leader(7); return l == 4 })
	propose(t, hosts[4], 7, "led by 4")
	want = append(want, "led by 4")
	eventually(t, "node 4 applied everything", func() bool { return slices.Equal(machineState(t, hosts[4], 7), want) })
	eventually(t, "leader 4 sees 1 and 2 caught up, and no 3", func() bool {
		m, _ := hosts[4].Membership(ctx, 7)
		return m.CaughtUp(1) && m.CaughtUp(2) && !m.CaughtUp(3) && len(m.Peers) == 3
	})
}
