package e2e

import (
	"context"
	"testing"
	"time"

	"herald/client"
	"herald/tests/framework"
)

// TestE2EClusterNodeWithoutAReplicaServes runs four nodes: each shard has
// three replicas, so every node lacks one of the four shards. Publishing
// and consuming through any node still reach every shard: a node relays
// what it does not hold to a node that does.
func TestE2EClusterNodeWithoutAReplicaServes(t *testing.T) {
	c := startClusterOf(t, 4)
	ctx := context.Background()
	if _, err := c.client(0).CreateTopic(ctx, "orders", map[string]string{"shards": "4"}); err != nil {
		t.Fatal(err)
	}
	p := newKeyedPublisher(c, "orders")
	p.publish(t, 4, 12, 0, 1, 2, 3)
	acked := p.acked
	// A new topic's shards hand their leadership to their preferred
	// leaders; a fetch meanwhile may find a shard between two.
	waitStatus(t, c.client(0), "every shard led by its preferred leader", ledByPreferred)
	all := make(map[int][]client.Delivery)
	for i := range 4 {
		// Each node consumes a share; whatever it fetches and acks is gone
		// for the next, so together they must see everything once.
		ds, err := c.client(i).Fetch(ctx, "orders", client.FetchOptions{MaxEvents: len(acked) / 4})
		if err != nil {
			t.Fatalf("fetch through node %d: %v", i+1, err)
		}
		// Acks by receipt, which a node holding no replica of a shard
		// relays to one that does, and that one to the leader; the drain
		// below acks by event id.
		var receipts []string
		for _, d := range ds {
			all[d.Shard] = append(all[d.Shard], d)
			receipts = append(receipts, d.Receipt)
		}
		if len(receipts) > 0 {
			if _, err := c.client(i).Ack(ctx, receipts...); err != nil {
				t.Fatalf("ack through node %d: %v", i+1, err)
			}
		}
	}
	rest, unreadable := framework.DrainTopic(t, c.client(3), "orders")
	if len(unreadable) > 0 {
		t.Fatalf("unreadable shards through node 4: %v", unreadable)
	}
	for shard, ds := range rest {
		all[shard] = append(all[shard], ds...)
	}
	if len(all) != 4 {
		t.Errorf("events came from %d shards, want 4", len(all))
	}
	checkConsumedOnce(t, all, acked)
}

// TestE2EIdleClusterFailsOver: idle shard groups quiesce (no heartbeats);
// when a node dies while they sleep, the others notice through the
// node-level liveness checks and the shards it led elect new leaders.
func TestE2EIdleClusterFailsOver(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	if _, err := c.client(0).CreateTopic(ctx, "orders", map[string]string{"shards": "3"}); err != nil {
		t.Fatal(err)
	}
	p := newKeyedPublisher(c, "orders")
	publish := func(through int) { t.Helper(); p.publish(t, 1, 6, through) }
	publish(0)
	// Idle for longer than a group waits before it quiesces (two
	// election timeouts): the scenario is a cluster that sleeps.
	time.Sleep(4 * time.Second)
	c.nodes[0].Kill()
	start := time.Now()
	publish(1)
	t.Logf("first publishes to every shard after killing node 1 in an idle cluster took %v", time.Since(start).Round(time.Millisecond))
	drainConsumedOnce(t, c.client(2), "orders", p.acked)
}
