package controller

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"herald/internal/topic"
)

// Rebalancing. After nodes are added, the replicas of existing topics stay
// where they were; a rebalance (OpRebalance) spreads them so that every
// node holds an even share, then spreads the shards' preferred leaders.
// The controller records the decisions, one replica move at a time
// (Move); the shard's leader carries each move out as it does a drain
// (adding the new replica as a learner, promoting it once caught up,
// removing the old one from the group, then OpRemoveReplica, which ends
// the move). RebalanceStep decides the next command from the state alone,
// so that whichever node leads the controller continues a rebalance its
// predecessor started.

// Move is a replica of a shard moving from one node to another.
type Move struct {
	Topic string `json:"topic"`
	Shard int    `json:"shard"`
	From  uint64 `json:"from"`
	To    uint64 `json:"to"`
}

// Rebalancing reports whether a rebalance is under way.
func (s *State) Rebalancing() bool { return s.rebalancing }

// CurrentMove returns the replica move under way, if any.
func (s *State) CurrentMove() (Move, bool) {
	if s.move == nil {
		return Move{}, false
	}
	return *s.move, true
}

// moveReplica places a replica of a shard on c.To, after the others, to
// replace the one on c.Node, which stays until its replacement has caught
// up. One move at a time: the group changes one replica at a time, and
// the cluster never carries more than one extra copy.
func (s *State) moveReplica(c *Command) Result {
	t, err := s.replicaTarget(c)
	if err != nil {
		return Result{Err: err}
	}
	if m := s.move; m != nil {
		if *m == (Move{Topic: c.Name, Shard: c.Shard, From: c.Node, To: c.To}) {
			return Result{Topic: t.clone()} // proposed again: already under way
		}
		return Result{Err: &detailError{ErrMembership, fmt.Sprintf("the replica of shard %s on node %d is moving to node %d; one move at a time",
			topic.ShardName(m.Topic, m.Shard), m.From, m.To)}}
	}
	r := t.Replicas(c.Shard)
	if !slices.Contains(r, c.Node) || slices.Contains(r, c.To) {
		return Result{Err: &detailError{ErrMembership, fmt.Sprintf("shard %s is on nodes %v: it has no replica on node %d to move, or one on node %d already",
			topic.ShardName(t.Name, c.Shard), r, c.Node, c.To)}}
	}
	if i, ok := findMember(s.members, c.To); len(s.members) > 0 && (!ok || s.members[i].Draining) {
		return Result{Err: &detailError{ErrMembership, fmt.Sprintf("node %d is not a member that takes replicas (it is unknown or draining); add it first (herald cluster add)", c.To)}}
	}
	t.keepBootstrap()
	t.Placement[c.Shard] = append(t.Placement[c.Shard], c.To)
	t.UpdatedAt = c.Time
	s.move = &Move{Topic: c.Name, Shard: c.Shard, From: c.Node, To: c.To}
	return Result{Topic: t.clone()}
}

// setPreferred makes c.Node, a replica of the shard, its preferred leader
// (its first replica); the shard's leader then hands it the leadership.
func (s *State) setPreferred(c *Command) Result {
	t, err := s.replicaTarget(c)
	if err != nil {
		return Result{Err: err}
	}
	r := t.Replicas(c.Shard)
	i := slices.Index(r, c.Node)
	if i < 0 {
		return Result{Err: &detailError{ErrMembership, fmt.Sprintf("node %d holds no replica of shard %s (its replicas are on %v)",
			c.Node, topic.ShardName(t.Name, c.Shard), r)}}
	}
	if i == 0 {
		return Result{Topic: t.clone()}
	}
	t.keepBootstrap()
	p := t.Placement[c.Shard]
	copy(p[1:i+1], p[:i])
	p[0] = c.Node
	t.UpdatedAt = c.Time
	return Result{Topic: t.clone()}
}

// RebalanceStep returns the next commands of the rebalance under way, to
// propose in order, or none when there is nothing to propose now: no
// rebalance is under way, a replica is still moving, or a node is draining
// (a drain moves replicas too; the rebalance waits for it). proposers are
// the cluster's nodes as the proposer knows them, used while the state
// records no members.
//
// The steps: while the node holding the most replicas holds at least two
// more than the one holding the fewest, move one of its replicas there,
// preferring one it is not the preferred leader of; then, while the node
// that is the preferred leader of the most shards is that of two more
// than some node it can hand one to, through a chain of shards (each
// shard's preferred leader becoming another of its replicas, the next
// link's), hand one along the chain; then end the rebalance. Each step
// narrows the spread, so the rebalance ends; once it has, running it again
// changes nothing.
func (s *State) RebalanceStep(proposers []uint64) []Command {
	if !s.rebalancing || s.move != nil || slices.ContainsFunc(s.members, func(m Member) bool { return m.Draining }) {
		return nil
	}
	nodes := s.placeable(proposers)
	shards := s.placedShards()
	if cmd, ok := replicaStep(shards, nodes); ok {
		return []Command{cmd}
	}
	if cmds := leaderStep(shards, nodes); len(cmds) > 0 {
		return cmds
	}
	return []Command{{Op: OpRebalanceDone}}
}

// placedShard is one shard of a topic with a placement.
type placedShard struct {
	t     *Topic
	shard int
}

// placedShards lists the shards of topics with a placement, by topic name
// and shard: every replica makes the same choices.
func (s *State) placedShards() []placedShard {
	var out []placedShard
	for _, name := range slices.Sorted(maps.Keys(s.topics)) {
		t := s.topics[name]
		for i := range t.Placement {
			out = append(out, placedShard{t, i})
		}
	}
	return out
}

// byCount returns nodes sorted by count, fewest first, then by id.
func byCount(nodes []uint64, count map[uint64]int) []uint64 {
	return slices.SortedFunc(slices.Values(nodes), func(a, b uint64) int {
		return cmp.Or(cmp.Compare(count[a], count[b]), cmp.Compare(a, b))
	})
}

func replicaStep(shards []placedShard, nodes []uint64) (Command, bool) {
	load := make(map[uint64]int)
	for _, ps := range shards {
		for _, id := range ps.t.Placement[ps.shard] {
			load[id]++
		}
	}
	order := byCount(nodes, load)
	if len(order) < 2 {
		return Command{}, false
	}
	lo, hi := order[0], order[len(order)-1]
	if load[hi]-load[lo] < 2 {
		return Command{}, false
	}
	var pick *placedShard
	for i, ps := range shards {
		r := ps.t.Placement[ps.shard]
		if !slices.Contains(r, hi) || slices.Contains(r, lo) {
			continue
		}
		if pick == nil || (pick.t.Placement[pick.shard][0] == hi && r[0] != hi) {
			pick = &shards[i]
		}
	}
	if pick == nil { // cannot be: hi holds more shards than lo, so one lo lacks
		return Command{}, false
	}
	return Command{Op: OpMoveReplica, Name: pick.t.Name, Shard: pick.shard, Node: hi, To: lo}, true
}

// leaderStep finds a chain of shards along which a node that is the
// preferred leader of the most shards can hand one to a node that is of
// at least two fewer: the first shard's preferred leader is the busiest
// node, and each next shard's is the replica the previous one hands to;
// the last hands to the other node. Every node on the chain but its ends
// gives one and takes one. It returns the set-preferred commands, last
// link first, so that no node is ever the preferred leader of more than
// it was.
func leaderStep(shards []placedShard, nodes []uint64) []Command {
	led := make(map[uint64]int)
	for _, ps := range shards {
		led[ps.t.Placement[ps.shard][0]]++
	}
	member := make(map[uint64]bool, len(nodes))
	for _, id := range nodes {
		member[id] = true
	}
	order := byCount(nodes, led)
	for j := len(order) - 1; j > 0; j-- {
		if cmds := leaderChain(shards, led, member, order[j]); len(cmds) > 0 {
			return cmds
		}
	}
	return nil
}

// leaderChain searches, breadth first, for the shortest chain from hi to
// a node that is the preferred leader of at least two fewer shards.
func leaderChain(shards []placedShard, led map[uint64]int, member map[uint64]bool, hi uint64) []Command {
	type link struct {
		from  uint64 // the node the chain came from
		shard int    // index in shards of the shard handed over
	}
	came := map[uint64]link{hi: {}}
	queue := []uint64{hi}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for i, ps := range shards {
			r := ps.t.Placement[ps.shard]
			if r[0] != u {
				continue
			}
			for _, v := range r[1:] {
				if _, seen := came[v]; seen || !member[v] {
					continue
				}
				came[v] = link{from: u, shard: i}
				if led[v] <= led[hi]-2 {
					var cmds []Command
					for at := v; at != hi; at = came[at].from {
						ps := shards[came[at].shard]
						cmds = append(cmds, Command{Op: OpSetPreferred, Name: ps.t.Name, Shard: ps.shard, Node: at})
					}
					return cmds
				}
				queue = append(queue, v)
			}
		}
	}
	return nil
}
