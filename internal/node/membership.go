package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"herald/internal/controller"
	"herald/internal/host"
	"herald/internal/transport"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// The cluster's membership as a node serves it: the cluster's status as
// this node sees it, adding and draining nodes, and the balancer, which
// makes each shard the node leads follow the controller's placement:
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
		err := n.host.View(ctx, controller.ControllerGroup, func(sm host.StateMachine, _ uint64) {
			c := sm.(*controllerMachine)
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
	n.mu.RLock()
	shards := make([]*shardRuntime, 0, len(n.shards))
	for _, s := range n.shards {
		shards = append(shards, s)
	}
	n.mu.RUnlock()
	for _, s := range shards {
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

// NodeStatus is one node of the cluster as this node sees it.
type NodeStatus struct {
	ID      uint64
	Address string // host:port; empty when this node does not know it
	Self    bool   // the node that answered
	// Reachable means the node answered this node just now.
	Reachable bool
	// Draining means its replicas are moving off it (herald cluster
	// remove).
	Draining bool
	// Replicas is how many shard replicas the placement puts on it.
	Replicas int
	Err      string // why it is not reachable
}

// ReplicaStatus is one replica of a shard, as its node reported it.
type ReplicaStatus struct {
	Node    uint64
	Applied uint64 // the last log index its node applied
	Err     string // why its node did not report it
}

// ShardPlacement is one shard: where its replicas are and who leads.
type ShardPlacement struct {
	Topic string
	Shard int
	Name  string
	Group uint64 // the shard's Raft group
	// Replicas are the nodes the controller places the shard on, the
	// preferred leader first.
	Replicas []ReplicaStatus
	// PreferredLeader is the first replica not draining: the node the
	// balancer hands the leadership to.
	PreferredLeader uint64
	Leader          uint64 // 0 when no replica that answered knows one
}

// ClusterStatus is the cluster as one node sees it.
type ClusterStatus struct {
	NodeID           uint64 // the node that answered
	ControllerLeader uint64
	Nodes            []NodeStatus     // by id
	Shards           []ShardPlacement // by topic, then shard
	// Rebalancing means a rebalance (Rebalance) is under way.
	Rebalancing bool
}

// statusCallTimeout bounds the wait for each peer's report: a node that
// is down must not hold the status up.
const statusCallTimeout = 2 * time.Second

// ClusterStatus asks every node for the state of its replicas and puts
// together the nodes and, per shard, its replicas, their applied indexes,
// its preferred leader and its leader.
func (n *Node) ClusterStatus(ctx context.Context) (_ ClusterStatus, err error) {
	defer classify(&err)

	n.mu.RLock()
	members, rebalancing := n.members, n.rebalancing
	topics := make([]*topicRuntime, 0, len(n.topics))
	for _, tr := range n.topics {
		topics = append(topics, tr)
	}
	n.mu.RUnlock()
	slices.SortFunc(topics, func(a, b *topicRuntime) int { return cmp.Compare(a.info.Name, b.info.Name) })

	nodes := n.memberStatus(members)
	reports := n.gatherLocalStatus(ctx, nodes)
	out := ClusterStatus{NodeID: n.cfg.NodeID, Nodes: nodes, Rebalancing: rebalancing}
	out.ControllerLeader = reports[n.cfg.NodeID].ControllerLeader
	draining := drainingSet(members)
	for _, tr := range topics {
		for _, s := range tr.shards {
			out.Shards = append(out.Shards, shardPlacement(s, reports, draining))
		}
	}
	for i := range out.Nodes {
		for _, sp := range out.Shards {
			if slices.ContainsFunc(sp.Replicas, func(r ReplicaStatus) bool { return r.Node == out.Nodes[i].ID }) {
				out.Nodes[i].Replicas++
			}
		}
	}
	return out, nil
}

// memberStatus lists the members: those the controller records, or
// before any change the nodes of --peers, with their addresses.
func (n *Node) memberStatus(members []controller.Member) []NodeStatus {
	byID := make(map[uint64]NodeStatus)
	for _, id := range n.cfg.Members {
		byID[id] = NodeStatus{ID: id, Address: n.cfg.Addresses[id]}
	}
	if len(members) > 0 {
		clear(byID)
		for _, m := range members {
			addr := m.Address
			if addr == "" {
				addr = n.cfg.Addresses[m.ID]
			}
			byID[m.ID] = NodeStatus{ID: m.ID, Address: addr, Draining: m.Draining}
		}
	}
	out := make([]NodeStatus, 0, len(byID))
	for _, ns := range byID {
		ns.Self = ns.ID == n.cfg.NodeID
		out = append(out, ns)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// gatherLocalStatus asks every node, concurrently, for its report, and
// marks in nodes which answered.
func (n *Node) gatherLocalStatus(ctx context.Context, nodes []NodeStatus) map[uint64]localStatus {
	reports := make(map[uint64]localStatus, len(nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range nodes {
		ns := &nodes[i]
		if ns.Self {
			ns.Reachable = true
			reports[ns.ID] = n.localStatus()
			continue
		}
		if n.cfg.Transport == nil {
			ns.Err = "this node has no connection to other nodes"
			continue
		}
		wg.Go(func() {
			st, err := n.peerStatus(ctx, ns.ID)
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

func (n *Node) peerStatus(ctx context.Context, id uint64) (localStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, statusCallTimeout)
	defer cancel()
	out, err := n.cfg.Transport.LocalStatus(ctx, id, &clusterv1.LocalStatusRequest{})
	if err != nil {
		return localStatus{}, err
	}
	return localStatusFromWire(out), nil
}

// shardPlacement puts a shard's placement and its replicas' reports
// together. The leader is the replica that says it leads, or else the
// leader most replicas name.
func shardPlacement(s *shardRuntime, reports map[uint64]localStatus, draining map[uint64]bool) ShardPlacement {
	sp := ShardPlacement{Topic: s.topic, Shard: s.index, Name: s.name, Group: s.group,
		PreferredLeader: preferredLeader(s.replicas, draining)}
	votes := make(map[uint64]int)
	for _, id := range s.replicas {
		rs := ReplicaStatus{Node: id}
		st, ok := reports[id]
		g, has := st.Groups[s.group]
		switch {
		case !ok:
			rs.Err = "node did not answer"
		case !has:
			rs.Err = "node does not run the shard (yet)"
		default:
			rs.Applied, rs.Err = g.Applied, g.Err
			if g.Leader == id {
				sp.Leader = id
			}
			if g.Leader != 0 {
				votes[g.Leader]++
			}
		}
		sp.Replicas = append(sp.Replicas, rs)
	}
	if sp.Leader == 0 {
		for id, v := range votes {
			if v > votes[sp.Leader] || (v == votes[sp.Leader] && id < sp.Leader) {
				sp.Leader = id
			}
		}
	}
	return sp
}

// preferredLeader is the first replica not draining.
func preferredLeader(replicas []uint64, draining map[uint64]bool) uint64 {
	for _, id := range replicas {
		if !draining[id] {
			return id
		}
	}
	return 0
}

func drainingSet(members []controller.Member) map[uint64]bool {
	d := make(map[uint64]bool)
	for _, m := range members {
		if m.Draining {
			d[m.ID] = true
		}
	}
	return d
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

// balance checks, every BalanceInterval until the node stops, the shards
// this node leads, and the controller if it leads that.
func (n *Node) balance() {
	ctx, cancel := n.untilStop()
	defer cancel()
	t := time.NewTicker(n.cfg.BalanceInterval)
	defer t.Stop()
	settled := make(map[uint64][]uint64)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.balanceOnce(ctx, settled)
	}
}

// balanceOnce makes at most one change per shard this node leads.
// settled, kept from one check to the next, holds the groups found led by
// their preferred leader (this node) with the placement's configuration.
func (n *Node) balanceOnce(ctx context.Context, settled map[uint64][]uint64) {
	n.mu.RLock()
	members, move := n.members, n.move
	if len(members) <= 1 && len(n.cfg.Members) == 1 {
		// A node alone (started without --peers, which it needs to be
		// given others) leads all its groups as their only replica:
		// there is nothing to hand over or move, and with thousands of
		// shards, nothing to visit them all for.
		n.mu.RUnlock()
		return
	}
	var led []*shardRuntime
	for _, s := range n.shards {
		if s.serves() {
			led = append(led, s)
		}
	}
	load := make(map[uint64]int)
	for _, tr := range n.topics {
		for _, s := range tr.shards {
			for _, id := range s.replicas {
				load[id]++
			}
		}
	}
	n.mu.RUnlock()
	slices.SortFunc(led, func(a, b *shardRuntime) int { return cmp.Compare(a.group, b.group) })
	// The move and the shards' placements are of one reading of the
	// controller: a move seen before its placement could make the shard
	// look a replica short.
	b := balancer{n: n, draining: drainingSet(members), load: load, settled: settled, move: move}
	for _, m := range members {
		if !m.Draining {
			b.placeable = append(b.placeable, m.ID)
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
		if err := b.shard(ctx, s); err != nil && ctx.Err() == nil {
			n.log.Warn("balance shard", "shard", s.name, "err", err)
		}
	}
	if leader, err := n.host.Leader(controller.ControllerGroup); err == nil && leader == n.cfg.NodeID {
		if err := b.controller(ctx, members); err != nil && ctx.Err() == nil {
			n.log.Warn("balance the controller's members", "err", err)
		}
		if err := n.rebalanceStep(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("rebalance", "err", err)
		}
	}
}

// balancer decides one step for a group, from the placement and the
// group's membership.
type balancer struct {
	n         *Node
	draining  map[uint64]bool
	placeable []uint64       // members that take new replicas
	load      map[uint64]int // replicas placed on each node
	// settled are the groups this node led, as their preferred leader,
	// with the placement's configuration, when last checked: by group,
	// the placement then.
	settled map[uint64][]uint64
	// move is the replica a rebalance moves, if any: for its shard, the
	// node it moves from counts as draining.
	move *controller.Move
}

func (b *balancer) shard(ctx context.Context, s *shardRuntime) error {
	if m := b.move; m != nil && m.Topic == s.topic && m.Shard == s.index {
		mb := *b
		mb.draining = maps.Clone(b.draining)
		mb.draining[m.From] = true
		return mb.moving(ctx, s, m.From)
	}
	return b.moving(ctx, s, 0)
}

// moving is shard, for a shard whose replica on node leaving (if not 0)
// moves to another node.
func (b *balancer) moving(ctx context.Context, s *shardRuntime, leaving uint64) error {
	n, self := b.n, b.n.cfg.NodeID
	want := s.replicas
	// Most checks find nothing to do: the preferred leader leads, and the
	// group's configuration was seen to match this placement. They skip
	// asking the group's loop.
	settled := len(b.draining) == 0 && preferredLeader(want, b.draining) == self
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
	// A draining leader, or one the placement dropped, hands over first;
	// one whose replica a rebalance moves is in no hurry, and waits until
	// no consumer holds a lease, as below.
	if b.draining[self] || !slices.Contains(want, self) {
		if self == leaving && n.leased(s) {
			return nil
		}
		return b.handOver(ctx, s.group, m, want)
	}
	if done, err := b.followPlacement(ctx, s.group, m, want); done || err != nil {
		return err
	}
	if done, err := b.moveOffDraining(ctx, s, m, want); done || err != nil {
		return err
	}
	// Pull leases live in the leader's memory, so a transfer would hand
	// leased events out again, after later ones of their keys: balancing
	// waits until no consumer holds a lease on the shard.
	if p := preferredLeader(want, b.draining); p != self && p != 0 && slices.Contains(m.Voters, p) && m.CaughtUp(p) &&
		!n.leased(s) {
		n.log.Info("handing the leadership to the shard's preferred leader", "shard", s.name, "to", p)
		return n.host.TransferLeadership(ctx, s.group, p)
	}
	return nil
}

// leased reports whether a consumer holds a lease on an event of the
// shard. An acknowledged event holds none, wherever it was acknowledged:
// the ack drops its lease as the leader applies it.
func (n *Node) leased(s *shardRuntime) bool {
	return s.leases.count(time.Now()) > 0
}

// handOver transfers the leadership to a caught-up voter that stays: the
// preferred one if it can.
func (b *balancer) handOver(ctx context.Context, group uint64, m host.Membership, want []uint64) error {
	candidates := slices.Clone(want)
	candidates = append(candidates, m.Voters...)
	for _, id := range candidates {
		if id != b.n.cfg.NodeID && !b.draining[id] && slices.Contains(want, id) && slices.Contains(m.Voters, id) && m.CaughtUp(id) {
			b.n.log.Info("handing the leadership over before this node's replica goes", "group", group, "to", id)
			return b.n.host.TransferLeadership(ctx, group, id)
		}
	}
	return nil // no replica can take over yet
}

// followPlacement makes one change of the group's configuration toward
// the placement: a placed node joins as a learner, a caught-up learner
// votes, and a replica the placement no longer has is removed. It reports
// whether it made (or waits for) a change.
func (b *balancer) followPlacement(ctx context.Context, group uint64, m host.Membership, want []uint64) (bool, error) {
	h := b.n.host
	inConf := func(id uint64) bool { return slices.Contains(m.Voters, id) || slices.Contains(m.Learners, id) }
	for _, id := range want {
		// A draining node's replica, once removed from the group, is
		// not added back: it waits to leave the placement.
		if !inConf(id) && !b.draining[id] {
			return true, h.ChangeMembership(ctx, group, host.AddLearner, id)
		}
	}
	catchingUp := false
	for _, id := range m.Learners {
		switch {
		case !slices.Contains(want, id):
			return true, h.ChangeMembership(ctx, group, host.RemoveMember, id)
		case m.CaughtUp(id):
			return true, h.ChangeMembership(ctx, group, host.AddVoter, id)
		default:
			catchingUp = true
		}
	}
	if catchingUp {
		return true, nil
	}
	for _, id := range m.Voters {
		if !slices.Contains(want, id) {
			return true, h.ChangeMembership(ctx, group, host.RemoveMember, id)
		}
	}
	return false, nil
}

// moveOffDraining moves one replica of the shard off a draining node:
// first the controller places a replica on another node (which
// followPlacement then adds), and once every other replica votes and has
// the whole log, the draining one leaves the group, then the placement.
func (b *balancer) moveOffDraining(ctx context.Context, s *shardRuntime, m host.Membership, want []uint64) (bool, error) {
	var gone uint64
	var staying []uint64
	for _, id := range want {
		if b.draining[id] {
			if gone == 0 {
				gone = id
			}
		} else {
			staying = append(staying, id)
		}
	}
	if gone == 0 {
		return false, nil
	}
	n := b.n
	target := min(controller.ReplicationFactor, len(b.placeable), len(want))
	if len(staying) < target {
		to := b.newHome(want)
		if to == 0 {
			n.log.Warn("no node can take a replica of a draining node; add a node", "shard", s.name, "draining", gone)
			return true, nil
		}
		n.log.Info("placing a replica to replace the one on a draining node", "shard", s.name, "draining", gone, "to", to)
		b.load[to]++
		_, err := n.proposeController(ctx, controller.Command{Op: controller.OpAddReplica, Name: s.topic, Shard: s.index, Node: to, Time: time.Now().UnixNano()})
		return true, err
	}
	for _, id := range staying {
		if !slices.Contains(m.Voters, id) || !m.CaughtUp(id) {
			return true, nil // the new replica is still catching up
		}
	}
	if slices.Contains(m.Voters, gone) {
		n.log.Info("removing the replica of a draining (or rebalanced) node from the shard's group", "shard", s.name, "node", gone)
		return true, n.host.ChangeMembership(ctx, s.group, host.RemoveMember, gone)
	}
	n.log.Info("the replica of a draining (or rebalanced) node has moved", "shard", s.name, "node", gone)
	_, err := n.proposeController(ctx, controller.Command{Op: controller.OpRemoveReplica, Name: s.topic, Shard: s.index, Node: gone, Time: time.Now().UnixNano()})
	return true, err
}

// newHome picks the node for a new replica: a member that takes
// replicas, does not hold one of the shard, and holds the fewest.
func (b *balancer) newHome(want []uint64) uint64 {
	var best uint64
	for _, id := range b.placeable {
		if slices.Contains(want, id) {
			continue
		}
		if best == 0 || b.load[id] < b.load[best] {
			best = id
		}
	}
	return best
}

// controller makes the controller's own group follow the members: an
// added node joins it as a learner and votes once caught up, and a
// drained node that holds no replica leaves it and then the members.
func (b *balancer) controller(ctx context.Context, members []controller.Member) error {
	if len(members) == 0 {
		return nil
	}
	n := b.n
	group := controller.ControllerGroup
	m, err := n.host.Membership(ctx, group)
	if err != nil || m.LastIndex == 0 {
		return err
	}
	var want []uint64
	for _, mem := range members {
		if !mem.Draining || b.load[mem.ID] > 0 {
			want = append(want, mem.ID)
		}
	}
	if !slices.Contains(want, n.cfg.NodeID) {
		return b.handOver(ctx, group, m, want)
	}
	if done, err := b.followPlacement(ctx, group, m, want); done || err != nil {
		return err
	}
	for _, mem := range members {
		if mem.Draining && b.load[mem.ID] == 0 && !slices.Contains(m.Voters, mem.ID) && !slices.Contains(m.Learners, mem.ID) {
			n.log.Info("a drained node left the cluster", "node", mem.ID)
			err := n.proposeMembership(ctx, controller.Command{Op: controller.OpForgetNode, Node: mem.ID})
			if errors.Is(err, controller.ErrNodeNotFound) {
				err = nil
			}
			return err
		}
	}
	return nil
}
