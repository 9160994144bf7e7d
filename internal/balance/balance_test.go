package balance

import (
	"testing"

	"herald/internal/controller"
)

func ids(v ...uint64) []uint64 { return v }

func set(v ...uint64) map[uint64]bool {
	m := make(map[uint64]bool, len(v))
	for _, id := range v {
		m[id] = true
	}
	return m
}

// voters is a group of caught-up voters.
func voters(v ...uint64) Group { return Group{Voters: v, CaughtUp: set(v...)} }

// A shard of three replicas on nodes 1, 2, 3 (1 preferred), led by node 1,
// unless a case says otherwise; nodes 1 to 4 take replicas, and node 4
// holds the fewest.
func TestStep(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shard func(*Shard)
		want  Change
	}{
		{"settled", func(*Shard) {}, Change{Reason: Settled}},
		{"a placed node joins as a learner",
			func(s *Shard) { s.Want = ids(1, 2, 3, 4) },
			Change{Op: AddLearner, Node: 4, Reason: Placement}},
		{"a draining node's replica removed from the group is not added back",
			func(s *Shard) { s.Group = voters(1, 2, 4); s.Draining = set(3); s.Want = ids(1, 2, 3, 4) },
			Change{Op: RemoveReplica, Node: 3, Reason: Drain, From: 3}},
		{"a caught-up learner votes",
			func(s *Shard) { s.Want = ids(1, 2, 3, 4); s.Group.Learners = ids(4); s.Group.CaughtUp[4] = true },
			Change{Op: Promote, Node: 4, Reason: Placement}},
		{"a learner catching up is waited for",
			func(s *Shard) { s.Want = ids(1, 2, 3, 4); s.Group.Learners = ids(4) },
			Change{Reason: CatchingUp}},
		{"a learner the placement dropped is removed",
			func(s *Shard) { s.Group.Learners = ids(4) },
			Change{Op: Remove, Node: 4, Reason: Placement}},
		{"a voter the placement dropped is removed",
			func(s *Shard) { s.Group = voters(1, 2, 3, 4) },
			Change{Op: Remove, Node: 4, Reason: Placement}},
		{"the leadership goes to the preferred leader",
			func(s *Shard) { s.Self = 2 },
			Change{Op: Transfer, Node: 1, Reason: Preferred}},
		{"not while a consumer holds a lease",
			func(s *Shard) { s.Self = 2; s.Leased = true },
			Change{Reason: Leased}},
		{"not to a preferred leader that has not caught up",
			func(s *Shard) { s.Self = 2; delete(s.Group.CaughtUp, 1) },
			Change{Reason: Settled}},
		{"not to a preferred leader that does not vote",
			func(s *Shard) { s.Self = 2; s.Group = Group{Voters: ids(2, 3), Learners: ids(1), CaughtUp: set(2, 3)} },
			Change{Reason: CatchingUp}},
		{"a draining preferred replica is replaced before anything else",
			func(s *Shard) { s.Self = 3; s.Want = ids(1, 2, 3); s.Draining = set(1); s.Load = map[uint64]int{4: 0} },
			Change{Op: AddReplica, Node: 4, Reason: Drain, From: 1}},
		{"a draining leader hands over to the preferred voter",
			func(s *Shard) { s.Draining = set(1) },
			Change{Op: Transfer, Node: 2, Reason: HandOver}},
		{"a draining leader hands over even while leased",
			func(s *Shard) { s.Draining = set(1); s.Leased = true },
			Change{Op: Transfer, Node: 2, Reason: HandOver}},
		{"a draining leader skips replicas that have not caught up",
			func(s *Shard) { s.Draining = set(1); delete(s.Group.CaughtUp, 2) },
			Change{Op: Transfer, Node: 3, Reason: HandOver}},
		{"a draining leader skips other draining replicas",
			func(s *Shard) { s.Draining = set(1, 2) },
			Change{Op: Transfer, Node: 3, Reason: HandOver}},
		{"a draining leader with no successor waits",
			func(s *Shard) { s.Draining = set(1); s.Group.CaughtUp = set(1) },
			Change{Reason: NoSuccessor}},
		{"a leader the placement dropped hands over",
			func(s *Shard) { s.Want = ids(2, 3, 4) },
			Change{Op: Transfer, Node: 2, Reason: HandOver}},
		{"a leader the placement dropped hands only to a voter placed",
			func(s *Shard) { s.Want = ids(4, 3); s.Group = voters(1, 2, 3) },
			Change{Op: Transfer, Node: 3, Reason: HandOver}},
		{"a leader whose replica a rebalance moves waits for its leases",
			func(s *Shard) { s.Draining = set(1); s.Leaving = 1; s.Leased = true },
			Change{Reason: Leased}},
		{"and hands over once none is held",
			func(s *Shard) { s.Draining = set(1); s.Leaving = 1 },
			Change{Op: Transfer, Node: 2, Reason: HandOver}},
		{"a draining replica is replaced on the node holding the fewest",
			func(s *Shard) {
				s.Draining = set(3)
				s.Placeable = ids(1, 2, 4, 5)
				s.Load = map[uint64]int{4: 7, 5: 2}
			},
			Change{Op: AddReplica, Node: 5, Reason: Drain, From: 3}},
		{"a draining replica with no node to go to waits",
			func(s *Shard) { s.Draining = set(3); s.Placeable = ids(1, 2, 3) },
			Change{Reason: NoNewHome, From: 3}},
		{"a draining replica stays until its replacement votes",
			func(s *Shard) {
				s.Want = ids(1, 2, 3, 4)
				s.Draining = set(3)
				s.Group = Group{Voters: ids(1, 2, 3), Learners: ids(4), CaughtUp: set(1, 2, 3)}
			},
			Change{Reason: CatchingUp}},
		{"and until every replica staying has caught up",
			func(s *Shard) {
				s.Want = ids(1, 2, 3, 4)
				s.Draining = set(3)
				s.Group = voters(1, 2, 3, 4)
				delete(s.Group.CaughtUp, 2)
			},
			Change{Reason: CatchingUp}},
		{"then leaves the group",
			func(s *Shard) { s.Want = ids(1, 2, 3, 4); s.Draining = set(3); s.Group = voters(1, 2, 3, 4) },
			Change{Op: Remove, Node: 3, Reason: Drain, From: 3}},
		{"then the placement",
			func(s *Shard) { s.Want = ids(1, 2, 3, 4); s.Draining = set(3); s.Group = voters(1, 2, 4) },
			Change{Op: RemoveReplica, Node: 3, Reason: Drain, From: 3}},
		{"with fewer nodes than replicas, a draining one leaves without a replacement",
			func(s *Shard) { s.Draining = set(3); s.Placeable = ids(1, 2) },
			Change{Op: Remove, Node: 3, Reason: Drain, From: 3}},
		{"the first draining replica moves first",
			func(s *Shard) {
				s.Draining = set(2, 3)
				s.Placeable = ids(1, 4, 5)
				s.Load = map[uint64]int{4: 1, 5: 1}
			},
			Change{Op: AddReplica, Node: 4, Reason: Drain, From: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Shard{
				Self: 1, Want: ids(1, 2, 3), Group: voters(1, 2, 3),
				Draining: map[uint64]bool{}, Placeable: ids(1, 2, 3, 4), Load: map[uint64]int{1: 3, 2: 3, 3: 3, 4: 1},
			}
			tc.shard(&s)
			if got := Step(s); got != tc.want {
				t.Errorf("Step = %+v (%v, %v), want %+v (%v, %v)", got, got.Op, got.Reason, tc.want, tc.want.Op, tc.want.Reason)
			}
		})
	}
}

// The controller's group follows the members: nodes 1, 2, 3, led by 1,
// unless a case says otherwise.
func TestStepController(t *testing.T) {
	members := func(draining ...uint64) []controller.Member {
		var out []controller.Member
		for _, id := range ids(1, 2, 3, 4) {
			out = append(out, controller.Member{ID: id, Draining: set(draining...)[id]})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		c    Controller
		want Change
	}{
		{"no membership change yet", Controller{Self: 1, Group: voters(1, 2, 3)}, Change{Reason: Settled}},
		{"an added node joins as a learner",
			Controller{Self: 1, Members: members(), Group: voters(1, 2, 3)},
			Change{Op: AddLearner, Node: 4, Reason: Placement}},
		{"and votes once caught up",
			Controller{Self: 1, Members: members(), Group: Group{Voters: ids(1, 2, 3), Learners: ids(4), CaughtUp: set(1, 2, 3, 4)}},
			Change{Op: Promote, Node: 4, Reason: Placement}},
		{"settled",
			Controller{Self: 1, Members: members(), Group: voters(1, 2, 3, 4)},
			Change{Reason: Settled}},
		{"a draining node that holds replicas stays",
			Controller{Self: 1, Members: members(4), Group: voters(1, 2, 3, 4), Load: map[uint64]int{4: 1}},
			Change{Reason: Settled}},
		{"a draining node that holds none is not added",
			Controller{Self: 1, Members: members(4), Group: voters(1, 2, 3), Load: map[uint64]int{4: 1}},
			Change{Reason: Settled}},
		{"a drained node leaves the group",
			Controller{Self: 1, Members: members(4), Group: voters(1, 2, 3, 4)},
			Change{Op: Remove, Node: 4, Reason: Placement}},
		{"then the members",
			Controller{Self: 1, Members: members(4), Group: voters(1, 2, 3)},
			Change{Op: ForgetNode, Node: 4, Reason: Drained}},
		{"a drained leader hands over",
			Controller{Self: 4, Members: members(4), Group: voters(1, 2, 3, 4)},
			Change{Op: Transfer, Node: 1, Reason: HandOver}},
		{"a drained leader with no caught-up successor waits",
			Controller{Self: 4, Members: members(4), Group: Group{Voters: ids(1, 2, 3, 4), CaughtUp: set(4)}},
			Change{Reason: NoSuccessor}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := StepController(tc.c); got != tc.want {
				t.Errorf("StepController = %+v (%v, %v), want %+v (%v, %v)", got, got.Op, got.Reason, tc.want, tc.want.Op, tc.want.Reason)
			}
		})
	}
}

func TestPreferredLeader(t *testing.T) {
	for _, tc := range []struct {
		replicas []uint64
		draining map[uint64]bool
		want     uint64
	}{
		{ids(2, 1, 3), nil, 2},
		{ids(2, 1, 3), set(2), 1},
		{ids(2, 1), set(1, 2), 0},
		{nil, nil, 0},
	} {
		if got := PreferredLeader(tc.replicas, tc.draining); got != tc.want {
			t.Errorf("PreferredLeader(%v, %v) = %d, want %d", tc.replicas, tc.draining, got, tc.want)
		}
	}
}
