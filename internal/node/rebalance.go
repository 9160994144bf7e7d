package node

import (
	"context"
	"fmt"
	"time"

	"herald/internal/controller"
	"herald/internal/host"
	"herald/internal/topic"
)

// Rebalancing as a node serves it: Rebalance records that one is under
// way; the node leading the controller proposes its steps
// (controller.State.RebalanceStep) at each balance check, and the leader
// of a shard whose replica moves carries the move out as it does a drain
// (balanceCheck.shard, with the moving replica's node counted as draining for
// that shard alone). Each step is decided afresh from the controller's
// state, so a rebalance whose driver crashes is continued by the next
// leader of the controller, and a second rebalance of a balanced cluster
// changes nothing.

// ID returns the node's id.
func (n *Node) ID() uint64 { return n.cfg.NodeID }

// Rebalance starts spreading replicas evenly over the nodes that take
// them, one move at a time, then their preferred leaders. It returns once
// the rebalance is recorded; ClusterStatus shows its progress.
func (n *Node) Rebalance(ctx context.Context) (err error) {
	defer classify(&err)
	if n.cfg.Transport == nil {
		return fmt.Errorf("%w: this node runs alone (it was started without --peers): there is nothing to rebalance", ErrFailedPrecondition)
	}
	_, err = n.proposeController(ctx, controller.Command{Op: controller.OpRebalance, Time: time.Now().UnixNano()})
	return err
}

// maxPreferredSteps bounds the chains of preferred-leader changes
// proposed in one check: each change is one controller entry, and cheap.
const maxPreferredSteps = 64

// rebalanceStep proposes the rebalance's next steps, on the node leading
// the controller: a replica move (then it waits for the move to be done),
// preferred-leader changes, or the end.
func (b *balancer) rebalanceStep(ctx context.Context) error {
	n := b.n
	for range maxPreferredSteps {
		var cmds []controller.Command
		if err := n.host.View(ctx, controller.ControllerGroup, func(sm host.StateMachine, _ uint64) {
			cmds = sm.(*controllerMachine).RebalanceStep(n.cfg.Members)
		}); err != nil || len(cmds) == 0 {
			return err
		}
		for _, cmd := range cmds {
			if err := b.proposeRebalance(ctx, cmd); err != nil {
				return err
			}
		}
		if cmds[0].Op != controller.OpSetPreferred {
			return nil
		}
	}
	return nil
}

// proposeRebalance proposes one step of a rebalance.
func (b *balancer) proposeRebalance(ctx context.Context, cmd controller.Command) error {
	n := b.n
	cmd.Time = time.Now().UnixNano()
	switch cmd.Op {
	case controller.OpMoveReplica:
		n.log.Info("rebalance: moving a replica", "shard", topic.ShardName(cmd.Name, cmd.Shard), "from", cmd.Node, "to", cmd.To)
	case controller.OpSetPreferred:
		n.log.Info("rebalance: changing a shard's preferred leader", "shard", topic.ShardName(cmd.Name, cmd.Shard), "to", cmd.Node)
	default:
		n.log.Info("rebalance: done")
	}
	if _, err := n.proposeController(ctx, cmd); err != nil {
		return fmt.Errorf("rebalance: %s: %w", cmd.Op, err)
	}
	return nil
}
