package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	clusterv1 "herald/proto/herald/cluster/v1"
)

// peerWaitLogEvery is how often a node waiting at its start for a
// majority of its cluster says whom it waits for: without it, a node
// started before the others said nothing until it gave up.
const peerWaitLogEvery = 3 * time.Second

// pingOthers pings every other member at once, each within timeout, and
// returns what each answered.
func (n *Node) pingOthers(ctx context.Context, timeout time.Duration) map[uint64]error {
	var mu sync.Mutex
	errs := make(map[uint64]error)
	var wg sync.WaitGroup
	for _, id := range n.cfg.Members {
		if id == n.cfg.NodeID {
			continue
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			_, err := n.cfg.Transport.Ping(pctx, id, &clusterv1.PingRequest{From: n.cfg.NodeID})
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
func (n *Node) logPeerWait(ctx context.Context, since time.Time) {
	if n.cfg.Transport == nil {
		return
	}
	var answering, silent []string
	for id, err := range n.pingOthers(ctx, livenessWindow/2) {
		peer := fmt.Sprintf("%d=%s", id, n.cfg.Addresses[id])
		if err != nil {
			silent = append(silent, peer)
		} else {
			answering = append(answering, peer)
		}
	}
	slices.Sort(silent)
	slices.Sort(answering)
	n.log.Info("starting: waiting for a majority of --peers to elect the controller's leader",
		"majority", len(n.cfg.Members)/2+1, "waiting_for", silent, "answering", answering,
		"waited", time.Since(since).Round(time.Second))
}
