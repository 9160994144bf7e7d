package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// parsePeers reads --peers: id=host:port pairs separated by commas, every
// node of the cluster, this one included ("" means no cluster: a node
// alone). It returns the base URL of each node's API port by id, with
// scheme (http, or https when the nodes serve TLS).
func parsePeers(spec string, self uint64, scheme string) (map[uint64]string, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	peers := make(map[uint64]string)
	for _, item := range strings.Split(spec, ",") {
		idText, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		id, err := strconv.ParseUint(idText, 10, 64)
		if !ok || err != nil || id == 0 {
			return nil, fmt.Errorf("--peers %q: %q is not id=host:port with an id from 1 up; write e.g. 1=127.0.0.1:7601,2=127.0.0.1:7602,3=127.0.0.1:7603", spec, item)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("--peers %q: node %d's address %q is not host:port: %v", spec, id, addr, err)
		}
		if _, dup := peers[id]; dup {
			return nil, fmt.Errorf("--peers %q: node %d is listed twice; give each node one address", spec, id)
		}
		peers[id] = scheme + "://" + addr
	}
	if _, ok := peers[self]; !ok {
		return nil, fmt.Errorf("--peers %q does not list this node (--node-id %d); list every node of the cluster, this one included", spec, self)
	}
	return peers, nil
}

// gate holds the API back until the node is open, and lets the API drain
// at shutdown while the node-to-node streams stay up: requests in flight
// may need the cluster to finish.
type gate struct {
	api      atomic.Pointer[http.Handler]
	draining atomic.Bool
	// inflight is read-locked by each request while it runs; drain
	// write-locks it to wait for them all.
	inflight sync.RWMutex
}

// open starts serving h.
func (g *gate) open(h http.Handler) { g.api.Store(&h) }

// drain refuses new requests from now on and waits for those in flight,
// or until done is closed.
func (g *gate) drain(done <-chan struct{}) {
	g.draining.Store(true)
	finished := make(chan struct{})
	go func() {
		g.inflight.Lock() // never unlocked: nothing is served after a drain
		close(finished)
	}()
	select {
	case <-finished:
	case <-done:
	}
}

// unavailable answers 503 with a Connect error, which the API's clients
// show as the server's own message rather than as a failure to reach it.
func unavailable(w http.ResponseWriter, msg string) {
	body, _ := json.Marshal(map[string]string{"code": "unavailable", "message": msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(append(body, '\n'))
}

// startingHeader marks the answers of a node that is starting, so that
// clients can tell it from one that is down, and wait for it: the request
// was not served, so sending it again is safe.
const startingHeader = "Herald-Starting"

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := g.api.Load()
	if h == nil || g.draining.Load() {
		msg := "herald is starting: opening its data (in a cluster, waiting for a majority of --peers); retry shortly"
		if g.draining.Load() {
			msg = "herald is shutting down; send the request to another node"
		} else {
			w.Header().Set(startingHeader, "1")
		}
		unavailable(w, msg)
		return
	}
	g.inflight.RLock()
	defer g.inflight.RUnlock()
	(*h).ServeHTTP(w, r)
}
