package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"herald/internal/host"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// fakeMemberPeers answers the membership rpcs of the nodes in up.
type fakeMemberPeers struct {
	up     map[uint64]bool
	member bool // what Join answers
	added  map[uint64]string
}

func (f *fakeMemberPeers) Join(_ context.Context, to uint64, _ *clusterv1.JoinRequest) (*clusterv1.JoinResponse, error) {
	if !f.up[to] {
		return nil, errors.New("connection refused")
	}
	return &clusterv1.JoinResponse{Member: f.member, Founders: []uint64{1, 2}}, nil
}

func (f *fakeMemberPeers) LocalStatus(_ context.Context, to uint64, _ *clusterv1.LocalStatusRequest) (*clusterv1.LocalStatusResponse, error) {
	if !f.up[to] {
		return nil, errors.New("connection refused")
	}
	return &clusterv1.LocalStatusResponse{Node: to, ControllerLeader: 1}, nil
}

func (f *fakeMemberPeers) Started(_ context.Context, to uint64, _ *clusterv1.StartedRequest) (*clusterv1.StartedResponse, error) {
	return &clusterv1.StartedResponse{Started: f.up[to]}, nil
}

func (f *fakeMemberPeers) AddPeer(id uint64, addr string) { f.added[id] = addr }

// fakeGroups is a host whose every group is led by node 1.
type fakeGroups struct{}

func (fakeGroups) Leader(uint64) (uint64, error) { return 1, nil }
func (fakeGroups) GroupStatus(uint64) (host.Status, error) {
	return host.Status{Leader: 1, Applied: 9}, nil
}

func newMembershipTest(peers *fakeMemberPeers) *membership {
	return &membership{self: 1, members: []uint64{1, 2, 3}, peers: peers, groups: fakeGroups{},
		shards: func() []*shardRuntime { return []*shardRuntime{servingShard(7)} },
		log:    quietLog()}
}

// TestMembershipGathersEveryNodesReport: this node reports itself, the
// others answering are reachable with their reports, and a node that does
// not answer says why.
func TestMembershipGathersEveryNodesReport(t *testing.T) {
	m := newMembershipTest(&fakeMemberPeers{up: map[uint64]bool{2: true}})
	nodes := []NodeStatus{{ID: 1, Self: true}, {ID: 2}, {ID: 3}}
	reports := m.gather(context.Background(), nodes)
	if !nodes[0].Reachable || !nodes[1].Reachable || nodes[2].Reachable || nodes[2].Err == "" {
		t.Errorf("nodes %+v: want 1 and 2 reachable, 3 not, with why", nodes)
	}
	if got := reports[1].Groups[7]; got.Leader != 1 || got.Applied != 9 || reports[2].Node != 2 || len(reports) != 2 {
		t.Errorf("reports %+v: want this node's shard 7 and node 2's report", reports)
	}
}

// TestMembershipJoinsOnlyAsAMember: a node joins from the founders a
// member answers, is refused when it is no member, and rejoins a cluster
// that has run before.
func TestMembershipJoinsOnlyAsAMember(t *testing.T) {
	ctx := context.Background()
	peers := &fakeMemberPeers{up: map[uint64]bool{3: true}, member: true, added: make(map[uint64]string)}
	m := newMembershipTest(peers)
	if voters, err := m.join(ctx); err != nil || len(voters) != 2 {
		t.Errorf("join: %v, %v; want the founders", voters, err)
	}
	peers.member = false
	if _, err := m.join(ctx); err == nil || !strings.Contains(err.Error(), "add it first") {
		t.Errorf("join as no member: %v, want refused", err)
	}
	if !m.rejoining(ctx, 1) || m.rejoining(ctx, 2) {
		t.Error("a new directory in a cluster that ran before must rejoin; a directory of a later epoch must not")
	}
}
