package controller

import (
	"cmp"
	"fmt"
	"slices"

	"herald/internal/topic"
)

// Membership. The controller records which nodes the cluster has, from
// the first change on (until then, each node's --peers say it), and which
// nodes hold each shard. It records decisions, not progress: the leader
// of a shard makes the Raft configuration follow Placement (adding a
// replica as a learner, promoting it once caught up, then removing the one
// it replaces), and proposes OpRemoveReplica only after that.

// placeable returns the nodes a new topic's shards may be placed on: the
// recorded members that are not draining, or, before any were recorded,
// the proposer's.
func (s *State) placeable(proposers []uint64) []uint64 {
	if len(s.members) == 0 {
		return proposers
	}
	var ids []uint64
	for _, m := range s.members {
		if !m.Draining {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// seeded returns a copy of the members, or, when none are recorded yet,
// the members the cluster started with as the proposer knows them. The
// caller records it only if its command succeeds: a rejected command
// changes nothing.
func (s *State) seeded(c *Command) []Member {
	if len(s.members) > 0 {
		return slices.Clone(s.members)
	}
	var ms []Member
	for _, id := range c.Members {
		if !slices.ContainsFunc(ms, func(m Member) bool { return m.ID == id }) {
			ms = append(ms, Member{ID: id})
		}
	}
	sortMembers(ms)
	return ms
}

// record makes ms the members. The first members recorded are the
// cluster's founders: the nodes it started with, whose ids were the
// controller group's first voters.
func (s *State) record(ms []Member) {
	if len(s.members) == 0 && len(s.founders) == 0 {
		for _, m := range ms {
			if m.Address == "" {
				s.founders = append(s.founders, m.ID)
			}
		}
	}
	s.members = ms
}

// Founders returns the nodes the cluster started with, recorded at the
// first membership change (nil before): the voters the controller group
// was created with, which a node joining the cluster starts its replica
// of the controller from.
func (s *State) Founders() []uint64 { return slices.Clone(s.founders) }

func sortMembers(ms []Member) {
	slices.SortFunc(ms, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
}

func findMember(ms []Member, id uint64) (int, bool) {
	return slices.BinarySearchFunc(ms, id, func(m Member, id uint64) int { return cmp.Compare(m.ID, id) })
}

// addNode adds c.Node at c.Address. Adding a node again at the same
// address changes nothing, so that a retried add succeeds.
func (s *State) addNode(c *Command) Result {
	ms := s.seeded(c)
	if i, ok := findMember(ms, c.Node); ok {
		if m := ms[i]; m.Address != c.Address || m.Draining {
			return Result{Err: nodeExists(m)}
		}
		return Result{}
	}
	ms = append(ms, Member{ID: c.Node, Address: c.Address})
	sortMembers(ms)
	s.record(ms)
	return Result{}
}

// drainNode marks c.Node draining. It is refused when the other nodes
// that are not draining could not take its replicas: each shard it holds
// needs as many nodes as it has replicas.
func (s *State) drainNode(c *Command) Result {
	ms := s.seeded(c)
	i, ok := findMember(ms, c.Node)
	if !ok {
		return Result{Err: nodeNotFound(c.Node)}
	}
	if ms[i].Draining {
		return Result{}
	}
	others := -1
	for _, m := range ms {
		if !m.Draining {
			others++
		}
	}
	for _, t := range s.topics {
		for sh := range t.Attributes.Shards {
			if r := t.Replicas(sh); slices.Contains(r, c.Node) && len(r) > others {
				return Result{Err: &detailError{ErrMembership, fmt.Sprintf(
					"node %d cannot be drained: shard %s has %d replicas and only %d other nodes would be left to hold them; add a node first (herald cluster add)",
					c.Node, topic.ShardName(t.Name, sh), len(r), others)}}
			}
		}
	}
	ms[i].Draining = true
	s.record(ms)
	return Result{}
}

// forgetNode removes a drained node from the members.
func (s *State) forgetNode(c *Command) Result {
	i, ok := findMember(s.members, c.Node)
	if !ok {
		return Result{Err: nodeNotFound(c.Node)}
	}
	if !s.members[i].Draining {
		return Result{Err: &detailError{ErrMembership, fmt.Sprintf("node %d is not draining; drain it first (herald cluster remove %d)", c.Node, c.Node)}}
	}
	for _, t := range s.topics {
		for sh := range t.Attributes.Shards {
			if slices.Contains(t.Replicas(sh), c.Node) {
				return Result{Err: &detailError{ErrMembership, fmt.Sprintf("node %d still holds a replica of shard %s; wait until its replicas have moved", c.Node, topic.ShardName(t.Name, sh))}}
			}
		}
	}
	s.members = slices.Delete(s.members, i, i+1)
	return Result{}
}

// replicaTarget returns the topic and checks the shard of a replica op.
func (s *State) replicaTarget(c *Command) (*Topic, error) {
	t, ok := s.topics[c.Name]
	if !ok {
		return nil, NotFoundError(c.Name)
	}
	if c.Shard >= t.Attributes.Shards {
		return nil, invalidf("topic %q has no shard %d: its shards are 0-%d", c.Name, c.Shard, t.Attributes.Shards-1)
	}
	return t, nil
}

// keepBootstrap records, before the first change of a topic's
// placement, the voters each shard's group was created with.
func (t *Topic) keepBootstrap() {
	if t.Bootstrap != nil {
		return
	}
	boot := make([][]uint64, t.Attributes.Shards)
	placement := make([][]uint64, t.Attributes.Shards)
	for i := range t.Attributes.Shards {
		boot[i] = slices.Clone(t.Replicas(i))
		placement[i] = slices.Clone(boot[i])
	}
	t.Bootstrap, t.Placement = boot, placement
}

// addReplica places a replica of a shard on c.Node, after the others.
// Placing it where one is already changes nothing.
func (s *State) addReplica(c *Command) Result {
	t, err := s.replicaTarget(c)
	if err != nil {
		return Result{Err: err}
	}
	if i, ok := findMember(s.members, c.Node); len(s.members) > 0 && (!ok || s.members[i].Draining) {
		return Result{Err: &detailError{ErrMembership, fmt.Sprintf("node %d is not a member that takes replicas (it is unknown or draining); add it first (herald cluster add)", c.Node)}}
	}
	if slices.Contains(t.Replicas(c.Shard), c.Node) {
		return Result{Topic: t.clone()}
	}
	t.keepBootstrap()
	t.Placement[c.Shard] = append(t.Placement[c.Shard], c.Node)
	t.UpdatedAt = c.Time
	return Result{Topic: t.clone()}
}

// removeReplica takes a shard's replica off c.Node. A shard keeps at
// least one replica; removing one that is not there changes nothing.
func (s *State) removeReplica(c *Command) Result {
	t, err := s.replicaTarget(c)
	if err != nil {
		return Result{Err: err}
	}
	if m := s.move; m != nil && m.Topic == c.Name && m.Shard == c.Shard && m.From == c.Node {
		s.move = nil // the move is done
	}
	r := t.Replicas(c.Shard)
	if !slices.Contains(r, c.Node) {
		return Result{Topic: t.clone()}
	}
	if len(r) == 1 {
		return Result{Err: &detailError{ErrMembership, fmt.Sprintf("node %d holds the only replica of shard %s; add another replica first", c.Node, topic.ShardName(t.Name, c.Shard))}}
	}
	t.keepBootstrap()
	t.Placement[c.Shard] = slices.DeleteFunc(t.Placement[c.Shard], func(id uint64) bool { return id == c.Node })

	t.UpdatedAt = c.Time
	return Result{Topic: t.clone()}
}
