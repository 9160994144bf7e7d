package node

import (
	"context"
	"fmt"
	"time"

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

// controllerWait bounds the wait for the controller at the start: in a
// cluster, for a quorum of its nodes to be up.
const controllerWait = 2 * time.Minute

// waitCaughtUp waits until the controller has a leader and has applied
// its whole log, so the topic list is complete before shards open. It
// fails as soon as foreign does (a peer of another cluster), and calls
// logWait now and then while it waits.
func (c controllerGroup) waitCaughtUp(ctx context.Context, foreign func() error, logWait func(ctx context.Context, since time.Time)) error {
	ctx, cancel := context.WithTimeout(ctx, controllerWait)
	defer cancel()
	start := time.Now()
	nextLog := start.Add(peerWaitLogEvery)
	for {
		if time.Now().After(nextLog) {
			logWait(ctx, start)
			nextLog = time.Now().Add(peerWaitLogEvery)
		}
		st, err := c.host.GroupStatus(controller.ControllerGroup)
		if err != nil {
			return err
		}
		if st.Err != nil {
			return fmt.Errorf("controller: %w", st.Err)
		}
		if err := foreign(); err != nil {
			return err
		}
		if st.Leader != 0 && st.Applied >= st.LastIndex && !st.Rebuilding {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the controller did not elect a leader and catch up (in a cluster, start a majority of the nodes in --peers): %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
