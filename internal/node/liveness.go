package node

import (
	"context"
	"sync"
	"time"

	"herald/internal/transport"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// Liveness is checked per node, not per group: every livenessInterval a
// node pings each other member once, and a member is alive while, within
// livenessWindow, it has both answered a ping and pinged this node. Idle
// raft groups stop heartbeating (host's quiescence); their followers rely
// on this to notice that their leader's node is gone, and their leaders
// to notice that they are cut off. Both directions count: a node that can
// reach the others but not be reached gets answers to its own pings, and
// only the others' missing pings tell it that its followers no longer
// hear it, nor it them.
const (
	livenessInterval = 250 * time.Millisecond
	livenessWindow   = time.Second
)

// liveness records when each member last answered a ping of this node's
// and when it last pinged this node.
type liveness struct {
	mu       sync.Mutex
	answered map[uint64]time.Time
	pinged   map[uint64]time.Time
	now      func() time.Time
}

func newLiveness() *liveness {
	return &liveness{answered: make(map[uint64]time.Time), pinged: make(map[uint64]time.Time), now: time.Now}
}

// alive reports whether node answered a ping and pinged this node within
// livenessWindow.
func (l *liveness) alive(node uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, okA := l.answered[node]
	p, okP := l.pinged[node]
	now := l.now()
	return okA && okP && now.Sub(a) < livenessWindow && now.Sub(p) < livenessWindow
}

func (l *liveness) note(m map[uint64]time.Time, node uint64) {
	l.mu.Lock()
	m[node] = l.now()
	l.mu.Unlock()
}

// handlePing answers other members' liveness checks, and notes that the
// member that sent one reaches this node.
func (n *Node) handlePing(h *transport.Handlers) {
	h.Ping = func(_ context.Context, req *clusterv1.PingRequest) (*clusterv1.PingResponse, error) {
		if from := req.GetFrom(); from != 0 {
			n.live.note(n.live.pinged, from)
		}
		return &clusterv1.PingResponse{}, nil
	}
}

// checkLiveness pings the other members until the node stops, one
// goroutine per member, so that a dead one delays no other.
func (n *Node) checkLiveness() {
	if n.cfg.Transport == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		<-n.stop
		cancel()
	})
	for _, id := range n.cfg.Members {
		if id != n.cfg.NodeID {
			wg.Go(func() { n.pingMember(ctx, id) })
		}
	}
	wg.Wait()
}

func (n *Node) pingMember(ctx context.Context, id uint64) {
	t := time.NewTicker(livenessInterval)
	defer t.Stop()
	wasAlive := false
	for {
		pctx, cancel := context.WithTimeout(ctx, livenessWindow/2)
		_, err := n.cfg.Transport.Ping(pctx, id, &clusterv1.PingRequest{From: n.cfg.NodeID})
		cancel()
		if err == nil {
			n.live.note(n.live.answered, id)
		}
		alive := n.live.alive(id)
		if wasAlive && !alive {
			n.host.PeerDown(id)
		}
		wasAlive = alive
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
