package robustness

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"herald/client"
	"herald/internal/backoff"
	"herald/internal/testkit/history"
)

// The fault suite's clients: publishers and consumers that run through
// every node while the nemesis breaks things, and the probes that tell
// whether a shard takes writes. Everything they see goes into one
// history.

const (
	faultTopic  = "faults"
	faultShards = 3
	faultKeys   = 12
	// A fetch returns, or fails, well within the visibility timeout, so
	// an event is never recorded as received after its lease could have
	// ended and the key's next event been handed out.
	faultFetchWait  = 500 * time.Millisecond
	faultCallLimit  = 3 * time.Second
	faultVisibility = 8 * time.Second
)

// shardOf is herald's routing contract: FNV-1a-64 of the key, modulo the
// topic's shards.
func shardOf(key string, shards int) int {
	h := fnv.New64a()
	h.Write([]byte(key))
	return int(h.Sum64() % uint64(shards))
}

// outcomeOf classifies a publish call's error: a refusal means the event
// was not committed; anything else (a timeout, a lost connection, a node
// down or without a leader) leaves it unknown.
func outcomeOf(err error) history.Outcome {
	if err == nil {
		return history.OK
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeAlreadyExists, connect.CodeFailedPrecondition,
		connect.CodePermissionDenied, connect.CodeUnauthenticated, connect.CodeOutOfRange, connect.CodeUnimplemented:
		return history.Failed
	}
	return history.Unknown
}

// workload publishes and consumes through every node of a faultCluster.
type workload struct {
	c     *faultCluster
	h     *history.History
	pub   []*client.Client // per node: retries with dedup ids
	cons  []*client.Client // per node
	okPub atomic.Int64     // acknowledged publishes so far
	// paused stops the consumers between fetches while it is set.
	paused atomic.Bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startWorkload(c *faultCluster, h *history.History, publishers int) *workload {
	w := &workload{c: c, h: h}
	for i := range c.n {
		addr := "http://" + c.addrs[i]
		w.pub = append(w.pub, client.New(addr, client.WithPublishRetries(5), client.WithTimeout(faultCallLimit)))
		w.cons = append(w.cons, client.New(addr, client.WithTimeout(faultCallLimit)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	for p := range publishers {
		var keys []string
		for k := p; k < faultKeys; k += publishers {
			keys = append(keys, fmt.Sprint("k", k))
		}
		w.wg.Go(func() { w.publish(ctx, p, keys) })
	}
	for i := range c.n {
		w.wg.Go(func() { w.consume(ctx, i) })
	}
	return w
}

// stop ends the clients and waits for them.
func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
}

// publish publishes the events of keys, one at a time, each key's in
// sequence, rotating over the nodes.
func (w *workload) publish(ctx context.Context, p int, keys []string) {
	seq := make(map[string]int)
	pace := time.NewTicker(20 * time.Millisecond) // a steady load, not a flood, on two cores
	defer pace.Stop()
	for r := 0; ; r++ {
		select {
		case <-ctx.Done():
			return
		case <-pace.C:
		}
		key := keys[r%len(keys)]
		node := (r + p) % w.c.n
		pctx, cancel := context.WithTimeout(ctx, 6*time.Second)
		ids, err := w.pub[node].Publish(pctx, faultTopic, client.Event{Key: key, Payload: history.Payload(key, seq[key])})
		cancel()
		rec := history.Publish{Key: key, Seq: seq[key], Node: node + 1, Outcome: outcomeOf(err), Err: err}
		if err == nil {
			rec.ID = ids[0]
			w.okPub.Add(1)
		}
		w.h.Published(rec)
		seq[key]++
	}
}

// consume fetches through node i and acknowledges what it got, through
// i and, should that fail, the other nodes.
func (w *workload) consume(ctx context.Context, i int) {
	pause := backoff.New(backoff.Policy{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.5})
	for ctx.Err() == nil {
		if w.paused.Load() {
			backoff.Sleep(ctx, 20*time.Millisecond)
			continue
		}
		n, err := w.fetchAndAck(ctx, i)
		if err != nil || n == 0 {
			backoff.Sleep(ctx, pause.Next())
			continue
		}
		pause = backoff.New(backoff.Policy{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.5})
	}
}

// fetchAndAck fetches once through node i, records what came and acks
// it. It returns how many events came.
func (w *workload) fetchAndAck(ctx context.Context, i int) (int, error) {
	at := w.h.Now()
	ds, err := w.cons[i].Fetch(ctx, faultTopic, client.FetchOptions{MaxEvents: 50, VisibilityTimeout: faultVisibility, Wait: faultFetchWait})
	if len(ds) == 0 {
		return 0, err
	}
	recs := make([]history.Delivery, len(ds))
	receipts := make([]string, len(ds))
	for j, d := range ds {
		recs[j] = history.Delivery{ID: d.ID, Key: d.Key, Payload: d.Payload, Node: i + 1}
		receipts[j] = d.Receipt
	}
	w.h.Delivered(at, recs...)
	pause := backoff.New(backoff.Policy{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.5})
	for attempt := range 2 * w.c.n {
		_, aerr := w.cons[(i+attempt)%w.c.n].Ack(ctx, receipts...)
		var lapsed *client.LapsedError
		if errors.As(aerr, &lapsed) {
			// The others were acknowledged; these were handed out again
			// and are their new holders' to acknowledge.
			w.h.Lapsed(len(lapsed.Receipts))
			w.h.Acked(idsExcept(ds, lapsed.Receipts), nil)
			break
		}
		w.h.Acked(idsExcept(ds, nil), aerr)
		if aerr == nil || ctx.Err() != nil {
			break
		}
		backoff.Sleep(ctx, pause.Next())
	}
	return len(ds), nil
}

// idsExcept returns the ids of ds but those whose receipts are in lapsed.
func idsExcept(ds []client.Delivery, lapsed []string) []string {
	var ids []string
	for _, d := range ds {
		if !slices.Contains(lapsed, d.Receipt) {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// drain consumes, through every node in turn, until every node's replica
// of the topic says no event is left unacknowledged.
func (w *workload) drain(t *testing.T, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for r := 0; ; r++ {
		n, _ := w.fetchAndAck(ctx, r%w.c.n)
		if n > 0 {
			continue
		}
		left, err := w.pending(ctx)
		if err == nil && left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the drain ends after %v with events left: %d (%v)", timeout, left, err)
			return
		}
	}
}

// pending returns the most events any running node's replica of the
// topic holds unacknowledged.
func (w *workload) pending(ctx context.Context) (uint64, error) {
	var most uint64
	for i := range w.c.n {
		if !w.c.up(i) {
			continue
		}
		st, err := w.cons[i].TopicStats(ctx, faultTopic)
		if err != nil {
			return 0, fmt.Errorf("topic stats through node %d: %w", i+1, err)
		}
		for _, s := range st.Shards {
			if s.Error != "" {
				return 0, fmt.Errorf("node %d: shard %d: %s", i+1, s.Shard, s.Error)
			}
		}
		most = max(most, st.Total.Events)
	}
	return most, nil
}

// prober publishes to one probe key per shard, each publish attempted
// once, to tell whether a shard takes writes through a node. Probes go
// into the history like any other publish.
type prober struct {
	c    *faultCluster
	h    *history.History
	cl   []*client.Client // per node: no retries, short timeout
	keys []string         // keys[s] routes to shard s
	mu   []sync.Mutex     // one probe of a key at a time
	seq  []int
}

func newProber(c *faultCluster, h *history.History) *prober {
	p := &prober{c: c, h: h, mu: make([]sync.Mutex, faultShards), seq: make([]int, faultShards)}
	for i := range c.n {
		p.cl = append(p.cl, client.New("http://"+c.addrs[i], client.WithTimeout(2*time.Second)))
	}
	p.keys = make([]string, faultShards)
	for n, found := 0, 0; found < faultShards; n++ {
		key := fmt.Sprint("probe", n)
		if s := shardOf(key, faultShards); p.keys[s] == "" {
			p.keys[s] = key
			found++
		}
	}
	return p
}

// probe publishes once to shard s through node i.
func (p *prober) probe(s, i int) error {
	p.mu[s].Lock()
	defer p.mu[s].Unlock()
	key, seq := p.keys[s], p.seq[s]
	p.seq[s]++
	ids, err := p.cl[i].Publish(context.Background(), faultTopic, client.Event{Key: key, Payload: history.Payload(key, seq)})
	rec := history.Publish{Key: key, Seq: seq, Node: i + 1, Outcome: outcomeOf(err), Err: err}
	if err == nil {
		rec.ID = ids[0]
	}
	p.h.Published(rec)
	return err
}

// burst publishes count probes to shard s through the nodes in through,
// one after the other, and returns how many were acknowledged: entries
// enough for the shard's leader to snapshot and compact its log past the
// end of a replica that is down or cut off meanwhile.
func (p *prober) burst(s int, through []int, count int) int {
	ok := 0
	for r := range count {
		if p.probe(s, through[r%len(through)]) == nil {
			ok++
		}
	}
	return ok
}

// fill publishes padded events of 256 KiB to shard s through the running
// nodes in turn until bytes of them were acknowledged.
func (p *prober) fill(s, bytes int) {
	const size = 256 << 10
	p.mu[s].Lock()
	defer p.mu[s].Unlock()
	var cl []*client.Client
	for i := range p.c.n {
		cl = append(cl, client.New("http://"+p.c.addrs[i], client.WithTimeout(10*time.Second)))
	}
	for r, written := 0, 0; written < bytes; r++ {
		i := r % p.c.n
		if !p.c.up(i) {
			continue
		}
		key, seq := p.keys[s], p.seq[s]
		p.seq[s]++
		ids, err := cl[i].Publish(context.Background(), faultTopic, client.Event{Key: key, Payload: history.PaddedPayload(key, seq, size)})
		rec := history.Publish{Key: key, Seq: seq, Node: i + 1, Outcome: outcomeOf(err), Err: err}
		if err == nil {
			rec.ID = ids[0]
			written += size
		}
		p.h.Published(rec)
	}
}

// untilWrites probes shard s through the nodes in through, in turn, until
// one probe succeeds, and returns when it did. It gives up at deadline.
func (p *prober) untilWrites(s int, through []int, deadline time.Time) (time.Time, error) {
	var err error
	for r := 0; time.Now().Before(deadline); r++ {
		if err = p.probe(s, through[r%len(through)]); err == nil {
			return time.Now(), nil
		}
		if !errors.Is(err, context.DeadlineExceeded) && connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			time.Sleep(50 * time.Millisecond) // an error that came at once: do not spin
		}
	}
	return time.Time{}, fmt.Errorf("shard %d takes no write through nodes %v: %w", s, plusOne(through), err)
}

// serving waits until every shard takes writes through every running
// node.
func (p *prober) serving(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i := range p.c.n {
		if !p.c.up(i) {
			continue
		}
		for s := range faultShards {
			if _, err := p.untilWrites(s, []int{i}, deadline); err != nil {
				return err
			}
		}
	}
	return nil
}

func plusOne(nodes []int) []int {
	out := make([]int, len(nodes))
	for i, n := range nodes {
		out[i] = n + 1
	}
	return out
}
