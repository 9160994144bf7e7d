package node

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
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
// and when it last pinged this node; it pings the other members, answers
// their pings, and tells the host of a member that stopped being alive.
type liveness struct {
	mu       sync.Mutex
	answered map[uint64]time.Time
	pinged   map[uint64]time.Time
	now      func() time.Time

	self      uint64
	members   []uint64          // every member, this node included (Config.Members)
	addresses map[uint64]string // the members' addresses, for the log
	pinger    pinger            // nil when the node runs alone
	peerDown  func(id uint64)   // host.PeerDown
	log       *slog.Logger
}

// pinger sends the Ping rpc (transport.Transport's).
type pinger interface {
	Ping(ctx context.Context, to uint64, req *clusterv1.PingRequest) (*clusterv1.PingResponse, error)
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

// handle answers other members' liveness checks, and notes that the
// member that sent one reaches this node.
func (l *liveness) handle(h *transport.Handlers) {
	h.Ping = func(_ context.Context, req *clusterv1.PingRequest) (*clusterv1.PingResponse, error) {
		if from := req.GetFrom(); from != 0 {
			l.note(l.pinged, from)
		}
		return &clusterv1.PingResponse{}, nil
	}
}

// run pings the other members until stop is closed, one goroutine per
// member, so that a dead one delays no other.
func (l *liveness) run(stop <-chan struct{}) {
	if l.pinger == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		<-stop
		cancel()
	})
	for _, id := range l.members {
		if id != l.self {
			wg.Go(func() { l.pingMember(ctx, id) })
		}
	}
	wg.Wait()
}

func (l *liveness) pingMember(ctx context.Context, id uint64) {
	t := time.NewTicker(livenessInterval)
	defer t.Stop()
	wasAlive := false
	for {
		pctx, cancel := context.WithTimeout(ctx, livenessWindow/2)
		_, err := l.pinger.Ping(pctx, id, &clusterv1.PingRequest{From: l.self})
		cancel()
		if err == nil {
			l.note(l.answered, id)
		}
		alive := l.alive(id)
		if wasAlive && !alive {
			l.peerDown(id)
		}
		wasAlive = alive
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// peerWaitLogEvery is how often a node waiting at its start for a
// majority of its cluster says whom it waits for: without it, a node
// started before the others said nothing until it gave up.
const peerWaitLogEvery = 3 * time.Second

// pingOthers pings every other member at once, each within timeout, and
// returns what each answered.
func (l *liveness) pingOthers(ctx context.Context, timeout time.Duration) map[uint64]error {
	var mu sync.Mutex
	errs := make(map[uint64]error)
	var wg sync.WaitGroup
	for _, id := range l.members {
		if id == l.self {
			continue
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			_, err := l.pinger.Ping(pctx, id, &clusterv1.PingRequest{From: l.self})
			mu.Lock()
			errs[id] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	return errs
}

// logPeerWait logs which of the other members answer a ping and which do
// not, while the controller has no leader.
func (l *liveness) logPeerWait(ctx context.Context, since time.Time) {
	if l.pinger == nil {
		return
	}
	var answering, silent []string
	for id, err := range l.pingOthers(ctx, livenessWindow/2) {
		peer := fmt.Sprintf("%d=%s", id, l.addresses[id])
		if err != nil {
			silent = append(silent, peer)
		} else {
			answering = append(answering, peer)
		}
	}
	slices.Sort(silent)
	slices.Sort(answering)
	l.log.Info("starting: waiting for a majority of --peers to elect the controller's leader",
		"majority", len(l.members)/2+1, "waiting_for", silent, "answering", answering,
		"waited", time.Since(since).Round(time.Second))
}
