package node

import (
	"context"

	"herald/internal/controller"
	"herald/internal/host"
)

// controllerGroup is the controller's Raft group as the node's parts
// reach it: reading its state, asking whether this node leads it, and
// proposing to it.
type controllerGroup struct {
	host *host.Host
	self uint64
}

// view runs f on the controller's state, in its group's order.
func (c controllerGroup) view(ctx context.Context, f func(*controllerMachine)) error {
	return c.host.View(ctx, controller.ControllerGroup, func(sm host.StateMachine, _ uint64) {
		f(sm.(*controllerMachine))
	})
}

// clusterID returns the cluster's id as the controller holds it; "" until
// it has one.
func (c controllerGroup) clusterID(ctx context.Context) (id string, err error) {
	err = c.view(ctx, func(m *controllerMachine) { id = m.Cluster() })
	return id, err
}

// leads reports whether this node leads the controller.
func (c controllerGroup) leads() bool {
	st, err := c.host.GroupStatus(controller.ControllerGroup)
	return err == nil && st.Leader == c.self
}

// propose replicates a controller command and returns its result, whose
// Err says whether the controller took it.
func (c controllerGroup) propose(ctx context.Context, cmd controller.Command) (controller.Result, error) {
	r, err := c.host.Propose(ctx, controller.ControllerGroup, host.Bytes(cmd.Marshal()))
	if err != nil {
		return controller.Result{}, hostError("controller", err)
	}
	return r.(controller.Result), nil
}
