package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"herald/internal/vfs"
)

// IdentityFile, in a data directory, records whose the directory is: the
// node id it was first started as and, once the node has learnt it, the
// id of its cluster.
const IdentityFile = "IDENTITY"

// identityMagic starts the framed identity file (vfs.Frame), so that a
// damaged one is detected rather than read as another node's.
const identityMagic = "HID1"

// An Identity is whose a data directory is. Its JSON names are an on-disk
// format.
type Identity struct {
	NodeID uint64 `json:"node_id"`
	// Cluster is the cluster's id, empty until the node has learnt it
	// from its cluster's controller.
	Cluster string `json:"cluster,omitempty"`
}

// ReadIdentity returns the identity recorded in dir, and false if none is
// recorded yet (a new directory, or one written before directories had
// one).
func ReadIdentity(dir string) (Identity, bool, error) {
	path := filepath.Join(dir, IdentityFile)
	data, err := vfs.ReadFramed(vfs.OS, path, identityMagic)
	if damaged, ok := errors.AsType[*vfs.DamagedError](err); ok {
		return Identity{}, false, fmt.Errorf("identity file %s is damaged (%s); herald will not guess whose directory this is: write it again with the node's id by deleting it and starting the node with its --node-id (it learns its cluster again from its peers)",
			path, damaged.Error())
	}
	if err != nil || data == nil {
		return Identity{}, false, err
	}
	var id Identity
	if err := json.Unmarshal(data, &id); err != nil || id.NodeID == 0 {
		return Identity{}, false, fmt.Errorf("identity file %s holds %.64q, not a node id; delete it and start the node with its --node-id", path, data)
	}
	return id, true, nil
}

// WriteIdentity records id in dir, durably.
func WriteIdentity(dir string, id Identity) error {
	data, err := json.Marshal(id)
	if err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(vfs.OS, dir, IdentityFile, vfs.Frame(identityMagic, data)); err != nil {
		return fmt.Errorf("record the data directory's identity: %w", err)
	}
	return nil
}

// CheckNode refuses a start as node on a directory recorded as another
// node's.
func (id Identity) CheckNode(dir string, node uint64) error {
	if id.NodeID == node {
		return nil
	}
	of := ""
	if id.Cluster != "" {
		of = " of cluster " + id.Cluster
	}
	return fmt.Errorf("data directory %s belongs to node %d%s, but this server was started as node %d (--node-id %d): start node %d on it with --node-id %d, and give node %d a data directory of its own (an empty one; it then takes its replicas from its peers)",
		dir, id.NodeID, of, node, node, id.NodeID, id.NodeID, node)
}

// CheckCluster refuses a directory of one cluster among the nodes of
// another: peer says which node answered, and with which cluster id.
func (id Identity) CheckCluster(dir, peer, cluster string) error {
	if id.Cluster == "" || cluster == "" || id.Cluster == cluster {
		return nil
	}
	return fmt.Errorf("data directory %s belongs to node %d of cluster %s, but %s is of cluster %s: check --peers (each node's --peers lists the nodes of its own cluster), or, to make this node a new member of the other cluster, start it on an empty --data-dir and add it with herald cluster add",
		dir, id.NodeID, id.Cluster, peer, cluster)
}
