package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"herald/internal/controller"
	"herald/internal/transport"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// The cluster's membership as a node serves it: the calls nodes make on
// each other about it (a node's own status, joining), and adding and
// draining nodes. The cluster's status, which puts the nodes' reports
// together, is status.go; the balancer, which makes each shard the node
// leads follow the controller's placement, is package balance, driven
// from balancer.go.

// A node answers the LocalStatus rpc with the state of its groups
// (localStatus), for the cluster's status.

// localStatus is what a node reports of itself.
type localStatus struct {
	Node             uint64
	ControllerLeader uint64
	Groups           map[uint64]groupLocal
}

// groupLocal is one of a node's groups.
type groupLocal struct {
	Leader  uint64
	Applied uint64
	Err     string
}

// toWire is st as the LocalStatus rpc answers it.
func (st localStatus) toWire() *clusterv1.LocalStatusResponse {
	out := &clusterv1.LocalStatusResponse{Node: st.Node, ControllerLeader: st.ControllerLeader,
		Groups: make(map[uint64]*clusterv1.GroupStatus, len(st.Groups))}
	for id, g := range st.Groups {
		out.Groups[id] = &clusterv1.GroupStatus{Leader: g.Leader, Applied: g.Applied, Err: g.Err}
	}
	return out
}

// localStatusFromWire is the answer of a LocalStatus rpc.
func localStatusFromWire(in *clusterv1.LocalStatusResponse) localStatus {
	st := localStatus{Node: in.GetNode(), ControllerLeader: in.GetControllerLeader(),
		Groups: make(map[uint64]groupLocal, len(in.GetGroups()))}
	for id, g := range in.GetGroups() {
		st.Groups[id] = groupLocal{Leader: g.GetLeader(), Applied: g.GetApplied(), Err: g.GetErr()}
	}
	return st
}

// A joining node calls the Join rpc on the members it knows: the answer
// says whether it is a member, and from which voters its replica of the
// controller starts.

func (n *Node) handleMembershipCalls(h *transport.Handlers) {
	h.LocalStatus = func(context.Context, *clusterv1.LocalStatusRequest) (*clusterv1.LocalStatusResponse, error) {
		return n.localStatus().toWire(), nil
	}
	h.Join = func(ctx context.Context, req *clusterv1.JoinRequest) (*clusterv1.JoinResponse, error) {
		id := req.GetNode()
		a := &clusterv1.JoinResponse{}
		err := n.ctrlGroup.view(ctx, func(c *controllerMachine) {
			a.Founders = c.Founders()
			a.Member = slices.ContainsFunc(c.Members(), func(m controller.Member) bool { return m.ID == id && !m.Draining })
		})
		if err != nil {
			return nil, err
		}
		return a, nil
	}
}

// joinCluster asks the other nodes of --peers whether this node is a
// member, and returns the controller's first voters, which this node's
// replica of the controller starts from.
func (n *Node) joinCluster(ctx context.Context) ([]uint64, error) {
	if n.cfg.Transport == nil {
		return nil, fmt.Errorf("--join needs --peers listing the cluster's nodes and this one")
	}
	var errs []error
	for _, id := range n.cfg.Members {
		if id == n.cfg.NodeID {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, statusCallTimeout)
		a, err := n.cfg.Transport.Join(cctx, id, &clusterv1.JoinRequest{Node: n.cfg.NodeID})
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !a.GetMember() || len(a.GetFounders()) == 0 {
			return nil, fmt.Errorf("node %d is not a member of the cluster of node %d; add it first: herald --server <a node> cluster add %d <its host:port>",
				n.cfg.NodeID, id, n.cfg.NodeID)
		}
		n.log.Info("joining the cluster", "controller_voters_at_start", a.Founders)
		return a.Founders, nil
	}
	return nil, fmt.Errorf("--join: no node of --peers answered (%w); start this node once the cluster's nodes are up", errors.Join(errs...))
}

// connectMembers connects the transport to members added after this node
// started, at the address the controller records.
func (n *Node) connectMembers(members []controller.Member) {
	if n.cfg.Transport == nil {
		return
	}
	for _, m := range members {
		if m.Address != "" {
			n.cfg.Transport.AddPeer(m.ID, m.Address)
		}
	}
}

// localStatus reports the node's groups.
func (n *Node) localStatus() localStatus {
	st := localStatus{Node: n.cfg.NodeID, Groups: make(map[uint64]groupLocal)}
	st.ControllerLeader, _ = n.host.Leader(controller.ControllerGroup)
	for _, s := range n.reg.localShards() {
		if err := s.unservable(); err != nil {
			st.Groups[s.group] = groupLocal{Err: err.Error()}
			continue
		}
		gs, err := n.host.GroupStatus(s.group)
		switch {
		case err != nil:
			st.Groups[s.group] = groupLocal{Err: err.Error()}
		case gs.Err != nil:
			st.Groups[s.group] = groupLocal{Err: gs.Err.Error()}
		default:
			st.Groups[s.group] = groupLocal{Leader: gs.Leader, Applied: gs.Applied}
		}
	}
	return st
}

// statusCallTimeout bounds the wait for each peer's report: a node that
// is down must not hold the status up.
const statusCallTimeout = 2 * time.Second

func (n *Node) peerStatus(ctx context.Context, id uint64) (localStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, statusCallTimeout)
	defer cancel()
	out, err := n.cfg.Transport.LocalStatus(ctx, id, &clusterv1.LocalStatusRequest{})
	if err != nil {
		return localStatus{}, err
	}
	return localStatusFromWire(out), nil
}

// AddNode makes a node a member of the cluster at address (host:port), so
// that topics created from now on are placed on it too.
func (n *Node) AddNode(ctx context.Context, id uint64, address string) (err error) {
	defer classify(&err)

	if id == 0 {
		return fmt.Errorf("%w: node id 0: node ids start at 1", errInvalidRequest)
	}
	if _, _, err := net.SplitHostPort(address); err != nil {
		return fmt.Errorf("%w: node %d's address %q is not host:port: %v", errInvalidRequest, id, address, err)
	}
	if n.cfg.Transport == nil {
		return fmt.Errorf("%w: this node runs alone (it was started without --peers), so it cannot reach other nodes; a cluster's nodes start with --peers", ErrFailedPrecondition)
	}
	return n.proposeMembership(ctx, controller.Command{Op: controller.OpAddNode, Node: id, Address: address})
}

// RemoveNode starts draining a node: no new shard is placed on it, and
// the leaders of its shards move each of its replicas to another node, one
// at a time, then take it out of the controller. It returns once the
// drain is recorded; ClusterStatus shows its progress.
func (n *Node) RemoveNode(ctx context.Context, id uint64) (err error) {
	defer classify(&err)

	if id == 0 {
		return fmt.Errorf("%w: node id 0: node ids start at 1", errInvalidRequest)
	}
	return n.proposeMembership(ctx, controller.Command{Op: controller.OpDrainNode, Node: id})
}

// proposeMembership proposes a node op, with this node's --peers as the
// members the cluster started with (recorded at the first change).
func (n *Node) proposeMembership(ctx context.Context, cmd controller.Command) error {
	cmd.Members = n.cfg.Members
	cmd.Time = time.Now().UnixNano()
	_, err := n.proposeController(ctx, cmd)
	return err
}
