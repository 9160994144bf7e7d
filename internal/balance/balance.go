// Package balance decides how a Raft group led by this node follows the
// controller's placement. It does no I/O: given a group's placement, its
// configuration, its replicas' progress and the cluster's draining nodes,
// Step returns the one next change, which the node carries out:
//
//   - the preferred leader of a shard (its first replica not draining)
//     leads it once it is up and has the whole log;
//   - a replica placed on a new node joins as a learner, and votes once it
//     has caught up;
//   - a replica on a draining node is replaced: the controller places one
//     on another node, which joins as above, and only when every other
//     replica votes and is caught up is the draining one removed from the
//     group and then from the placement. A draining node hands the
//     leadership of its shards over first.
//
// Every step is one Raft configuration change or one controller command,
// decided afresh at each check from the placement, the group's
// configuration and its replicas' progress, so that a balancer that stops
// half way (a crash, a change of leader) is continued by the next leader.
// StepController does the same for the controller's own group, which
// follows the cluster's members.
package balance

import (
	"slices"

	"herald/internal/controller"
)

// Op is the kind of a Change.
type Op int

const (
	// None: nothing to do now (Change.Reason says why).
	None Op = iota
	// AddLearner adds Node to the group as a learner.
	AddLearner
	// Promote makes the learner Node a voter.
	Promote
	// Remove takes Node out of the group.
	Remove
	// Transfer hands the group's leadership to Node.
	Transfer
	// AddReplica asks the controller to place a replica of the shard on
	// Node.
	AddReplica
	// RemoveReplica asks the controller to take the shard's replica on
	// Node out of its placement.
	RemoveReplica
	// ForgetNode asks the controller to forget Node, a drained member
	// that holds no replica and has left the controller's group.
	ForgetNode
)

var opNames = [...]string{"none", "add learner", "promote", "remove", "transfer leadership", "add replica", "remove replica", "forget node"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "op?"
}

// Reason says why Step chose a change (or none), for the node's log and
// for tests.
type Reason int

const (
	// Settled: the group follows its placement and is led by its
	// preferred leader.
	Settled Reason = iota
	// Placement: the group's configuration moves toward the placement.
	Placement
	// CatchingUp: a learner, or a replica replacing a draining one, has
	// not caught up yet.
	CatchingUp
	// HandOver: this node's replica goes (it drains, or the placement
	// dropped it), so it hands the leadership over first.
	HandOver
	// NoSuccessor: this node's replica goes, but no replica can take the
	// leadership over yet.
	NoSuccessor
	// Leased: a change waits until no consumer holds a lease on the shard.
	Leased
	// Drain: a replica moves off a draining (or rebalanced) node.
	Drain
	// NoNewHome: a draining node's replica needs a new node, and no
	// member can take it.
	NoNewHome
	// Preferred: the leadership goes to the shard's preferred leader.
	Preferred
	// Drained: a drained node left the controller's group.
	Drained
)

var reasonNames = [...]string{"settled", "placement", "catching up", "hand over", "no successor", "leased", "drain", "no new home", "preferred leader", "drained"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "reason?"
}

// Change is the next step for a group: Op on Node, for Reason.
type Change struct {
	Op     Op
	Node   uint64
	Reason Reason
	// From is, for a Drain or NoNewHome change, the draining node whose
	// replica moves.
	From uint64
}

// Group is a Raft group as its leader sees it.
type Group struct {
	Voters   []uint64
	Learners []uint64
	// CaughtUp holds the replicas that answer and hold the leader's
	// whole log: those that may be promoted, let another replica be
	// removed, or take the leadership.
	CaughtUp map[uint64]bool
}

func (g Group) has(id uint64) bool {
	return slices.Contains(g.Voters, id) || slices.Contains(g.Learners, id)
}

// Shard is what Step reads of one shard this node leads.
type Shard struct {
	Self uint64 // this node, the group's leader
	// Want is the shard's placement: the nodes the controller places
	// it on, the preferred leader first.
	Want  []uint64
	Group Group
	// Draining are the nodes whose replicas move off: the draining
	// members, and for the shard whose replica a rebalance moves, the
	// node it moves from (Leaving).
	Draining map[uint64]bool
	// Leaving is the node whose replica of this shard a rebalance moves,
	// or 0.
	Leaving uint64
	// Leased: a consumer holds a lease on an event of the shard.
	Leased bool
	// Placeable are the members that take new replicas.
	Placeable []uint64
	// Load is how many replicas the placement puts on each node.
	Load map[uint64]int
}

// PreferredLeader is the first replica not draining, or 0.
func PreferredLeader(replicas []uint64, draining map[uint64]bool) uint64 {
	for _, id := range replicas {
		if !draining[id] {
			return id
		}
	}
	return 0
}

// DrainingSet returns the draining members.
func DrainingSet(members []controller.Member) map[uint64]bool {
	d := make(map[uint64]bool)
	for _, m := range members {
		if m.Draining {
			d[m.ID] = true
		}
	}
	return d
}

// Step returns the next change for the shard.
func Step(s Shard) Change {
	// A draining leader, or one the placement dropped, hands over first;
	// one whose replica a rebalance moves is in no hurry, and waits until
	// no consumer holds a lease, as below.
	if s.Draining[s.Self] || !slices.Contains(s.Want, s.Self) {
		if s.Self == s.Leaving && s.Leased {
			return Change{Reason: Leased}
		}
		return handOver(s.Self, s.Group, s.Want, s.Draining)
	}
	if c, done := followPlacement(s.Group, s.Want, s.Draining); done {
		return c
	}
	if c, done := moveOffDraining(s); done {
		return c
	}
	// Pull leases live in the leader's memory, so a transfer would hand
	// leased events out again, after later ones of their keys: balancing
	// waits until no consumer holds a lease on the shard.
	p := PreferredLeader(s.Want, s.Draining)
	if p == s.Self || p == 0 || !slices.Contains(s.Group.Voters, p) || !s.Group.CaughtUp[p] {
		return Change{Reason: Settled}
	}
	if s.Leased {
		return Change{Reason: Leased}
	}
	return Change{Op: Transfer, Node: p, Reason: Preferred}
}

// handOver transfers the leadership to a caught-up voter that stays: the
// preferred one if it can.
func handOver(self uint64, g Group, want []uint64, draining map[uint64]bool) Change {
	for _, id := range slices.Concat(want, g.Voters) {
		if id != self && !draining[id] && slices.Contains(want, id) && slices.Contains(g.Voters, id) && g.CaughtUp[id] {
			return Change{Op: Transfer, Node: id, Reason: HandOver}
		}
	}
	return Change{Reason: NoSuccessor} // no replica can take over yet
}

// followPlacement makes one change of the group's configuration toward
// the placement: a placed node joins as a learner, a caught-up learner
// votes, and a replica the placement no longer has is removed. It reports
// whether it made (or waits for) a change.
func followPlacement(g Group, want []uint64, draining map[uint64]bool) (Change, bool) {
	for _, id := range want {
		// A draining node's replica, once removed from the group, is
		// not added back: it waits to leave the placement.
		if !g.has(id) && !draining[id] {
			return Change{Op: AddLearner, Node: id, Reason: Placement}, true
		}
	}
	catchingUp := false
	for _, id := range g.Learners {
		switch {
		case !slices.Contains(want, id):
			return Change{Op: Remove, Node: id, Reason: Placement}, true
		case g.CaughtUp[id]:
			return Change{Op: Promote, Node: id, Reason: Placement}, true
		default:
			catchingUp = true
		}
	}
	if catchingUp {
		return Change{Reason: CatchingUp}, true
	}
	for _, id := range g.Voters {
		if !slices.Contains(want, id) {
			return Change{Op: Remove, Node: id, Reason: Placement}, true
		}
	}
	return Change{}, false
}

// moveOffDraining moves one replica of the shard off a draining node:
// first the controller places a replica on another node (which
// followPlacement then adds), and once every other replica votes and has
// the whole log, the draining one leaves the group, then the placement.
func moveOffDraining(s Shard) (Change, bool) {
	var gone uint64
	var staying []uint64
	for _, id := range s.Want {
		if s.Draining[id] {
			if gone == 0 {
				gone = id
			}
		} else {
			staying = append(staying, id)
		}
	}
	if gone == 0 {
		return Change{}, false
	}
	target := min(controller.ReplicationFactor, len(s.Placeable), len(s.Want))
	if len(staying) < target {
		to := newHome(s.Want, s.Placeable, s.Load)
		if to == 0 {
			return Change{Reason: NoNewHome, From: gone}, true
		}
		return Change{Op: AddReplica, Node: to, Reason: Drain, From: gone}, true
	}
	for _, id := range staying {
		if !slices.Contains(s.Group.Voters, id) || !s.Group.CaughtUp[id] {
			return Change{Reason: CatchingUp}, true // the new replica is still catching up
		}
	}
	if slices.Contains(s.Group.Voters, gone) {
		return Change{Op: Remove, Node: gone, Reason: Drain, From: gone}, true
	}
	return Change{Op: RemoveReplica, Node: gone, Reason: Drain, From: gone}, true
}

// newHome picks the node for a new replica: a member that takes
// replicas, does not hold one of the shard, and holds the fewest.
func newHome(want, placeable []uint64, load map[uint64]int) uint64 {
	var best uint64
	for _, id := range placeable {
		if slices.Contains(want, id) {
			continue
		}
		if best == 0 || load[id] < load[best] {
			best = id
		}
	}
	return best
}

// Controller is what StepController reads of the controller's group,
// which this node leads.
type Controller struct {
	Self    uint64
	Members []controller.Member
	Group   Group
	// Load is how many replicas the placement puts on each node.
	Load map[uint64]int
}

// StepController returns the next change making the controller's own
// group follow the members: an added node joins it as a learner and votes
// once caught up, and a drained node that holds no replica leaves it and
// then the members.
func StepController(c Controller) Change {
	if len(c.Members) == 0 {
		return Change{Reason: Settled}
	}
	draining := DrainingSet(c.Members)
	var want []uint64
	for _, m := range c.Members {
		if !m.Draining || c.Load[m.ID] > 0 {
			want = append(want, m.ID)
		}
	}
	if !slices.Contains(want, c.Self) {
		return handOver(c.Self, c.Group, want, draining)
	}
	if ch, done := followPlacement(c.Group, want, draining); done {
		return ch
	}
	for _, m := range c.Members {
		if m.Draining && c.Load[m.ID] == 0 && !c.Group.has(m.ID) {
			return Change{Op: ForgetNode, Node: m.ID, Reason: Drained}
		}
	}
	return Change{Reason: Settled}
}
