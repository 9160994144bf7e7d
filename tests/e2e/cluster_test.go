package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
	"herald/internal/testkit/heraldproc"
	"herald/tests/framework"
)

// cluster is herald serve processes on loopback.
type cluster struct {
	t     *testing.T
	dirs  []string
	addrs []string
	peers string
	extra []string // more flags for every node
	nodes []*heraldproc.Server
}

// startCluster starts three nodes at once: each waits for a majority of
// the others before it serves.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	return startClusterOf(t, 3)
}

// startClusterOf starts a cluster of size nodes at once.
func startClusterOf(t *testing.T, size int) *cluster {
	t.Helper()
	return startClusterWith(t, size)
}

// startClusterWith starts a cluster of size nodes at once, each with the
// extra flags.
func startClusterWith(t *testing.T, size int, extra ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, extra: extra}
	var spec []string
	for i := range size {
		c.dirs = append(c.dirs, t.TempDir())
		c.addrs = append(c.addrs, testkit.FreeAddr(t))
		spec = append(spec, fmt.Sprintf("%d=%s", i+1, c.addrs[i]))
	}
	c.peers = strings.Join(spec, ",")
	c.nodes = make([]*heraldproc.Server, size)
	var wg sync.WaitGroup
	errs := make([]error, size)
	for i := range size {
		wg.Go(func() { c.nodes[i], errs[i] = c.tryStart(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	return c
}

func (c *cluster) tryStart(i int) (*heraldproc.Server, error) {
	args := append([]string{"--node-id", fmt.Sprint(i + 1), "--peers", c.peers}, c.extra...)
	return framework.TryStartServer(c.t, c.dirs[i], c.addrs[i], args...)
}

func (c *cluster) client(i int) *client.Client {
	return client.New("http://"+c.addrs[i], client.WithPublishRetries(20))
}

// keyedPublisher publishes numbered events per key to a topic through
// the nodes of a cluster and records what was acknowledged.
type keyedPublisher struct {
	c     *cluster
	topic string
	seq   map[string]int
	acked []framework.Published
}

func newKeyedPublisher(c *cluster, topic string) *keyedPublisher {
	return &keyedPublisher{c: c, topic: topic, seq: make(map[string]int)}
}

// publish sends rounds × keys events, one request each, spreading the
// keys over the nodes through; each event's payload is "key seq".
func (p *keyedPublisher) publish(t *testing.T, rounds, keys int, through ...int) {
	t.Helper()
	for r := range rounds {
		for k := range keys {
			key := fmt.Sprint("k", k)
			i := through[(r+k)%len(through)]
			ids, err := p.c.client(i).Publish(context.Background(), p.topic, client.Event{Key: key, Payload: fmt.Appendf(nil, "%s %d", key, p.seq[key])})
			if err != nil {
				t.Fatalf("publish %s %d through node %d: %v", key, p.seq[key], i+1, err)
			}
			p.acked = append(p.acked, framework.Published{Key: key, Seq: p.seq[key], ID: ids[0]})
			p.seq[key]++
		}
	}
}

// TestE2EClusterSurvivesANodeKill runs three nodes, publishes through
// every node, SIGKILLs node 1 (the preferred leader of one of the three
// shards), publishes through the other two, restarts node 1, publishes
// through it too, and consumes through node 3: every acknowledged event
// is there once, with its payload, each key's events in order.
func TestE2EClusterSurvivesANodeKill(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	if _, err := c.client(0).CreateTopic(ctx, "orders", map[string]string{"shards": "3"}); err != nil {
		t.Fatal(err)
	}
	const keys, perPhase = 6, 10
	p := newKeyedPublisher(c, "orders")
	publish := func(through ...int) { t.Helper(); p.publish(t, perPhase, keys, through...) }
	publish(0, 1, 2)

	c.nodes[0].Kill()
	start := time.Now()
	publish(1, 2)
	t.Logf("node 1 killed: %d publishes through nodes 2 and 3 took %v (the first waited for the election of node 1's shard)",
		keys*perPhase, time.Since(start).Round(time.Millisecond))

	var err error
	if c.nodes[0], err = c.tryStart(0); err != nil {
		t.Fatalf("restart node 1: %v", err)
	}
	publish(0, 1, 2)

	drainConsumedOnce(t, c.client(2), "orders", p.acked)
}
