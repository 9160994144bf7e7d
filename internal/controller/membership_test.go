package controller

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"herald/internal/topic"
)

func nodeCmd(op string, node uint64, addr string, seed ...uint64) Command {
	return Command{Op: op, Node: node, Address: addr, Members: seed, Time: 5}
}

func replicaCmd(op, name string, shard int, node uint64) Command {
	return Command{Op: op, Name: name, Shard: shard, Node: node, Time: 6}
}

func createOn(t *testing.T, s *State, name string, shards int, members ...uint64) Topic {
	t.Helper()
	r := apply(t, s, Command{Op: OpCreate, Name: name, Attributes: attrs(t, map[string]string{"shards": strconv.Itoa(shards)}), Members: members, Time: 1})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return r.Topic
}

// Adding a node records the members the cluster started with (the
// proposer's) and the new one; new topics are placed over them all, and
// not on a draining node.
func TestAddAndDrainNodeSteerPlacement(t *testing.T) {
	s := New()
	if got := s.Members(); got != nil {
		t.Fatalf("members before any change: %v", got)
	}
	if r := apply(t, s, nodeCmd(OpAddNode, 4, "127.0.0.1:7604", 1, 2, 3)); r.Err != nil {
		t.Fatal(r.Err)
	}
	want := []Member{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4, Address: "127.0.0.1:7604"}}
	if got := s.Members(); !reflect.DeepEqual(got, want) {
		t.Fatalf("members %+v, want %+v", got, want)
	}
	if got := s.Founders(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("founders %v, want the proposer's members 1, 2, 3", got)
	}
	// A retried add changes nothing; the proposer's members are only a seed.
	if r := apply(t, s, nodeCmd(OpAddNode, 4, "127.0.0.1:7604", 1, 2)); r.Err != nil || !reflect.DeepEqual(s.Members(), want) {
		t.Fatalf("retried add: %v, members %+v", r.Err, s.Members())
	}
	tp := createOn(t, s, "a", 4, 1, 2, 3) // the command's members are ignored now
	used := map[uint64]bool{}
	for i := range 4 {
		for _, id := range tp.Replicas(i) {
			used[id] = true
		}
	}
	if !used[4] {
		t.Errorf("no shard of a new topic is placed on the added node 4: %v", tp.Placement)
	}

	if r := apply(t, s, nodeCmd(OpDrainNode, 2, "")); r.Err != nil {
		t.Fatal(r.Err)
	}
	tp = createOn(t, s, "b", 4)
	for i := range 4 {
		if slices.Contains(tp.Replicas(i), 2) {
			t.Errorf("shard %d of a topic created after node 2 began draining is placed on it: %v", i, tp.Replicas(i))
		}
	}
}

func TestMembershipErrorsChangeNothing(t *testing.T) {
	s := New()
	createOn(t, s, "a", 3, 1, 2, 3)
	// A rejected first change does not record the proposer's members.
	wantErr(t, apply(t, s, nodeCmd(OpDrainNode, 9, "", 1, 2, 3)).Err, ErrNodeNotFound, "node 9")
	wantErr(t, apply(t, s, nodeCmd(OpDrainNode, 1, "", 1, 2, 3)).Err, ErrMembership, "only 2 other nodes")
	if got := s.Members(); got != nil {
		t.Fatalf("rejected commands recorded members %+v", got)
	}
	apply(t, s, nodeCmd(OpAddNode, 4, "127.0.0.1:7604", 1, 2, 3))
	before := mustSnapshot(t, s)
	for _, tc := range []struct {
		cmd    Command
		target error
		want   string
	}{
		{nodeCmd(OpAddNode, 4, "127.0.0.1:9999"), ErrNodeExists, "node 4 is already a member (at 127.0.0.1:7604)"},
		{nodeCmd(OpAddNode, 2, "127.0.0.1:7602"), ErrNodeExists, "give the new node another id"},
		{nodeCmd(OpAddNode, 5, "nowhere"), topic.ErrInvalid, `invalid node address "nowhere" for node 5`},
		{nodeCmd(OpAddNode, 0, "127.0.0.1:1"), topic.ErrInvalid, "names no node"},
		{nodeCmd(OpDrainNode, 9, ""), ErrNodeNotFound, "node 9 is not a member"},
		{nodeCmd(OpDrainNode, 1, "127.0.0.1:1"), topic.ErrInvalid, "only add-node takes"},
		{nodeCmd(OpForgetNode, 1, ""), ErrMembership, "node 1 is not draining"},
		{nodeCmd(OpForgetNode, 8, ""), ErrNodeNotFound, "node 8"},
		{replicaCmd(OpAddReplica, "a", 3, 4), topic.ErrInvalid, `topic "a" has no shard 3`},
		{replicaCmd(OpAddReplica, "nope", 0, 4), ErrTopicNotFound, `topic "nope" does not exist`},
		{replicaCmd(OpAddReplica, "a", 0, 7), ErrMembership, "node 7 is not a member that takes replicas"},
		{replicaCmd(OpAddReplica, "a", -1, 4), topic.ErrInvalid, "shards are numbered from 0"},
		{Command{Op: OpDrainNode, Node: 1, Name: "a"}, topic.ErrInvalid, "names a topic or shard"},
		{Command{Op: OpDelete, Name: "a", Node: 1}, topic.ErrInvalid, "only membership ops take"},
	} {
		wantErr(t, apply(t, s, tc.cmd).Err, tc.target, tc.want)
	}
	assertUnchangedButApplied(t, s, before)

	// Three replicas per shard need three nodes besides a drained one:
	// with four nodes, two cannot drain.
	if r := apply(t, s, nodeCmd(OpDrainNode, 1, "")); r.Err != nil {
		t.Fatal(r.Err)
	}
	before = mustSnapshot(t, s)
	wantErr(t, apply(t, s, nodeCmd(OpDrainNode, 2, "")).Err, ErrMembership, "only 2 other nodes would be left", "herald cluster add")
	wantErr(t, apply(t, s, nodeCmd(OpForgetNode, 1, "")).Err, ErrMembership, "node 1 still holds a replica of shard a")
	wantErr(t, apply(t, s, replicaCmd(OpAddReplica, "a", 0, 1)).Err, ErrMembership, "draining")
	assertUnchangedButApplied(t, s, before)
}

// A drain moves a replica in two recorded steps; the voters each group
// was created with are kept, so that a new replica starts where the
// first ones did. Once a drained node holds nothing, it can be forgotten.
func TestMoveReplicasOffADrainedNode(t *testing.T) {
	s := New()
	tp := createOn(t, s, "a", 1, 1, 2, 3)
	first := tp.Replicas(0)
	apply(t, s, nodeCmd(OpAddNode, 4, "127.0.0.1:7604", 1, 2, 3))
	apply(t, s, nodeCmd(OpDrainNode, first[0], ""))

	r := apply(t, s, replicaCmd(OpAddReplica, "a", 0, 4))
	if r.Err != nil || !slices.Equal(r.Topic.Replicas(0), append(slices.Clone(first), 4)) {
		t.Fatalf("add replica: %v, %v", r.Err, r.Topic.Replicas(0))
	}
	if again := apply(t, s, replicaCmd(OpAddReplica, "a", 0, 4)); again.Err != nil || len(again.Topic.Replicas(0)) != 4 {
		t.Errorf("adding the replica again: %v, %v", again.Err, again.Topic.Replicas(0))
	}
	r = apply(t, s, replicaCmd(OpRemoveReplica, "a", 0, first[0]))
	if r.Err != nil || slices.Contains(r.Topic.Replicas(0), first[0]) || len(r.Topic.Replicas(0)) != 3 {
		t.Fatalf("remove replica: %v, %v", r.Err, r.Topic.Replicas(0))
	}
	if got := r.Topic.BootstrapVoters(0); !slices.Equal(got, first) {
		t.Errorf("bootstrap voters %v, want the first placement %v", got, first)
	}
	if r := apply(t, s, nodeCmd(OpForgetNode, first[0], "")); r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, m := range s.Members() {
		if m.ID == first[0] {
			t.Errorf("forgotten node %d is still a member", m.ID)
		}
	}

	// The membership survives a snapshot.
	snap := mustSnapshot(t, s)
	back := New()
	if err := back.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustSnapshot(t, back), snap) || !reflect.DeepEqual(back.Members(), s.Members()) || !slices.Equal(back.Founders(), []uint64{1, 2, 3}) {
		t.Errorf("restored state differs: %s", mustSnapshot(t, back))
	}

	// The last replica of a shard is never removed.
	one := createOn(t, s, "solo", 1)
	only := one.Replicas(0)
	if len(only) != 3 {
		t.Fatalf("solo placed on %v", only)
	}
	for _, id := range only[:2] {
		apply(t, s, replicaCmd(OpRemoveReplica, "solo", 0, id))
	}
	err := apply(t, s, replicaCmd(OpRemoveReplica, "solo", 0, only[2])).Err
	if !errors.Is(err, ErrMembership) {
		t.Errorf("removing the last replica: %v, want ErrMembership", err)
	}
}

func TestRestoreRejectsBadMembers(t *testing.T) {
	s := New()
	for data, want := range map[string]string{
		`{"version":1,"next_group":2,"members":[{"id":2},{"id":1}]}`: "not sorted",
		`{"version":1,"next_group":2,"members":[{"id":0}]}`:          "from 1 up",
		`{"version":1,"next_group":2,"founders":[3,1]}`:              "founders [3 1] are not sorted",
	} {
		if err := s.Restore([]byte(data)); !errors.Is(err, ErrInvalidSnapshot) || !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("Restore(%s) = %v, want ErrInvalidSnapshot with %q", data, err, want)
		}
	}
}
