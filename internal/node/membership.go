package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"herald/internal/controller"
	"herald/internal/host"
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

// membership is the node's side of the calls nodes make on each other
// about the cluster's membership: its own status (LocalStatus), joining
// (Join), whether the cluster has run before (Started), and the
// connections to members added after the start.
type membership struct {
	self    uint64
	members []uint64    // --peers: every member the node started with, itself included
	peers   memberPeers // nil when the node runs alone
	ctrl    controllerGroup
	groups  groupStatuses
	shards  func() []*shardRuntime // this node's shards (registry.localShards)
	log     *slog.Logger
}

// memberPeers are the rpcs membership makes on other nodes, and the
// transport's peer list (transport.Transport's).
type memberPeers interface {
	Join(ctx context.Context, to uint64, req *clusterv1.JoinRequest) (*clusterv1.JoinResponse, error)
	LocalStatus(ctx context.Context, to uint64, req *clusterv1.LocalStatusRequest) (*clusterv1.LocalStatusResponse, error)
	Started(ctx context.Context, to uint64, req *clusterv1.StartedRequest) (*clusterv1.StartedResponse, error)
	AddPeer(id uint64, addr string)
}

// groupStatuses is what membership reads of the host's groups.
type groupStatuses interface {
	Leader(group uint64) (uint64, error)
	GroupStatus(group uint64) (host.Status, error)
}

// A joining node calls the Join rpc on the members it knows: the answer
// says whether it is a member, and from which voters its replica of the
// controller starts.

// handle registers the membership calls peers make on this node.
func (m *membership) handle(h *transport.Handlers) {
	h.Started = func(context.Context, *clusterv1.StartedRequest) (*clusterv1.StartedResponse, error) {
		st, err := m.groups.GroupStatus(controller.ControllerGroup)
		return &clusterv1.StartedResponse{Started: err == nil && st.Applied > 1}, nil
	}
	h.LocalStatus = func(context.Context, *clusterv1.LocalStatusRequest) (*clusterv1.LocalStatusResponse, error) {
		return m.local().toWire(), nil
	}
	h.Join = func(ctx context.Context, req *clusterv1.JoinRequest) (*clusterv1.JoinResponse, error) {
		id := req.GetNode()
		a := &clusterv1.JoinResponse{}
		err := m.ctrl.view(ctx, func(c *controllerMachine) {
			a.Founders = c.Founders()
			a.Member = slices.ContainsFunc(c.Members(), func(m controller.Member) bool { return m.ID == id && !m.Draining })
		})
		if err != nil {
			return nil, err
		}
		return a, nil
	}
}

// join asks the other nodes of --peers whether this node is a member,
// and returns the controller's first voters, which this node's replica
// of the controller starts from.
func (m *membership) join(ctx context.Context) ([]uint64, error) {
	if m.peers == nil {
		return nil, fmt.Errorf("--join needs --peers listing the cluster's nodes and this one")
	}
	var errs []error
	for _, id := range m.members {
		if id == m.self {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, statusCallTimeout)
		a, err := m.peers.Join(cctx, id, &clusterv1.JoinRequest{Node: m.self})
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !a.GetMember() || len(a.GetFounders()) == 0 {
			return nil, fmt.Errorf("node %d is not a member of the cluster of node %d; add it first: herald --server <a node> cluster add %d <its host:port>",
				m.self, id, m.self)
		}
		m.log.Info("joining the cluster", "controller_voters_at_start", a.Founders)
		return a.Founders, nil
	}
	return nil, fmt.Errorf("--join: no node of --peers answered (%w); start this node once the cluster's nodes are up", errors.Join(errs...))
}

// rejoining reports whether a node starting on an empty data directory
// (epoch 1) joins a cluster that has run before, which means that this
// node's replicas, if it had any, are lost: asking every other member,
// one answer suffices. With no member reachable it cannot tell, and
// starts as a new node.
func (m *membership) rejoining(ctx context.Context, epoch uint64) bool {
	if epoch != 1 || len(m.members) < 2 || m.peers == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs first: the calls still out return at once
	answers := make(chan bool, len(m.members))
	asked := 0
	for _, id := range m.members {
		if id == m.self {
			continue
		}
		asked++
		wg.Go(func() {
			out, err := m.peers.Started(ctx, id, &clusterv1.StartedRequest{})
			answers <- err == nil && out.GetStarted()
		})
	}
	for range asked {
		if <-answers {
			m.log.Warn("this node's data directory is new but its cluster has run before: its replicas are rebuilt from the other nodes, and stay out of elections until they have caught up")
			return true
		}
	}
	return false
}

// connect connects the transport to members added after this node
// started, at the address the controller records.
func (m *membership) connect(members []controller.Member) {
	if m.peers == nil {
		return
	}
	for _, c := range members {
		if c.Address != "" {
			m.peers.AddPeer(c.ID, c.Address)
		}
	}
}

// local reports the node's groups.
func (m *membership) local() localStatus {
	st := localStatus{Node: m.self, Groups: make(map[uint64]groupLocal)}
	st.ControllerLeader, _ = m.groups.Leader(controller.ControllerGroup)
	for _, s := range m.shards() {
		if err := s.unservable(); err != nil {
			st.Groups[s.group] = groupLocal{Err: err.Error()}
			continue
		}
		gs, err := m.groups.GroupStatus(s.group)
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

func (m *membership) peerStatus(ctx context.Context, id uint64) (localStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, statusCallTimeout)
	defer cancel()
	out, err := m.peers.LocalStatus(ctx, id, &clusterv1.LocalStatusRequest{})
	if err != nil {
		return localStatus{}, err
	}
	return localStatusFromWire(out), nil
}

// gather asks every node, concurrently, for its report, and marks in
// nodes which answered.
func (m *membership) gather(ctx context.Context, nodes []NodeStatus) map[uint64]localStatus {
	reports := make(map[uint64]localStatus, len(nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range nodes {
		ns := &nodes[i]
		if ns.Self {
			ns.Reachable = true
			// The goroutines started for the nodes before this one may
			// be writing reports already.
			st := m.local()
			mu.Lock()
			reports[ns.ID] = st
			mu.Unlock()
			continue
		}
		if m.peers == nil {
			ns.Err = "this node has no connection to other nodes"
			continue
		}
		wg.Go(func() {
			st, err := m.peerStatus(ctx, ns.ID)
			if err != nil {
				ns.Err = err.Error()
				return
			}
			ns.Reachable = true
			mu.Lock()
			reports[ns.ID] = st
			mu.Unlock()
		})
	}
	wg.Wait()
	return reports
}

// command is a node op as proposed: with this node's --peers as the
// members the cluster started with (recorded at the first change).
func (m *membership) command(cmd controller.Command) controller.Command {
	cmd.Members = m.members
	cmd.Time = time.Now().UnixNano()
	return cmd
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
	_, err = n.proposeController(ctx, n.membership.command(controller.Command{Op: controller.OpAddNode, Node: id, Address: address}))
	return err
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
	_, err = n.proposeController(ctx, n.membership.command(controller.Command{Op: controller.OpDrainNode, Node: id}))
	return err
}
