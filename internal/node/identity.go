package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"herald/internal/controller"
	"herald/internal/datadir"
	"herald/internal/host"
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

// foreignPeer returns an error if the transport has met a node of another
// cluster: the data directory, or --peers, is not what the operator meant.
func (n *Node) foreignPeer() error {
	if n.cfg.Transport == nil {
		return nil
	}
	if f := n.cfg.Transport.Foreign(); f != nil {
		return n.identity.CheckCluster(n.cfg.DataDir, f.Peer, f.Cluster)
	}
	return nil
}

// learnCluster records the cluster id the controller holds in the data
// directory the first time the node sees it. A controller without one
// (a new cluster, or one made before clusters had ids) gets one from its
// leader. It is called from Open, then by watchController alone: they own
// n.identity.
func (n *Node) learnCluster(ctx context.Context) error {
	var cluster string
	if err := n.host.View(ctx, controller.ControllerGroup, func(sm host.StateMachine, _ uint64) {
		cluster = sm.(*controllerMachine).Cluster()
	}); err != nil {
		return fmt.Errorf("read the cluster id from the controller: %w", err)
	}
	switch {
	case cluster == "":
		// Not fatal: watchController looks again until it has one.
		if err := n.nameCluster(ctx); err != nil {
			n.log.Warn("the cluster has no id yet; trying again shortly", "err", err)
		}
		return nil
	case n.identity.Cluster == cluster:
		return nil
	case n.identity.Cluster != "":
		// The directory's own controller log names another cluster: one
		// of the two files is not this directory's.
		return fmt.Errorf("data directory %s records cluster %s, but its controller log holds cluster %s; the directory is not whole: start the node on an empty --data-dir to take its replicas from its peers",
			n.cfg.DataDir, n.identity.Cluster, cluster)
	}
	id := n.identity
	id.Cluster = cluster
	if err := datadir.WriteIdentity(n.cfg.DataDir, id); vfs.IsNoSpace(err) {
		n.log.Warn("the disk is full: the cluster's id is recorded in the data directory once it has space", "err", err)
		return nil // watchController tries again
	} else if err != nil {
		return err
	}
	n.identity = id
	if n.cfg.Transport != nil {
		n.cfg.Transport.SetCluster(cluster)
	}
	n.log.Info("this data directory belongs to the cluster", "cluster", cluster, "node", id.NodeID)
	return nil
}

// nameCluster proposes a new cluster id, if this node leads the
// controller; the controller keeps the first one proposed.
func (n *Node) nameCluster(ctx context.Context) error {
	st, err := n.host.GroupStatus(controller.ControllerGroup)
	if err != nil || st.Leader != n.cfg.NodeID {
		return nil // the leader names it, and every node learns it
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := controller.Command{Op: controller.OpNameCluster, Cluster: newClusterID(), Time: time.Now().UnixNano()}
	if _, err := n.host.Propose(ctx, controller.ControllerGroup, host.Bytes(cmd.Marshal())); err != nil {
		return fmt.Errorf("give the cluster an id: %w", hostError("controller", err))
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

// checkPeersCluster asks every other member, once and briefly, to answer
// a ping, so that a directory started among the nodes of another cluster
// is refused before it serves: the transport compares the cluster ids of
// every answer (see transport.ForeignClusterError). A member that does
// not answer within two seconds is not waited for.
func (n *Node) checkPeersCluster(ctx context.Context) error {
	if n.cfg.Transport == nil || n.identity.Cluster == "" {
		return nil
	}
	n.live.pingOthers(ctx, 2*time.Second) // the transport compares the answers' cluster ids
	return n.foreignPeer()
}
