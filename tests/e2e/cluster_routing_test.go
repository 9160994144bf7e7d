package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"herald/bench/load"
	"herald/client"
	"herald/internal/topic"
	"herald/tests/framework"
)

// forwardedRequests sums herald_forwarded_requests_total over the nodes
// at addrs: the shard requests a node passed to another because it does
// not lead the shard.
func forwardedRequests(t *testing.T, addrs ...string) float64 {
	t.Helper()
	return forwardedRequestsHow(t, "", addrs...)
}

// forwardedRequestsHow is forwardedRequests of the series labelled how
// (all of them if how is "").
func forwardedRequestsHow(t *testing.T, how string, addrs ...string) float64 {
	t.Helper()
	prefix := "herald_forwarded_requests_total{"
	if how != "" {
		prefix += `how="` + how + `"}`
	}
	total := 0.0
	for _, a := range addrs {
		resp, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			t.Fatalf("scrape %s: %v", a, err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, prefix) {
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
		p.acked = append(p.acked, framework.Published{Key: key, Seq: p.seq[key], ID: ids[0]})
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

	// So does it over publish streams, one to each leader.
	streamed := client.New("http://"+c.addrs[0], client.WithLeaderRouting(), client.WithPublishStream(), client.WithPublishRetries(20))
	defer streamed.Close()
	before = forwardedRequests(t, c.addrs...)
	routedPublish(t, streamed, p, keys)
	if got := forwardedRequests(t, c.addrs...) - before; got != 0 {
		t.Errorf("%d requests forwarded between nodes for %d publishes routed over streams, want 0", int(got), len(keys))
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

	drainConsumedOnce(t, c.client(1), "orders", p.acked)
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
	c.nodes[victim].Kill()
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

	drainConsumedOnce(t, client.New("http://"+live[0]), "orders", p.acked)
}

// routedConsumer fetches and acknowledges through a client, retrying an
// ack that fails (its node went down) until it succeeds, and keeps what
// it got in the order it got it.
type routedConsumer struct {
	c   *client.Client
	got []client.Delivery
}

// round fetches once and acknowledges what it got; it returns how many
// events it got.
func (r *routedConsumer) round(t *testing.T) int {
	t.Helper()
	ds := r.fetch()
	r.ack(t, ds)
	return len(ds)
}

func (r *routedConsumer) fetch() []client.Delivery {
	ds, _ := r.c.Fetch(context.Background(), "orders", client.FetchOptions{MaxEvents: 20, VisibilityTimeout: 5 * time.Second, Wait: 200 * time.Millisecond})
	return ds
}

// ack acknowledges ds by their receipts, each sent to its shard's leader,
// again and again until it succeeds, and keeps them. Receipts that lapsed
// (handed out again meanwhile) are done with: the events come back.
func (r *routedConsumer) ack(t *testing.T, ds []client.Delivery) {
	t.Helper()
	if len(ds) == 0 {
		return
	}
	receipts := make([]string, len(ds))
	for i, d := range ds {
		receipts[i] = d.Receipt
	}
	deadline := time.Now().Add(time.Minute)
	var lapsed *client.LapsedError
	for _, err := r.c.Ack(context.Background(), receipts...); err != nil && !errors.As(err, &lapsed); _, err = r.c.Ack(context.Background(), receipts...) {
		if time.Now().After(deadline) {
			t.Fatalf("ack of %d events still fails after a minute: %v", len(receipts), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.got = append(r.got, ds...)
}

// until consumes until every event in acked was consumed, for up to a
// minute.
func (r *routedConsumer) until(t *testing.T, acked []framework.Published) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !consumedAll(map[int][]client.Delivery{0: r.got}, acked) {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute, %d deliveries and not every one of %d acknowledged events", len(r.got), len(acked))
		}
		r.round(t)
	}
}

// checkAtLeastOnceInOrder checks that every acknowledged event was
// consumed, with its payload, and that each key's events came in order:
// an event handed out again (its lease was on a leader that died) comes
// before the key's next one.
func checkAtLeastOnceInOrder(t *testing.T, got []client.Delivery, acked []framework.Published) {
	t.Helper()
	byID := make(map[string]client.Delivery)
	last := make(map[string]int)
	for _, d := range got {
		byID[d.ID] = d
		var key string
		var n int
		if _, err := fmt.Sscanf(string(d.Payload), "%s %d", &key, &n); err != nil {
			t.Fatalf("event %s has payload %q", d.ID, d.Payload)
		}
		if prev, ok := last[key]; ok && n < prev {
			t.Errorf("key %s: event %d came after %d", key, n, prev)
		}
		last[key] = n
	}
	for _, a := range acked {
		d, ok := byID[a.ID]
		if !ok {
			t.Errorf("acknowledged event %s (key %s seq %d) is missing", a.ID, a.Key, a.Seq)
		} else if want := fmt.Sprintf("%s %d", a.Key, a.Seq); string(d.Payload) != want {
			t.Errorf("event %s has payload %q, want %q", a.ID, d.Payload, want)
		}
	}
}

// TestE2ERoutingClientConsumesFromShardLeaders: a client with leader
// routing, given one node of three, fetches each shard from its leader and
// acknowledges there: no request is forwarded between nodes, and every
// event comes once, in order per key. Then node 1, which leads shards and
// is the node the client was given, is SIGKILLed while the client
// consumes: every acknowledged event is still consumed, at least once and
// in order per key.
func TestE2ERoutingClientConsumesFromShardLeaders(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	const shards = 6
	if _, err := c.client(0).CreateTopic(ctx, "orders", map[string]string{"shards": fmt.Sprint(shards)}); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, c.client(0), "every shard is led by its preferred leader", ledByPreferred)
	keys := keysCovering(shards, 3)
	p := newKeyedPublisher(c, "orders")
	routed := client.New("http://"+c.addrs[0], client.WithLeaderRouting(c.addrs[1], c.addrs[2]), client.WithPublishRetries(40))
	for range 4 {
		routedPublish(t, routed, p, keys)
	}

	cons := &routedConsumer{c: routed}
	cons.round(t) // learns the topic's leaders
	before := forwardedRequests(t, c.addrs...)
	cons.until(t, p.acked)
	if got := forwardedRequests(t, c.addrs...) - before; got != 0 {
		t.Errorf("%d requests forwarded between nodes while the routing client consumed, want 0", int(got))
	}
	t.Logf("%d events consumed from their shards' leaders, nothing forwarded", len(cons.got))
	checkConsumedOnce(t, map[int][]client.Delivery{0: cons.got}, p.acked)

	// Kill node 1 while events are leased and the client consumes.
	const victim = 0
	if !slices.ContainsFunc(st.Shards, func(s client.ClusterShard) bool { return s.Leader == victim+1 }) {
		t.Fatalf("node 1 leads no shard: %+v", st.Shards)
	}
	for range 4 {
		routedPublish(t, routed, p, keys)
	}
	leased := cons.fetch() // node 1's shards' among them: their leases die with it
	c.nodes[victim].Kill()
	cons.ack(t, leased)
	for range 2 {
		routedPublish(t, routed, p, keys)
	}
	cons.until(t, p.acked)
	checkAtLeastOnceInOrder(t, cons.got, p.acked)
	t.Logf("%d events published, %d deliveries", len(p.acked), len(cons.got))
}
