package node

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"
)

// peerWaitLogEvery is how often a node waiting at its start for a
// majority of its cluster says whom it waits for: without it, a node
// started before the others said nothing until it gave up.
const peerWaitLogEvery = 3 * time.Second

// logPeerWait logs which of the other members answer a ping and which do
// not, while the controller has no leader.
func (n *Node) logPeerWait(ctx context.Context, since time.Time) {
	t := n.cfg.Transport
	if t == nil {
		return
	}
	var mu sync.Mutex
	var answering, silent []string
	var wg sync.WaitGroup
	for _, id := range n.cfg.Members {
		if id == n.cfg.NodeID {
			continue
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, livenessWindow/2)
			defer cancel()
			_, err := t.Call(pctx, id, opPing, binary.AppendUvarint(nil, n.cfg.NodeID))
			peer := fmt.Sprintf("%d=%s", id, n.cfg.Addresses[id])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				silent = append(silent, peer)
			} else {
				answering = append(answering, peer)
			}
		})
	}
	wg.Wait()
	slices.Sort(silent)
	slices.Sort(answering)
	n.log.Info("starting: waiting for a majority of --peers to elect the controller's leader",
		"majority", len(n.cfg.Members)/2+1, "waiting_for", silent, "answering", answering,
		"waited", time.Since(since).Round(time.Second))
}
