package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"herald/internal/controller"
	"herald/internal/datadir"
	"herald/internal/transport"
	"herald/internal/vfs"
)

// claimDataDir checks that the data directory is this node's, recording
// it as this node's if it is new (or written before directories recorded
// whose they are), and tells the transport the cluster it belongs to.
func claimDataDir(cfg Config) (datadir.Identity, error) {
	id, ok, err := datadir.ReadIdentity(cfg.DataDir)
	if err != nil {
		return id, err
	}
	if ok {
		if err := id.CheckNode(cfg.DataDir, cfg.NodeID); err != nil {
			return id, err
		}
	} else {
		id = datadir.Identity{NodeID: cfg.NodeID}
		err := datadir.WriteIdentity(cfg.DataDir, id)
		if vfs.IsNoSpace(err) {
			// A node of an earlier release, upgraded on a full disk,
			// still starts; it records its identity at a later start.
			cfg.Logger.Warn("the disk is full: the data directory's identity is not recorded yet", "err", err)
			err = nil
		}
		if err != nil {
			return id, err
		}
	}
	if cfg.Transport != nil && id.Cluster != "" {
		cfg.Transport.SetCluster(id.Cluster)
	}
	return id, nil
}

// clusterIdentity is whose the data directory is (datadir.Identity):
// it checks the peers the transport meets against it, and records the
// cluster's id there once the controller holds one. learn alone changes
// it, called from Open, then by the reconciler's watchController alone.
type clusterIdentity struct {
	dir   string
	id    datadir.Identity
	peers clusterPeers // nil when the node runs alone
	ctrl  clusterController
	// pingOthers pings every other member once (liveness.pingOthers),
	// for the transport to compare the answers' cluster ids.
	pingOthers func(ctx context.Context, timeout time.Duration) map[uint64]error
	log        *slog.Logger
}

// clusterPeers is what the identity asks of the transport
// (transport.Transport's).
type clusterPeers interface {
	Foreign() *transport.ForeignClusterError
	SetCluster(id string)
}

// clusterController is the controller as the identity reads and names
// the cluster in it (controllerGroup).
type clusterController interface {
	clusterID(ctx context.Context) (string, error)
	leads() bool
	propose(ctx context.Context, cmd controller.Command) (controller.Result, error)
}

// foreign returns an error if the transport has met a node of another
// cluster: the data directory, or --peers, is not what the operator meant.
func (c *clusterIdentity) foreign() error {
	if c.peers == nil {
		return nil
	}
	if f := c.peers.Foreign(); f != nil {
		return c.id.CheckCluster(c.dir, f.Peer, f.Cluster)
	}
	return nil
}

// named reports whether the data directory records its cluster's id.
func (c *clusterIdentity) named() bool { return c.id.Cluster != "" }

// learn records the cluster id the controller holds in the data
// directory the first time the node sees it. A controller without one
// (a new cluster, or one made before clusters had ids) gets one from its
// leader.
func (c *clusterIdentity) learn(ctx context.Context) error {
	cluster, err := c.ctrl.clusterID(ctx)
	if err != nil {
		return fmt.Errorf("read the cluster id from the controller: %w", err)
	}
	switch {
	case cluster == "":
		// Not fatal: the reconciler's watchController looks again until it has one.
		if err := c.name(ctx); err != nil {
			c.log.Warn("the cluster has no id yet; trying again shortly", "err", err)
		}
		return nil
	case c.id.Cluster == cluster:
		return nil
	case c.id.Cluster != "":
		// The directory's own controller log names another cluster: one
		// of the two files is not this directory's.
		return fmt.Errorf("data directory %s records cluster %s, but its controller log holds cluster %s; the directory is not whole: start the node on an empty --data-dir to take its replicas from its peers",
			c.dir, c.id.Cluster, cluster)
	}
	id := c.id
	id.Cluster = cluster
	if err := datadir.WriteIdentity(c.dir, id); vfs.IsNoSpace(err) {
		c.log.Warn("the disk is full: the cluster's id is recorded in the data directory once it has space", "err", err)
		return nil // watchController tries again
	} else if err != nil {
		return err
	}
	c.id = id
	if c.peers != nil {
		c.peers.SetCluster(cluster)
	}
	c.log.Info("this data directory belongs to the cluster", "cluster", cluster, "node", id.NodeID)
	return nil
}

// learnOrLog is learn for watchController, which logs what fails.
func (c *clusterIdentity) learnOrLog(ctx context.Context) {
	if err := c.learn(ctx); err != nil {
		c.log.Error("learn the cluster's id", "err", err)
	}
}

// name proposes a new cluster id, if this node leads the controller; the
// controller keeps the first one proposed.
func (c *clusterIdentity) name(ctx context.Context) error {
	if !c.ctrl.leads() {
		return nil // the leader names it, and every node learns it
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := controller.Command{Op: controller.OpNameCluster, Cluster: newClusterID(), Time: time.Now().UnixNano()}
	if _, err := c.ctrl.propose(ctx, cmd); err != nil {
		return fmt.Errorf("give the cluster an id: %w", err)
	}
	// Applying it signalled watchController, which records it.
	return nil
}

// newClusterID returns a random cluster id: 16 bytes, in hex.
func newClusterID() string {
	b := make([]byte, 16)
	rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}

// checkPeers asks every other member, once and briefly, to answer a
// ping, so that a directory started among the nodes of another cluster
// is refused before it serves: the transport compares the cluster ids of
// every answer (see transport.ForeignClusterError). A member that does
// not answer within two seconds is not waited for.
func (c *clusterIdentity) checkPeers(ctx context.Context) error {
	if c.peers == nil || c.id.Cluster == "" {
		return nil
	}
	c.pingOthers(ctx, 2*time.Second) // the transport compares the answers' cluster ids
	return c.foreign()
}
