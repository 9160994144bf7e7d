package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// liveLoad publishes numbered events per key to topics, and consumes them,
// until stopped: the load a cluster carries on with while it changes.
type liveLoad struct {
	topics []string
	pub    *client.Client
	sub    *client.Client

	mu       sync.Mutex
	acked    map[string][]framework.Published     // by topic
	consumed map[string]map[int][]client.Delivery // by topic, then shard
	seq      map[string]map[string]int            // by topic, then key
	errs     []error                              // publishes that failed for good
	stop     chan struct{}
	wg       sync.WaitGroup
}

func startLiveLoad(pub, sub *client.Client, topics ...string) *liveLoad {
	l := &liveLoad{topics: topics, pub: pub, sub: sub, acked: map[string][]framework.Published{},
		consumed: map[string]map[int][]client.Delivery{}, seq: map[string]map[string]int{}, stop: make(chan struct{})}
	for _, tp := range topics {
		l.consumed[tp] = map[int][]client.Delivery{}
		l.seq[tp] = map[string]int{}
	}
	l.wg.Go(l.publish)
	l.wg.Go(l.consume)
	return l
}

func (l *liveLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// publish sends one event at a time, round the keys and topics.
func (l *liveLoad) publish() {
	ctx := context.Background()
	for i := 0; !l.stopped(); i++ {
		tp, key := l.topics[i%len(l.topics)], fmt.Sprint("k", i%12)
		l.mu.Lock()
		seq := l.seq[tp][key]
		l.mu.Unlock()
		ids, err := l.pub.Publish(ctx, tp, client.Event{Key: key, Payload: fmt.Appendf(nil, "%s %d", key, seq)})
		l.mu.Lock()
		if err != nil {
			l.errs = append(l.errs, fmt.Errorf("publish %s %s %d: %w", tp, key, seq, err))
		} else {
			l.acked[tp] = append(l.acked[tp], framework.Published{Key: key, Seq: seq, ID: ids[0]})
			l.seq[tp][key]++
		}
		l.mu.Unlock()
	}
}

// consume fetches and acknowledges every few hundred milliseconds. An
// acknowledgement that fails (its node went down) may have been applied,
// or not: it is sent again until it succeeds, so that every event fetched
// is counted once. No other fetch runs meanwhile, and a key's later events
// wait for its earlier ones, so the order holds.
func (l *liveLoad) consume() {
	ctx := context.Background()
	for !l.stopped() {
		for _, tp := range l.topics {
			ds, _ := l.sub.Fetch(ctx, tp, client.FetchOptions{MaxEvents: 200, VisibilityTimeout: 5 * time.Second})
			if len(ds) == 0 {
				continue
			}
			ids := make([]string, len(ds))
			for i, d := range ds {
				ids[i] = d.ID
			}
			for _, err := l.sub.Ack(ctx, ids...); err != nil && !l.stopped(); _, err = l.sub.Ack(ctx, ids...) {
				time.Sleep(100 * time.Millisecond) // a node is down: wait for the cluster to recover
			}
			l.mu.Lock()
			for _, d := range ds {
				l.consumed[tp][d.Shard] = append(l.consumed[tp][d.Shard], d)
			}
			l.mu.Unlock()
		}
		select {
		case <-l.stop:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// finish stops the load, consumes what is left through c, and checks that
// every acknowledged event of every topic was consumed once, in order per
// key. Events still leased when the load stopped come back once their
// lease ends, and a shard changing leader is read once it has one: it
// drains until every acknowledged event is in, for up to a minute.
func (l *liveLoad) finish(t *testing.T, c *client.Client) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	if err := errors.Join(l.errs...); err != nil {
		t.Errorf("publishes failed during the change: %v", err)
	}
	for _, tp := range l.topics {
		deadline := time.Now().Add(time.Minute)
		for {
			// A shard may be between leaders (the leadership follows the
			// rebalance's preferred leaders): it is read again.
			byShard, unreadable := framework.DrainTopic(t, c, tp)
			for sh, ds := range byShard {
				l.consumed[tp][sh] = append(l.consumed[tp][sh], ds...)
			}
			if consumedAll(l.consumed[tp], l.acked[tp]) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: unreadable shards at the end: %v", tp, unreadable)
				break
			}
			time.Sleep(200 * time.Millisecond) // leases run out, leaders are elected
		}
		t.Logf("%s: %d events published and consumed", tp, len(l.acked[tp]))
		checkConsumedOnce(t, l.consumed[tp], l.acked[tp])
	}
}

func consumedAll(byShard map[int][]client.Delivery, acked []framework.Published) bool {
	got := map[string]bool{}
	for _, ds := range byShard {
		for _, d := range ds {
			got[d.ID] = true
		}
	}
	for _, a := range acked {
		if !got[a.ID] {
			return false
		}
	}
	return true
}

// balanced reports whether every node holds within one replica of the
// mean, and is the preferred leader of within one shard of the mean.
func balanced(st *client.ClusterStatus) bool {
	if len(st.Nodes) == 0 {
		return false
	}
	total, led := 0, map[uint64]int{}
	for _, n := range st.Nodes {
		total += n.Replicas
	}
	for _, s := range st.Shards {
		led[s.PreferredLeader]++
	}
	mean := float64(total) / float64(len(st.Nodes))
	leadMean := float64(len(st.Shards)) / float64(len(st.Nodes))
	for _, n := range st.Nodes {
		if d := float64(n.Replicas) - mean; d > 1 || d < -1 {
			return false
		}
		if d := float64(led[n.ID]) - leadMean; d > 1 || d < -1 {
			return false
		}
	}
	return true
}

// placements returns each shard's replicas, preferred leader first.
func placements(st *client.ClusterStatus) map[string][]uint64 {
	out := map[string][]uint64{}
	for _, s := range st.Shards {
		for _, r := range s.Replicas {
			out[s.Name] = append(out[s.Name], r.Node)
		}
	}
	return out
}

// TestE2ERebalanceOntoAnAddedNode: three nodes hold two topics; a fourth
// is added with --rebalance and joins, and the rebalance moves replicas
// onto it, one at a time, while events are published and consumed; the node driving the rebalance (the
// controller's leader) is SIGKILLed half way and restarted, and the next
// leader carries on. Every node ends within one replica of the mean, and
// of the preferred leaders' mean; nothing acknowledged is lost or
// consumed twice or out of order; a second rebalance moves nothing.
func TestE2ERebalanceOntoAnAddedNode(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	url := "http://" + c.addrs[0]
	cli(t, url, "", "topic", "create", "a", "--shards", "2")
	cli(t, url, "", "topic", "create", "b", "--shards", "3")
	waitStatus(t, c.client(0), "every shard is led by its preferred leader", ledByPreferred)

	dir4, addr4 := t.TempDir(), testkit.FreeAddr(t)
	// The rebalance starts with the add: replicas move once node 4 runs.
	if out := cli(t, url, "", "cluster", "add", "4", addr4, "--rebalance"); !strings.Contains(out, "node 4 is a member") || !strings.Contains(out, "rebalancing") {
		t.Errorf("cluster add --rebalance said %q", out)
	}
	c.peers += ",4=" + addr4
	n4, err := framework.TryStartServer(t, dir4, addr4, "--node-id", "4", "--peers", c.peers, "--join")
	if err != nil {
		t.Fatalf("start node 4: %v", err)
	}
	c.dirs, c.addrs, c.nodes = append(c.dirs, dir4), append(c.addrs, addr4), append(c.nodes, n4)
	st := waitStatus(t, c.client(0), "node 4 is up", func(st *client.ClusterStatus) bool {
		return len(st.Nodes) == 4 && !slices.ContainsFunc(st.Nodes, func(n client.ClusterNode) bool { return !n.Reachable })
	})

	// The node to kill half way: the controller's leader, which drives
	// the rebalance; the load goes through the others.
	victim := int(st.ControllerLeader) - 1
	var others []string
	for i, a := range c.addrs {
		if i != victim {
			others = append(others, a)
		}
	}
	pub := client.New("http://"+others[0], client.WithLeaderRouting(others[1:]...), client.WithPublishRetries(40))
	load := startLiveLoad(pub, client.New("http://"+others[1], client.WithTimeout(10*time.Second)), "a", "b")

	// Asking again while it runs changes nothing.
	if out := cli(t, "http://"+others[0], "", "cluster", "rebalance"); !strings.Contains(out, "rebalancing") {
		t.Errorf("cluster rebalance said %q", out)
	}
	waitStatus(t, c.client(0), "a replica is moving to node 4", func(st *client.ClusterStatus) bool {
		return st.Rebalancing && slices.ContainsFunc(st.Shards, func(s client.ClusterShard) bool {
			return len(s.Replicas) == 4 && slices.ContainsFunc(s.Replicas, func(r client.ClusterReplica) bool { return r.Node == 4 })
		})
	})
	t.Logf("killing node %d, the controller's leader, while a replica moves", victim+1)
	c.nodes[victim].Kill()
	if c.nodes[victim], err = c.tryStart(victim); err != nil {
		t.Fatalf("restart node %d: %v", victim+1, err)
	}

	start := time.Now()
	st = waitStatus(t, client.New("http://"+others[0]), "the rebalance is done and leaders are where it put them", func(st *client.ClusterStatus) bool {
		return !st.Rebalancing && ledByPreferred(st)
	})
	t.Logf("rebalanced %v after the restart: replicas (preferred leader first) %v", time.Since(start).Round(time.Millisecond), placements(st))
	if !balanced(st) {
		t.Errorf("after the rebalance: replicas (preferred leader first) %v; want each node within one of the mean of replicas and of preferred leaders", placements(st))
	}
	for _, s := range st.Shards {
		if len(s.Replicas) != 3 {
			t.Errorf("shard %s has replicas %+v after the rebalance, want three", s.Name, s.Replicas)
		}
	}
	load.finish(t, client.New("http://"+others[0]))

	// Again: nothing moves.
	r := runCLI(ctx, "", "--server", url, "cluster", "rebalance", "--wait")
	if r.code != 0 || !strings.Contains(r.stdout, "rebalanced: 0 replicas moved") {
		t.Errorf("second cluster rebalance --wait: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	again := waitStatus(t, c.client(0), "the second rebalance is done", func(st *client.ClusterStatus) bool { return !st.Rebalancing })
	if got, want := placements(again), placements(st); !equalPlacements(got, want) {
		t.Errorf("a second rebalance changed the placement:\n%v\nwas\n%v", got, want)
	}
}

func equalPlacements(a, b map[string][]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// A node alone has nothing to rebalance, and says so; a stray argument is
// refused before anything is asked.
func TestClusterRebalanceRefusals(t *testing.T) {
	url := "http://" + framework.StartServer(t, t.TempDir(), testkit.FreeAddr(t)).Addr()
	if got := cliFails(t, url, "", "cluster", "rebalance"); !strings.Contains(got, "runs alone") {
		t.Errorf("rebalance of a node alone: %q", got)
	}
	if got := cliFails(t, url, "", "cluster", "rebalance", "now"); !strings.Contains(got, "wrong number of arguments") {
		t.Errorf("rebalance with an argument: %q", got)
	}
	if out := cli(t, url, "", "cluster", "status"); strings.Contains(out, "rebalancing") {
		t.Errorf("status after refused rebalances says %q", out)
	}
}
