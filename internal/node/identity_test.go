package node

import (
	"context"
	"strings"
	"testing"

	"herald/internal/controller"
	"herald/internal/datadir"
	"herald/internal/transport"
)

// fakeClusterController holds a cluster id, and names the cluster when
// this node leads it.
type fakeClusterController struct {
	id       string
	leader   bool
	proposed []controller.Command
}

func (f *fakeClusterController) clusterID(context.Context) (string, error) { return f.id, nil }
func (f *fakeClusterController) leads() bool                               { return f.leader }
func (f *fakeClusterController) propose(_ context.Context, cmd controller.Command) (controller.Result, error) {
	f.proposed = append(f.proposed, cmd)
	return controller.Result{}, nil
}

// fakeClusterPeers records the cluster id the transport is given.
type fakeClusterPeers struct {
	cluster string
	foreign *transport.ForeignClusterError
}

func (f *fakeClusterPeers) Foreign() *transport.ForeignClusterError { return f.foreign }
func (f *fakeClusterPeers) SetCluster(id string)                    { f.cluster = id }

// TestIdentityLearnsTheClusterOnce: the leader of an unnamed controller
// names it; the id the controller holds is recorded in the data directory
// and given to the transport; a directory recording another id is
// refused.
func TestIdentityLearnsTheClusterOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ctrl := &fakeClusterController{leader: true}
	peers := &fakeClusterPeers{}
	c := &clusterIdentity{dir: dir, id: datadir.Identity{NodeID: 1}, peers: peers, ctrl: ctrl,
		log: quietLog()}

	if err := c.learn(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ctrl.proposed) != 1 || ctrl.proposed[0].Op != controller.OpNameCluster || c.named() {
		t.Fatalf("unnamed cluster: proposed %+v, named %v; want one name proposed, none recorded yet", ctrl.proposed, c.named())
	}

	ctrl.id = ctrl.proposed[0].Cluster
	if err := c.learn(ctx); err != nil {
		t.Fatal(err)
	}
	got, _, err := datadir.ReadIdentity(dir)
	if err != nil || got.Cluster != ctrl.id || peers.cluster != ctrl.id || !c.named() {
		t.Fatalf("recorded %+v (err %v), transport told %q; want cluster %s", got, err, peers.cluster, ctrl.id)
	}

	ctrl.id = "another"
	if err := c.learn(ctx); err == nil || !strings.Contains(err.Error(), "the directory is not whole") {
		t.Errorf("a controller of another cluster: %v, want the directory refused", err)
	}
}

// TestIdentityRefusesForeignPeers: a peer of another cluster, met by
// the transport, is an error; only the leader names a cluster.
func TestIdentityRefusesForeignPeers(t *testing.T) {
	peers := &fakeClusterPeers{foreign: &transport.ForeignClusterError{Peer: "2", Cluster: "theirs", Mine: "ours"}}
	ctrl := &fakeClusterController{}
	c := &clusterIdentity{dir: t.TempDir(), id: datadir.Identity{NodeID: 1, Cluster: "ours"}, peers: peers, ctrl: ctrl,
		pingOthers: (&liveness{}).pingOthers, log: quietLog()}
	if err := c.checkPeers(context.Background()); err == nil {
		t.Error("a peer of another cluster was accepted")
	}
	if err := c.name(context.Background()); err != nil || len(ctrl.proposed) != 0 {
		t.Errorf("a follower named the cluster: %v, %+v", err, ctrl.proposed)
	}
}
