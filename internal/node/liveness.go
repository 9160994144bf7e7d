package node

import (
	"context"
	"sync"
	"time"

	"herald/internal/transport"
)

// Liveness is checked per node, not per group: every livenessInterval a
// node pings each other member once, and a member that answered within
// livenessWindow is alive. Idle raft groups stop heartbeating (host's
// quiescence); their followers rely on this to notice that their
// leader's node is gone.
const (
	opPing           = "ping"
	livenessInterval = 250 * time.Millisecond
	livenessWindow   = time.Second
)

// liveness records when each member last answered a ping.
type liveness struct {
	mu   sync.Mutex
	seen map[uint64]time.Time
}

func newLiveness() *liveness { return &liveness{seen: make(map[uint64]time.Time)} }

// alive reports whether node answered a ping within livenessWindow.
func (l *liveness) alive(node uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.seen[node]
	return ok && time.Since(t) < livenessWindow
}

func (l *liveness) answered(node uint64) {
	l.mu.Lock()
	l.seen[node] = time.Now()
	l.mu.Unlock()
}

// handlePing answers other members' liveness checks.
func handlePing(t *transport.Transport) {
	t.HandleCall(opPing, func(context.Context, []byte) ([]byte, error) { return nil, nil })
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
		_, err := n.cfg.Transport.Call(pctx, id, opPing, nil)
		cancel()
		if err == nil {
			n.live.answered(id)
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
