package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"herald/bench/load"
	"herald/client"
	"herald/internal/topic"
)

// forwardedRequests sums herald_forwarded_requests_total over the nodes
// at addrs: the shard requests a node passed to another because it does
// not lead the shard.
func forwardedRequests(t *testing.T, addrs ...string) float64 {
	t.Helper()
	total := 0.0
	for _, a := range addrs {
		resp, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			t.Fatalf("scrape %s: %v", a, err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "herald_forwarded_requests_total{") {
				continue
			}
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("scrape %s: %q: %v", a, line, err)
			}
			total += v
		}
		resp.Body.Close()
		if err := sc.Err(); err != nil {
			t.Fatalf("scrape %s: %v", a, err)
		}
	}
	return total
}

// keysCovering returns n keys per shard of a topic of shards shards.
func keysCovering(shards, n int) []string {
	var keys []string
	per := make([]int, shards)
	for i := 0; len(keys) < shards*n; i++ {
		k := fmt.Sprint("k", i)
		if s := topic.ShardFor(k, shards); per[s] < n {
			per[s]++
			keys = append(keys, k)
		}
	}
	return keys
}

// routedPublish publishes one event per key through c, numbered per key
// as keyedPublisher does, and records what was acknowledged in p.
func routedPublish(t *testing.T, c *client.Client, p *keyedPublisher, keys []string) {
	t.Helper()
	for _, key := range keys {
		ids, err := c.Publish(context.Background(), p.topic, client.Event{Key: key, Payload: fmt.Appendf(nil, "%s %d", key, p.seq[key])})
		if err != nil {
			t.Fatalf("publish %s %d: %v", key, p.seq[key], err)
		}
		p.acked = append(p.acked, published{key: key, seq: p.seq[key], id: ids[0]})
		p.seq[key]++
	}
}

// TestE2ERoutingClientGoesToShardLeaders: a client with leader routing,
// given one node of three, publishes to every shard with no request
// forwarded between nodes; a client without it, through the same node,
// has two thirds of its requests forwarded.
func TestE2ERoutingClientGoesToShardLeaders(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	const shards = 6
	if _, err := c.client(0).CreateTopic(ctx, "orders", map[string]string{"shards": fmt.Sprint(shards)}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c.client(0), "every shard is led by its preferred leader", ledByPreferred)
	if _, err := c.client(0).CreateTopic(ctx, "bench", map[string]string{"shards": "3"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c.client(0), "every shard is led by its preferred leader", ledByPreferred)
	keys := keysCovering(shards, 4)
	p := newKeyedPublisher(c, "orders")

	routed := client.New("http://"+c.addrs[0], client.WithLeaderRouting(), client.WithPublishRetries(20))
	before := forwardedRequests(t, c.addrs...)
	for range 3 {
		routedPublish(t, routed, p, keys)
	}
	if got := forwardedRequests(t, c.addrs...) - before; got != 0 {
		t.Errorf("%d requests forwarded between nodes for %d routed publishes, want 0", int(got), 3*len(keys))
	}

	// So does herald bench publish --leader-routing.
	before = forwardedRequests(t, c.addrs...)
	out := cli(t, "http://"+c.addrs[0], "", "bench", "publish", "--topic", "bench", "--leader-routing", "--through", c.addrs[1],
		"--producers", "8", "--count", "200", "--warmup", "0s", "-o", "json")
	var res load.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bench output is not a result: %v\n%s", err, out)
	}
	if res.Events != 200 || res.Errors != 0 || res.Settings["leader_routing"] != "true" {
		t.Errorf("bench --leader-routing: events %d errors %d settings %v", res.Events, res.Errors, res.Settings)
	}
	if got := forwardedRequests(t, c.addrs...) - before; got != 0 {
		t.Errorf("%d requests forwarded during bench publish --leader-routing, want 0", int(got))
	}

	before = forwardedRequests(t, c.addrs...)
	routedPublish(t, c.client(0), p, keys)
	if got := forwardedRequests(t, c.addrs...) - before; got < float64(len(keys))/2 {
		t.Errorf("%d requests forwarded for %d publishes through one node without routing; want about two thirds of them (node 1 leads %d of %d shards)",
			int(got), len(keys), shards/3, shards)
	}

	byShard, unreadable := drainTopic(t, c.client(1), "orders")
	if len(unreadable) > 0 {
		t.Fatalf("unreadable shards: %v", unreadable)
	}
	checkConsumedOnce(t, byShard, p.acked)
}

// TestE2ERoutingClientFollowsANewLeader: the routing client publishes
// straight to the leader of each shard; node 1, which leads one and is the
// node the client was given, is SIGKILLed; the client's publishes keep
// succeeding (its retries go elsewhere while it asks the other nodes where
// the shard is led now), then go straight to the new leader, and every
// acknowledged event is consumed once, in order per key.
func TestE2ERoutingClientFollowsANewLeader(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	const shards = 3
	if _, err := c.client(0).CreateTopic(ctx, "orders", map[string]string{"shards": fmt.Sprint(shards)}); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, c.client(0), "every shard is led by its preferred leader", ledByPreferred)
	keys := keysCovering(shards, 3)
	p := newKeyedPublisher(c, "orders")
	routed := client.New("http://"+c.addrs[0], client.WithLeaderRouting(c.addrs[1], c.addrs[2]), client.WithPublishRetries(40))
	routedPublish(t, routed, p, keys)

	// Kill node 1, the node the client was given and the leader of a
	// shard, and publish on to every shard.
	const victim = 0
	if !slices.ContainsFunc(st.Shards, func(s client.ClusterShard) bool { return s.Leader == victim+1 }) {
		t.Fatalf("node 1 leads no shard: %+v", st.Shards)
	}
	c.nodes[victim].kill()
	var live []string
	for i, a := range c.addrs {
		if i != victim {
			live = append(live, a)
		}
	}
	for range 3 {
		routedPublish(t, routed, p, keys)
	}
	// The client has learned the new leaders: nothing is forwarded now.
	waitStatus(t, client.New("http://"+live[0]), "every shard has a leader", func(st *client.ClusterStatus) bool {
		for _, s := range st.Shards {
			if s.Leader == 0 || int(s.Leader) == victim+1 {
				return false
			}
		}
		return true
	})
	routedPublish(t, routed, p, keys) // may still be forwarded once: the answer marks the map stale
	before := forwardedRequests(t, live...)
	for range 2 {
		routedPublish(t, routed, p, keys)
	}
	if got := forwardedRequests(t, live...) - before; got != 0 {
		t.Errorf("%d requests forwarded after the client learned the new leaders, want 0", int(got))
	}

	byShard, unreadable := drainTopic(t, client.New("http://"+live[0]), "orders")
	if len(unreadable) > 0 {
		t.Fatalf("unreadable shards: %v", unreadable)
	}
	checkConsumedOnce(t, byShard, p.acked)
}
