package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"herald/client"
	"herald/tests/framework"
)

// leaderLeases returns the leases the node c reaches holds on the shards
// of a topic: the leases of the shards it leads, as they live in its
// memory.
func leaderLeases(t *testing.T, c *client.Client, topic string) uint64 {
	t.Helper()
	st, err := c.TopicStats(context.Background(), topic)
	if err != nil {
		t.Fatalf("stats of %s: %v", topic, err)
	}
	var n uint64
	for _, s := range st.Shards {
		n += s.Leased
	}
	return n
}

// TestE2EAckThroughAFollowerEndsTheLeadersLeases: events fetched through
// the leader of their shard and acknowledged through another node hold no
// lease on the leader once the ack is applied, with no fetch since; and
// under a consumer that fetches and acknowledges through a node that does
// not lead, the shard's leadership goes back to its preferred leader (it
// waits for a moment when no consumer holds a lease).
func TestE2EAckThroughAFollowerEndsTheLeadersLeases(t *testing.T) {
	c, leader := startOneShardCluster(t)
	ctx := context.Background()
	follower := (leader + 1) % 3
	for i := range 10 {
		if _, err := c.client(leader).Publish(ctx, "orders", client.Event{Key: fmt.Sprint("k", i), Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := c.client(leader).Fetch(ctx, "orders", client.FetchOptions{MaxEvents: 10, VisibilityTimeout: 10 * time.Minute})
	if err != nil || len(ds) != 10 {
		t.Fatalf("fetch through the leader: %d events, %v; want 10", len(ds), err)
	}
	if n := leaderLeases(t, c.client(leader), "orders"); n != 10 {
		t.Fatalf("the leader holds %d leases after a fetch of 10 events, want 10", n)
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	// Half the events are acknowledged through a follower: their leases
	// end; the others' stay.
	if n, err := c.client(follower).Ack(ctx, ids[:5]...); err != nil || n != 5 {
		t.Fatalf("ack through node %d: %d, %v; want 5", follower+1, n, err)
	}
	waitLeases(t, c.client(leader), "orders", 5)
	if n, err := c.client(follower).Ack(ctx, ids[5:]...); err != nil || n != 5 {
		t.Fatalf("ack through node %d: %d, %v; want 5", follower+1, n, err)
	}
	waitLeases(t, c.client(leader), "orders", 0)

	// The preferred leader goes down and comes back: another node leads
	// the shard meanwhile, and hands it back only when no consumer holds
	// a lease on it. The consumer fetches and acknowledges through the
	// node that leads neither before nor after.
	c.nodes[leader].Kill()
	st := waitStatus(t, c.client(follower), "another node leads the shard", func(st *client.ClusterStatus) bool {
		l := st.Shards[0].Leader
		return l != 0 && int(l) != leader+1
	})
	interim := int(st.Shards[0].Leader) - 1
	other := slices.IndexFunc([]int{0, 1, 2}, func(i int) bool { return i != leader && i != interim })
	load := startLiveLoad(c.client(interim), c.client(other), "orders")
	if c.nodes[leader], err = c.tryStart(leader); err != nil {
		t.Fatalf("restart node %d: %v", leader+1, err)
	}
	start := time.Now()
	waitStatus(t, c.client(other), "the preferred leader leads the shard again", ledByPreferred)
	t.Logf("the shard went back to its preferred leader %v after its restart, under a consumer through node %d",
		time.Since(start).Round(time.Millisecond), other+1)
	load.finish(t, c.client(other))
}

// startOneShardCluster starts a cluster with a topic "orders" of one
// shard, and returns it once the shard is led by its preferred leader,
// with that leader's index.
func startOneShardCluster(t *testing.T) (*cluster, int) {
	t.Helper()
	c := startCluster(t)
	if _, err := c.client(0).CreateTopic(context.Background(), "orders", map[string]string{"shards": "1"}); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, c.client(0), "the shard is led by its preferred leader", ledByPreferred)
	// A follower that has not heard from the new leader yet answers a
	// fetch with "no leader yet": wait until every node routes one (the
	// topic is empty, so these fetches lease nothing).
	for i := range c.nodes {
		framework.WaitWithin(t, time.Minute, fmt.Sprintf("node %d to route fetches to the shard's leader", i+1), func() bool {
			_, err := c.client(i).Fetch(context.Background(), "orders", client.FetchOptions{MaxEvents: 1})
			return err == nil
		})
	}
	return c, int(st.Shards[0].Leader) - 1
}

// waitLeases waits until the node c reaches holds want leases on topic.
func waitLeases(t *testing.T, c *client.Client, topic string, want uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := leaderLeases(t, c, topic)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader holds %d leases, want %d", n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestE2EReceiptAckThroughAFollowerIsCheckedOnTheLeader: acks by receipt
// sent to nodes that do not lead the shard are checked against the
// leader's leases: a consumer whose lease expired, and whose event went to
// another consumer since, acks without ending the other's lease, so the
// key's next event waits for the event's current holder.
func TestE2EReceiptAckThroughAFollowerIsCheckedOnTheLeader(t *testing.T) {
	c, leader := startOneShardCluster(t)
	ctx := context.Background()
	a, b := (leader+1)%3, (leader+2)%3
	for _, p := range []string{"first", "second"} {
		if _, err := c.client(leader).Publish(ctx, "orders", client.Event{Key: "k", Payload: []byte(p)}); err != nil {
			t.Fatal(err)
		}
	}
	// Fetches of one event: a fetch of more would lease k's run, both events.
	lapsing, err := c.client(a).Fetch(ctx, "orders", client.FetchOptions{MaxEvents: 1, VisibilityTimeout: 300 * time.Millisecond})
	if err != nil || len(lapsing) != 1 || string(lapsing[0].Payload) != "first" {
		t.Fatalf("fetch through node %d: %v, %v; want the first event", a+1, lapsing, err)
	}
	time.Sleep(400 * time.Millisecond) // its lease expires
	holding, err := c.client(b).Fetch(ctx, "orders", client.FetchOptions{MaxEvents: 1, VisibilityTimeout: 10 * time.Minute})
	if err != nil || len(holding) != 1 || holding[0].ID != lapsing[0].ID {
		t.Fatalf("fetch through node %d after the lease expired: %v, %v; want the first event again", b+1, holding, err)
	}

	acksBefore := forwardedRequestsHow(t, "ack", c.addrs[a])
	n, err := c.client(a).Ack(ctx, lapsing[0].Receipt)
	var lapsed *client.LapsedError
	if !errors.As(err, &lapsed) || n != 0 || !slices.Equal(lapsed.Receipts, []string{lapsing[0].Receipt}) {
		t.Fatalf("ack of the lapsed receipt through node %d: %d, %v; want 0 and a LapsedError naming it", a+1, n, err)
	}
	if n := leaderLeases(t, c.client(leader), "orders"); n != 1 {
		t.Fatalf("the leader holds %d leases after the lapsed ack, want 1 (the current holder's)", n)
	}
	if ds, err := c.client(leader).Fetch(ctx, "orders", client.FetchOptions{MaxEvents: 10}); err != nil || len(ds) != 0 {
		t.Fatalf("fetch while the first event is held: %v, %v; want nothing (the key's next event waits)", ds, err)
	}
	if n, err := c.client(a).Ack(ctx, holding[0].Receipt); err != nil || n != 1 {
		t.Fatalf("ack of the current receipt through node %d: %d, %v; want 1", a+1, n, err)
	}
	if got := forwardedRequestsHow(t, "ack", c.addrs[a]) - acksBefore; got != 2 {
		t.Errorf("node %d counted %v acks forwarded to the leader (herald_forwarded_requests_total{how=\"ack\"}), want 2", a+1, got)
	}
	ds, err := c.client(b).Fetch(ctx, "orders", client.FetchOptions{MaxEvents: 10})
	if err != nil || len(ds) != 1 || string(ds[0].Payload) != "second" {
		t.Fatalf("fetch after the first event was acknowledged: %v, %v; want the second", ds, err)
	}
}
