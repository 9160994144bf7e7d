package transport

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
)

// Every node-to-node request carries the sender's cluster id and node id,
// and every response the receiver's cluster id, once each knows it. Nodes
// of different clusters refuse each other: a data directory of one
// cluster started among the nodes of another would otherwise exchange Raft
// messages with them and overwrite their state or its own.
const (
	clusterHeader = "Herald-Cluster"
	nodeHeader    = "Herald-Node"
)

// clusterCheck holds this node's cluster id and the first node seen of
// another cluster.
type clusterCheck struct {
	id atomic.Pointer[string]

	mu      sync.Mutex
	foreign *ForeignClusterError // the first seen
	logged  map[string]bool      // peers whose foreign id was logged, by description and id
}

// A ForeignClusterError says that a peer belongs to another cluster.
type ForeignClusterError struct {
	Peer    string // which node, as this one knows it
	Cluster string // the peer's cluster id
	Mine    string // this node's cluster id
}

func (e *ForeignClusterError) Error() string {
	return fmt.Sprintf("%s belongs to cluster %s, this node to cluster %s; nodes of different clusters do not talk: check --peers, which lists the nodes of this node's own cluster",
		e.Peer, e.Cluster, e.Mine)
}

// SetCluster gives the transport this node's cluster id, which it sends
// from now on and checks peers' against.
func (t *Transport) SetCluster(id string) {
	t.cluster.id.Store(&id)
}

// Cluster returns the id given to SetCluster, empty if none yet.
func (t *Transport) Cluster() string {
	if p := t.cluster.id.Load(); p != nil {
		return *p
	}
	return ""
}

// Foreign returns the first peer of another cluster that this node talked
// to, or nil if there was none.
func (t *Transport) Foreign() *ForeignClusterError {
	t.cluster.mu.Lock()
	defer t.cluster.mu.Unlock()
	return t.cluster.foreign
}

// checkCluster compares a peer's cluster id with this node's. Either may
// not know its own yet: a new node learns it from the cluster.
func (t *Transport) checkCluster(peer, theirs string) error {
	mine := t.Cluster()
	if mine == "" || theirs == "" || mine == theirs {
		return nil
	}
	err := &ForeignClusterError{Peer: peer, Cluster: theirs, Mine: mine}
	c := &t.cluster
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.foreign == nil {
		c.foreign = err
	}
	if key := peer + "\x00" + theirs; !c.logged[key] {
		if c.logged == nil {
			c.logged = make(map[string]bool)
		}
		c.logged[key] = true // once per peer: it keeps retrying
		t.log.Error("refusing to talk to a node of another cluster", "err", err)
	}
	return err
}

// identified is the HTTP client of the requests to one peer: it says who
// sends them, and checks who answers.
type identified struct {
	next connect.HTTPClient
	t    *Transport
	peer string
}

func (c identified) Do(req *http.Request) (*http.Response, error) {
	c.t.identify(req.Header)
	resp, err := c.next.Do(req)
	if err != nil {
		return nil, err
	}
	if err := c.t.checkCluster(c.peer, resp.Header.Get(clusterHeader)); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// identify sets the headers that say who sends a request to a peer.
func (t *Transport) identify(h http.Header) {
	if id := t.Cluster(); id != "" {
		h.Set(clusterHeader, id)
	}
	h.Set(nodeHeader, strconv.FormatUint(t.cfg.NodeID, 10))
}

// sameCluster refuses, as a failed precondition, requests from nodes of
// another cluster, and tells every caller this node's cluster id.
func (t *Transport) sameCluster(h http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := t.Cluster(); id != "" {
			w.Header().Set(clusterHeader, id)
		}
		peer := "the node at " + r.RemoteAddr
		if n := r.Header.Get(nodeHeader); n != "" {
			peer = fmt.Sprintf("node %s (at %s)", n, r.RemoteAddr)
		}
		if err := t.checkCluster(peer, r.Header.Get(clusterHeader)); err != nil {
			errs.Write(w, r, connect.NewError(connect.CodeFailedPrecondition, err))
			return
		}
		h.ServeHTTP(w, r)
	})
}
