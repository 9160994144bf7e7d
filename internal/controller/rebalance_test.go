package controller

import (
	"bytes"
	"reflect"
	"slices"
	"testing"

	"herald/internal/topic"
)

// threeThenFour returns a state whose topics were placed on nodes 1-3
// before node 4 was added: a (4 shards) and b (5 shards).
func threeThenFour(t *testing.T) *State {
	t.Helper()
	s := New()
	createOn(t, s, "a", 4, 1, 2, 3)
	createOn(t, s, "b", 5, 1, 2, 3)
	if r := apply(t, s, nodeCmd(OpAddNode, 4, "127.0.0.1:7604", 1, 2, 3)); r.Err != nil {
		t.Fatal(r.Err)
	}
	return s
}

// spread returns the replicas and the preferred leaderships per node.
func spread(s *State) (replicas, preferred map[uint64]int) {
	replicas, preferred = map[uint64]int{}, map[uint64]int{}
	for _, tp := range s.Topics() {
		for i := range tp.Placement {
			for _, id := range tp.Placement[i] {
				replicas[id]++
			}
			preferred[tp.Placement[i][0]]++
		}
	}
	return replicas, preferred
}

// rebalance runs a rebalance to its end the way the nodes do: it applies
// each step, and completes each move as the shard's leader would, by
// removing the replica moved away. It returns the moves made.
func rebalance(t *testing.T, s *State) []Move {
	t.Helper()
	if r := apply(t, s, Command{Op: OpRebalance, Time: 7}); r.Err != nil || !s.Rebalancing() {
		t.Fatalf("rebalance: %v, under way %v", r.Err, s.Rebalancing())
	}
	var moves []Move
	var steps []Command
	for range 100 {
		if len(steps) == 0 {
			if steps = s.RebalanceStep(nil); len(steps) == 0 {
				t.Fatalf("no step while nothing moves")
			}
		}
		cmd := steps[0]
		steps = steps[1:]
		cmd.Time = 8
		if r := apply(t, s, cmd); r.Err != nil {
			t.Fatalf("%+v: %v", cmd, r.Err)
		}
		switch cmd.Op {
		case OpRebalanceDone:
			if s.Rebalancing() {
				t.Fatal("still rebalancing after rebalance-done")
			}
			return moves
		case OpMoveReplica:
			m, ok := s.CurrentMove()
			if !ok || m != (Move{Topic: cmd.Name, Shard: cmd.Shard, From: cmd.Node, To: cmd.To}) {
				t.Fatalf("move %+v recorded as %+v, %v", cmd, m, ok)
			}
			if next := s.RebalanceStep(nil); len(next) > 0 {
				t.Fatalf("step %+v while a replica moves: one move at a time", next)
			}
			moves = append(moves, m)
			if r := apply(t, s, replicaCmd(OpRemoveReplica, cmd.Name, cmd.Shard, cmd.Node)); r.Err != nil {
				t.Fatal(r.Err)
			}
			if _, ok := s.CurrentMove(); ok {
				t.Fatal("the move is still recorded after its old replica was removed")
			}
		}
	}
	t.Fatal("the rebalance did not end in 100 steps")
	return nil
}

// A rebalance after a node joins moves replicas onto it, one at a time,
// until every node holds within one of the others, spreads the preferred
// leaders likewise, and ends; run again, it changes nothing.
func TestRebalanceSpreadsReplicasAndLeaders(t *testing.T) {
	s := threeThenFour(t)
	moves := rebalance(t, s)
	replicas, preferred := spread(s)
	if replicas[4] < 6 || len(moves) != replicas[4] {
		t.Errorf("moves %+v; replicas %v: want node 4 to hold 6 or 7, all moved there", moves, replicas)
	}
	for _, m := range moves {
		if m.To != 4 {
			t.Errorf("move %+v: want every move onto the new node", m)
		}
	}
	for _, counts := range []map[uint64]int{replicas, preferred} {
		lo, hi := counts[1], counts[1]
		for id := uint64(1); id <= 4; id++ {
			lo, hi = min(lo, counts[id]), max(hi, counts[id])
		}
		if hi-lo > 1 {
			t.Errorf("per node %v: want within one of each other", counts)
		}
	}
	for _, tp := range s.Topics() {
		for i, r := range tp.Placement {
			if len(r) != 3 || len(slices.Compact(slices.Sorted(slices.Values(r)))) != 3 {
				t.Errorf("%s shard %d on %v, want three distinct nodes", tp.Name, i, r)
			}
		}
	}

	before := s.Topics()
	if moves := rebalance(t, s); len(moves) != 0 || !reflect.DeepEqual(s.Topics(), before) {
		t.Errorf("a second rebalance moved %+v or changed the placement", moves)
	}
}

// A rebalance waits while a node drains, and proposes nothing when none is
// under way.
func TestRebalanceWaits(t *testing.T) {
	s := threeThenFour(t)
	if cmds := s.RebalanceStep(nil); len(cmds) > 0 {
		t.Fatalf("steps %+v with no rebalance under way", cmds)
	}
	apply(t, s, Command{Op: OpRebalance, Time: 7})
	if r := apply(t, s, nodeCmd(OpDrainNode, 1, "")); r.Err != nil {
		t.Fatal(r.Err)
	}
	if cmds := s.RebalanceStep(nil); len(cmds) > 0 {
		t.Fatalf("steps %+v while node 1 drains", cmds)
	}
}

// Replica moves and preferred-leader changes that cannot be made are
// refused with the reason, and change nothing.
func TestRebalanceOpErrorsChangeNothing(t *testing.T) {
	s := threeThenFour(t)
	a, _ := s.Topic("a")
	on, off := a.Replicas(0)[1], uint64(4) // a replica of shard 0, and a node without one
	move := func(from, to uint64) Command {
		return Command{Op: OpMoveReplica, Name: "a", Shard: 0, Node: from, To: to, Time: 9}
	}
	before := s.Topics()
	for _, tc := range []struct {
		cmd  Command
		want string
	}{
		{move(off, 1), "no replica on node 4"},
		{move(on, a.Replicas(0)[0]), "or one on node"},
		{move(on, 9), "node 9 is not a member"},
		{Command{Op: OpSetPreferred, Name: "a", Shard: 0, Node: off, Time: 9}, "node 4 holds no replica of shard a"},
		{Command{Op: OpMoveReplica, Name: "a", Shard: 7, Node: on, To: off, Time: 9}, "has no shard 7"},
	} {
		err := apply(t, s, tc.cmd).Err
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("%+v: %v, want an error saying %q", tc.cmd, err, tc.want)
		}
	}
	if !reflect.DeepEqual(s.Topics(), before) {
		t.Fatal("refused commands changed the topics")
	}
	if _, ok := s.CurrentMove(); ok {
		t.Fatal("a refused move is recorded")
	}

	// One move at a time; the same move proposed again is no error.
	if r := apply(t, s, move(on, off)); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := apply(t, s, move(on, off)); r.Err != nil {
		t.Fatalf("the move proposed again: %v", r.Err)
	}
	during := s.Topics()
	b, _ := s.Topic("b")
	wantErr(t, apply(t, s, Command{Op: OpMoveReplica, Name: "b", Shard: 0, Node: b.Replicas(0)[0], To: off, Time: 9}).Err, ErrMembership, "one move at a time")
	if !reflect.DeepEqual(s.Topics(), during) {
		t.Fatal("a refused second move changed the topics")
	}

	// Malformed commands are refused before they reach the state.
	for _, c := range []Command{
		{Op: OpMoveReplica, Name: "a", Node: 1, Time: 9},         // no To
		{Op: OpMoveReplica, Name: "a", Node: 1, To: 1, Time: 9},  // to itself
		{Op: OpSetPreferred, Name: "a", Node: 1, To: 2, Time: 9}, // To on another op
		{Op: OpRebalance, Name: "a", Time: 9},                    // a topic
		{Op: OpRebalanceDone, Node: 2, Time: 9},                  // a node
	} {
		if _, err := UnmarshalCommand(c.Marshal()); err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.Op)) {
			t.Errorf("%+v: %v, want an invalid-command error naming %s", c, err, c.Op)
		} else {
			wantErr(t, err, topic.ErrInvalid)
		}
	}
}

// A move under way and a rebalance survive a snapshot; a snapshot whose
// move names no topic is refused.
func TestRebalanceSnapshot(t *testing.T) {
	s := threeThenFour(t)
	apply(t, s, Command{Op: OpRebalance, Time: 7})
	cmds := s.RebalanceStep(nil)
	if len(cmds) != 1 || cmds[0].Op != OpMoveReplica {
		t.Fatalf("first step %+v, want a move", cmds)
	}
	if r := apply(t, s, cmds[0]); r.Err != nil {
		t.Fatal(r.Err)
	}
	data := mustSnapshot(t, s)
	r := New()
	if err := r.Restore(data); err != nil {
		t.Fatal(err)
	}
	m1, _ := s.CurrentMove()
	if m2, ok := r.CurrentMove(); !ok || m2 != m1 || !r.Rebalancing() || !bytes.Equal(mustSnapshot(t, r), data) {
		t.Fatalf("restored move %+v, %v, rebalancing %v; want %+v", m2, ok, r.Rebalancing(), m1)
	}
	bad := bytes.Replace(data, []byte(`"move":{"topic":"`+m1.Topic), []byte(`"move":{"topic":"gone`), 1)
	if err := New().Restore(bad); err == nil {
		t.Fatal("a snapshot whose move names no topic was restored")
	}
	// Deleting the topic of a move ends it.
	if r := apply(t, s, Command{Op: OpDelete, Name: m1.Topic, Time: 9}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, ok := s.CurrentMove(); ok {
		t.Fatal("the move of a deleted topic is still recorded")
	}
}

// When no shard the busiest preferred leader leads has a replica on the
// idlest node, the preference moves along a chain: node 1 hands a shard to
// node 2, which hands one of its own to node 4.
func TestLeaderStepFollowsAChain(t *testing.T) {
	s := threeThenFour(t)
	createOn(t, s, "c", 8)
	s.topics["c"].Placement = [][]uint64{
		{1, 2, 3}, {1, 2, 3}, {1, 3, 2}, // node 1: none on node 4
		{2, 4, 3}, {2, 3, 1},
		{4, 1, 2},
		{3, 1, 2}, {3, 2, 1}, // node 3: none on node 4 either
	}
	delete(s.topics, "a")
	delete(s.topics, "b")
	cmds := leaderStep(s.placedShards(), []uint64{1, 2, 3, 4})
	want := []Command{
		{Op: OpSetPreferred, Name: "c", Shard: 3, Node: 4},
		{Op: OpSetPreferred, Name: "c", Shard: 0, Node: 2},
	}
	if !reflect.DeepEqual(cmds, want) {
		t.Fatalf("chain %+v, want %+v", cmds, want)
	}
	for _, c := range cmds {
		if r := apply(t, s, c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if _, led := spread(s); !reflect.DeepEqual(led, map[uint64]int{1: 2, 2: 2, 3: 2, 4: 2}) {
		t.Errorf("preferred leaders per node %v, want 2 each", led)
	}
	if cmds := leaderStep(s.placedShards(), []uint64{1, 2, 3, 4}); len(cmds) != 0 {
		t.Errorf("more steps %+v once even", cmds)
	}
}
