package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// slowWire is three hosts on a wire whose groups only elect when a test
// makes them campaign: no election timeout fires in the time a test runs.
func slowWire(t *testing.T) (*wire, map[uint64]*Host, map[uint64]*listMachine) {
	t.Helper()
	return wireLedByNode1(t, func(c *Config) { c.ElectionTicks = 100_000 })
}

// wireLedByNode1 is three hosts, configured by mod, on a wire, running
// group 1, which node 1 leads.
func wireLedByNode1(t *testing.T, mod func(*Config)) (*wire, map[uint64]*Host, map[uint64]*listMachine) {
	t.Helper()
	w := &wire{hosts: make(map[uint64]*Host)}
	hosts := wiredHosts(t, w, mod)
	machines := map[uint64]*listMachine{}
	for id := uint64(1); id <= 3; id++ {
		machines[id] = &listMachine{}
		if err := hosts[id].AddGroup(GroupConfig{ID: 1, Name: "g", Peers: []uint64{1, 2, 3}, StateMachine: machines[id]}); err != nil {
			t.Fatal(err)
		}
	}
	// Once every node runs the group: a vote request to a node that does
	// not yet is lost, and nothing would campaign again.
	if err := hosts[1].onLoop(context.Background(), 1, func(g *group) error { return g.rn.Campaign() }); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node 1 leads", func() bool { l, _ := hosts[1].Leader(1); return l == 1 })
	return w, hosts, machines
}

// wiredHosts starts three hosts, nodes 1 to 3, configured by mod, on w;
// they run no group yet.
func wiredHosts(t *testing.T, w *wire, mod func(*Config)) map[uint64]*Host {
	t.Helper()
	hosts := map[uint64]*Host{}
	for id := uint64(1); id <= 3; id++ {
		hosts[id] = newTestHost(t, t.TempDir(), func(c *Config) {
			c.NodeID = id
			c.Transport = wireEnd{w: w, from: id}
			mod(c)
		})
		w.mu.Lock()
		w.hosts[id] = hosts[id]
		w.mu.Unlock()
	}
	return hosts
}

// applied returns what node id's state machine applied.
func applied(t *testing.T, hosts map[uint64]*Host, machines map[uint64]*listMachine, id uint64) []string {
	t.Helper()
	var cmds []string
	if err := hosts[id].View(context.Background(), 1, func(StateMachine, uint64) { cmds = slices.Clone(machines[id].cmds) }); err != nil {
		t.Fatal(err)
	}
	return cmds
}

// A leadership transfer in the middle of a stream of proposals answers
// every one with its result: those in the old leader's log commit under
// the new one, and those raft dropped while handing over are made again.
// So do those a follower forwarded to the old leader, the new leader's
// own included (the old one holds them while it hands over, and passes
// them on once it knows who leads). Each is applied once.
func TestProposalsOutliveALeadershipTransfer(t *testing.T) {
	_, hosts, machines := slowWire(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const proposers, each = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, proposers)
	var transferred sync.Once
	for p := range proposers {
		// Most propose on the leader; some on node 3 and some on node 2,
		// which forward to it, node 2 until it leads.
		via := hosts[1]
		switch p % 4 {
		case 2:
			via = hosts[2]
		case 3:
			via = hosts[3]
		}
		wg.Go(func() {
			for i := range each {
				if p == 0 && i == each/4 {
					transferred.Do(func() {
						if err := hosts[1].TransferLeadership(ctx, 1, 2); err != nil {
							errs <- fmt.Errorf("transfer: %w", err)
						}
					})
				}
				if _, err := via.Propose(ctx, 1, Bytes(fmt.Sprintf("p%d-%d", p, i))); err != nil {
					errs <- fmt.Errorf("proposal %d of proposer %d: %w", i, p, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if l, _ := hosts[1].Leader(1); l != 2 {
		t.Fatalf("node %d leads after the transfer, want 2", l)
	}
	cmds := applied(t, hosts, machines, 2)
	for p := range proposers {
		for i := range each {
			if n := countOf(cmds, fmt.Sprintf("p%d-%d", p, i)); n != 1 {
				t.Fatalf("p%d-%d applied %d times, want once", p, i, n)
			}
		}
	}
}

func countOf(s []string, v string) (n int) {
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// A leader cut off from the others appends proposals that a new leader
// never gets and replaces. Once the old leader applies the new leader's
// entries at those indexes, it knows its proposals were not applied: a
// plain one is made again (and applied once), a leader-only one fails
// with ErrNotApplied. Neither is left to ErrOutcomeUnknown.
func TestProposalsReplacedByANewLeaderAreMadeAgainOrFailCleanly(t *testing.T) {
	w, hosts, machines := slowWire(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	propose(t, hosts[1], 1, "before")
	eventually(t, "every node applied the first command", func() bool {
		return slices.Contains(applied(t, hosts, machines, 2), "before") && slices.Contains(applied(t, hosts, machines, 3), "before")
	})

	w.mu.Lock()
	w.drop = func(m *pb.Message) bool { return m.From == 1 } // node 1 talks to no one
	w.mu.Unlock()
	plain := hosts[1].Start(ctx, 1, Bytes("plain"))
	leaderOnly := make(chan error, 1)
	go func() {
		_, err := hosts[1].ProposeAsLeader(ctx, 1, Bytes("leader-only"))
		leaderOnly <- err
	}()
	eventually(t, "node 1 appended both proposals", func() bool {
		var n int
		hosts[1].onLoop(ctx, 1, func(g *group) error {
			g.props.mu.Lock()
			n = len(g.props.placed)
			g.props.mu.Unlock()
			return nil
		})
		return n == 2
	})

	// Node 3 heard from node 1 within an election timeout, so it would
	// refuse a plain campaign (CheckQuorum's lease): node 2 campaigns as
	// if node 1 handed over, which a voter grants regardless.
	if err := hosts[2].onLoop(ctx, 1, func(g *group) error {
		term := g.rn.BasicStatus().Term
		return g.rn.Step(pb.Message{Type: pb.MsgTimeoutNow, From: 1, To: 2, Term: term})
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node 2 leads", func() bool { l, _ := hosts[3].Leader(1); return l == 2 })
	propose(t, hosts[2], 1, "under node 2")
	w.mu.Lock()
	w.drop = nil
	w.mu.Unlock()

	if _, err := plain.Wait(ctx); err != nil {
		t.Fatalf("the plain proposal: %v, want it made again and applied", err)
	}
	if err := <-leaderOnly; !errors.Is(err, ErrNotApplied) {
		t.Fatalf("the leader-only proposal: %v, want ErrNotApplied", err)
	}
	eventually(t, "node 1 applied what node 2 did", func() bool {
		return slices.Equal(applied(t, hosts, machines, 1), applied(t, hosts, machines, 2))
	})
	cmds := applied(t, hosts, machines, 1)
	if countOf(cmds, "plain") != 1 || countOf(cmds, "leader-only") != 0 {
		t.Fatalf("applied %q: want the plain command once and the leader-only one never", cmds)
	}
}

// A proposal a follower forwarded that its leader never got is answered
// "outcome unknown" once the follower has led for a third of an election
// timeout without it, instead of waiting forever: as a leader, the
// replica expires only what it forwarded before it led.
func TestAForwardLostBeforeTheForwarderLedFailsSoon(t *testing.T) {
	w, hosts, _ := wireLedByNode1(t, func(c *Config) {
		c.ElectionTicks = 30
		c.TickInterval = 10 * time.Millisecond
	})
	eventually(t, "node 2 follows node 1", func() bool { l, _ := hosts[2].Leader(1); return l == 1 })

	w.mu.Lock()
	w.drop = func(m *pb.Message) bool { return m.Type == pb.MsgProp && m.From == 2 }
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lost := hosts[2].Start(ctx, 1, Bytes("lost on the way"))
	time.Sleep(50 * time.Millisecond) // forwarded, and dropped
	if err := hosts[1].TransferLeadership(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	_, err := lost.Wait(ctx)
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a forward lost before its node led: %v; want ErrOutcomeUnknown", err)
	}
	if l, _ := hosts[2].Leader(1); l != 2 {
		t.Fatalf("node %d leads; the test needs node 2 to", l)
	}
}

// A new group's replicas open at about the same time, not at once: the
// replica made to campaign (GroupConfig.Campaign) stands again at each
// tick until its pre-vote wins, instead of leaving the group without a
// leader for an election timeout (here longer than the test) because the
// others did not have the group when it first asked.
func TestANewGroupsCampaignerStandsAgainForLateReplicas(t *testing.T) {
	hosts := wiredHosts(t, &wire{hosts: make(map[uint64]*Host)}, func(c *Config) { c.ElectionTicks = 100_000 })
	add := func(id uint64, campaign bool) {
		t.Helper()
		if err := hosts[id].AddGroup(GroupConfig{ID: 1, Name: "g", Peers: []uint64{1, 2, 3}, StateMachine: &listMachine{}, Campaign: campaign}); err != nil {
			t.Fatal(err)
		}
	}
	add(1, true)
	eventually(t, "node 1 stands for election", func() bool {
		var st raft.BasicStatus
		if err := hosts[1].onLoop(context.Background(), 1, func(g *group) error { st = g.rn.BasicStatus(); return nil }); err != nil {
			t.Fatal(err)
		}
		return st.RaftState == raft.StatePreCandidate
	})
	time.Sleep(50 * time.Millisecond) // its pre-vote reaches no replica of the group
	add(2, false)
	add(3, false)
	eventually(t, "node 1 leads", func() bool { l, _ := hosts[1].Leader(1); return l == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := hosts[2].Propose(ctx, 1, Bytes("first")); err != nil {
		t.Fatalf("a publish through a follower of the new group: %v", err)
	}
}
