package transport

import "fmt"

// AddPeer connects the transport to a node that joined the cluster after
// it started, at addr (host:port, reached over TLS when Config.TLS is
// set). A node already known, this one included, is left as it is. After
// Close it does nothing.
func (t *Transport) AddPeer(id uint64, addr string) {
	if id == t.cfg.NodeID {
		return
	}
	scheme := "http"
	if t.cfg.TLS != nil {
		scheme = "https"
	}
	t.peersMu.Lock()
	defer t.peersMu.Unlock()
	if _, ok := t.peers[id]; ok {
		return
	}
	select {
	case <-t.stop:
		return
	default:
	}
	p := t.newPeer(id, fmt.Sprintf("%s://%s", scheme, addr))
	t.peers[id] = p
	t.log.Info("connecting to a node that joined the cluster", "peer", id, "url", p.url)
	if t.started {
		t.wg.Go(p.run)
	}
}
