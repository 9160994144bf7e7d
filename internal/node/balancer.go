package node

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"herald/internal/balance"
	"herald/internal/controller"
	"herald/internal/host"
)

// The balancer's driver: every BalanceInterval it gathers, for each shard
// this node leads (and the controller, if it leads that), the placement,
// the group's configuration and its replicas' progress, asks package
// balance for the next change, and carries it out.

// balancer is the node's driver of the balancer.
type balancer struct {
	n *Node
	// settled, kept from one check to the next, holds the groups found
	// led by their preferred leader (this node) with the placement's
	// configuration: by group, the placement then.
	settled map[uint64][]uint64
}

func newBalancer(n *Node) *balancer {
	return &balancer{n: n, settled: make(map[uint64][]uint64)}
}

// run checks, every BalanceInterval until the node stops, the shards this
// node leads, and the controller if it leads that.
func (b *balancer) run() {
	ctx, cancel := untilClosed(b.n.stop)
	defer cancel()
	t := time.NewTicker(b.n.cfg.BalanceInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.check(ctx)
	}
}

// check makes at most one change per shard this node leads.
func (b *balancer) check(ctx context.Context) {
	n, settled := b.n, b.settled
	n.reg.mu.RLock()
	members, move := n.reg.members, n.reg.move
	if len(members) <= 1 && len(n.cfg.Members) == 1 {
		// A node alone (started without --peers, which it needs to be
		// given others) leads all its groups as their only replica:
		// there is nothing to hand over or move, and with thousands of
		// shards, nothing to visit them all for.
		n.reg.mu.RUnlock()
		return
	}
	var led []*shardRuntime
	for _, s := range n.reg.shards {
		if s.serves() {
			led = append(led, s)
		}
	}
	load := make(map[uint64]int)
	for _, tr := range n.reg.topics {
		for _, s := range tr.shards {
			for _, id := range s.replicas {
				load[id]++
			}
		}
	}
	n.reg.mu.RUnlock()
	slices.SortFunc(led, func(a, b *shardRuntime) int { return cmp.Compare(a.group, b.group) })
	// The move and the shards' placements are of one reading of the
	// controller: a move seen before its placement could make the shard
	// look a replica short.
	c := balanceCheck{n: n, draining: balance.DrainingSet(members), load: load, settled: settled, move: move}
	for _, m := range members {
		if !m.Draining {
			c.placeable = append(c.placeable, m.ID)
		}
	}
	hosted := make(map[uint64]bool, len(led))
	for _, s := range led {
		hosted[s.group] = true
	}
	maps.DeleteFunc(settled, func(group uint64, _ []uint64) bool { return !hosted[group] })
	for _, s := range led {
		if leader, err := n.host.Leader(s.group); err != nil || leader != n.cfg.NodeID {
			continue
		}
		if err := c.shard(ctx, s); err != nil && ctx.Err() == nil {
			n.log.Warn("balance shard", "shard", s.name, "err", err)
		}
	}
	if leader, err := n.host.Leader(controller.ControllerGroup); err == nil && leader == n.cfg.NodeID {
		if err := c.controller(ctx, members); err != nil && ctx.Err() == nil {
			n.log.Warn("balance the controller's members", "err", err)
		}
		if err := b.rebalanceStep(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("rebalance", "err", err)
		}
	}
}

// balanceCheck is one check of the shards this node leads: what it read
// of the controller, which balance.Step decides from.
type balanceCheck struct {
	n         *Node
	draining  map[uint64]bool
	placeable []uint64            // members that take new replicas
	load      map[uint64]int      // replicas placed on each node
	settled   map[uint64][]uint64 // balancer.settled
	// move is the replica a rebalance moves, if any: for its shard, the
	// node it moves from counts as draining.
	move *controller.Move
}

// shard makes the next change of a shard this node leads.
func (b *balanceCheck) shard(ctx context.Context, s *shardRuntime) error {
	n, self := b.n, b.n.cfg.NodeID
	draining, leaving := b.draining, uint64(0)
	if m := b.move; m != nil && m.Topic == s.topic && m.Shard == s.index {
		draining = maps.Clone(b.draining)
		draining[m.From] = true
		leaving = m.From
	}
	want := s.replicas
	// Most checks find nothing to do: the preferred leader leads, and the
	// group's configuration was seen to match this placement. They skip
	// asking the group's loop.
	settled := len(draining) == 0 && balance.PreferredLeader(want, draining) == self
	if settled && slices.Equal(b.settled[s.group], want) {
		return nil
	}
	m, err := n.host.Membership(ctx, s.group)
	if err != nil || m.LastIndex == 0 { // not (or no longer) the leader
		return err
	}
	if settled && len(m.Learners) == 0 && slices.Equal(m.Voters, slices.Sorted(slices.Values(want))) {
		b.settled[s.group] = want
		return nil
	}
	delete(b.settled, s.group)
	c := balance.Step(balance.Shard{
		Self: self, Want: want, Group: groupOf(m), Draining: draining, Leaving: leaving,
		// An acknowledged event holds no lease, wherever it was
		// acknowledged: the ack drops its lease as the leader applies it.
		Leased:    s.leases.Count(time.Now()) > 0,
		Placeable: b.placeable, Load: b.load,
	})
	switch c.Reason {
	case balance.HandOver:
		n.log.Info("handing the leadership over before this node's replica goes", "group", s.group, "to", c.Node)
	case balance.Preferred:
		n.log.Info("handing the leadership to the shard's preferred leader", "shard", s.name, "to", c.Node)
	case balance.NoNewHome:
		n.log.Warn("no node can take a replica of a draining node; add a node", "shard", s.name, "draining", c.From)
	case balance.Drain:
		switch c.Op {
		case balance.AddReplica:
			n.log.Info("placing a replica to replace the one on a draining node", "shard", s.name, "draining", c.From, "to", c.Node)
			b.load[c.Node]++
		case balance.Remove:
			n.log.Info("removing the replica of a draining (or rebalanced) node from the shard's group", "shard", s.name, "node", c.Node)
		case balance.RemoveReplica:
			n.log.Info("the replica of a draining (or rebalanced) node has moved", "shard", s.name, "node", c.Node)
		}
	}
	switch c.Op {
	case balance.AddReplica:
		_, err := n.proposeController(ctx, controller.Command{Op: controller.OpAddReplica, Name: s.topic, Shard: s.index, Node: c.Node, Time: time.Now().UnixNano()})
		return err
	case balance.RemoveReplica:
		_, err := n.proposeController(ctx, controller.Command{Op: controller.OpRemoveReplica, Name: s.topic, Shard: s.index, Node: c.Node, Time: time.Now().UnixNano()})
		return err
	}
	return b.changeGroup(ctx, s.group, c)
}

// controller makes the next change of the controller's own group, which
// this node leads, toward the members.
func (b *balanceCheck) controller(ctx context.Context, members []controller.Member) error {
	if len(members) == 0 {
		return nil
	}
	n := b.n
	group := controller.ControllerGroup
	m, err := n.host.Membership(ctx, group)
	if err != nil || m.LastIndex == 0 {
		return err
	}
	c := balance.StepController(balance.Controller{Self: n.cfg.NodeID, Members: members, Group: groupOf(m), Load: b.load})
	switch c.Op {
	case balance.Transfer:
		n.log.Info("handing the leadership over before this node's replica goes", "group", group, "to", c.Node)
	case balance.ForgetNode:
		n.log.Info("a drained node left the cluster", "node", c.Node)
		_, err := n.proposeController(ctx, n.membership.command(controller.Command{Op: controller.OpForgetNode, Node: c.Node}))
		if errors.Is(err, controller.ErrNodeNotFound) {
			err = nil
		}
		return err
	}
	return b.changeGroup(ctx, group, c)
}

// changeGroup carries out a change of a group's configuration or
// leadership; other changes are not the group's.
func (b *balanceCheck) changeGroup(ctx context.Context, group uint64, c balance.Change) error {
	h := b.n.host
	switch c.Op {
	case balance.AddLearner:
		return h.ChangeMembership(ctx, group, host.AddLearner, c.Node)
	case balance.Promote:
		return h.ChangeMembership(ctx, group, host.AddVoter, c.Node)
	case balance.Remove:
		return h.ChangeMembership(ctx, group, host.RemoveMember, c.Node)
	case balance.Transfer:
		return h.TransferLeadership(ctx, group, c.Node)
	}
	return nil
}

// groupOf is what the balancer reads of a group's membership: its
// configuration, and which replicas have caught up.
func groupOf(m host.Membership) balance.Group {
	g := balance.Group{Voters: m.Voters, Learners: m.Learners, CaughtUp: make(map[uint64]bool)}
	for _, id := range slices.Concat(m.Voters, m.Learners) {
		if m.CaughtUp(id) {
			g.CaughtUp[id] = true
		}
	}
	return g
}
