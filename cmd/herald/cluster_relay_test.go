package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"herald/client"
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
	var acked []published
	seq := make(map[string]int)
	for r := range 4 {
		for k := range 12 {
			key := fmt.Sprint("k", k)
			i := (r + k) % 4
			ids, err := c.client(i).Publish(ctx, "orders", client.Event{Key: key, Payload: fmt.Appendf(nil, "%s %d", key, seq[key])})
			if err != nil {
				t.Fatalf("publish %s through node %d: %v", key, i+1, err)
			}
			acked = append(acked, published{key: key, seq: seq[key], id: ids[0]})
			seq[key]++
		}
	}
	all := make(map[int][]client.Delivery)
	for i := range 4 {
		// Each node consumes a share; whatever it fetches and acks is gone
		// for the next, so together they must see everything once.
		ds, err := c.client(i).Fetch(ctx, "orders", client.FetchOptions{MaxEvents: len(acked) / 4})
		if err != nil {
			t.Fatalf("fetch through node %d: %v", i+1, err)
		}
		var ids []string
		for _, d := range ds {
			all[d.Shard] = append(all[d.Shard], d)
			ids = append(ids, d.ID)
		}
		if len(ids) > 0 {
			if _, err := c.client(i).Ack(ctx, ids...); err != nil {
				t.Fatalf("ack through node %d: %v", i+1, err)
			}
		}
	}
	rest, unreadable := drainTopic(t, c.client(3), "orders")
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
	var acked []published
	seq := make(map[string]int)
	publish := func(through int) {
		t.Helper()
		for k := range 6 {
			key := fmt.Sprint("k", k)
			ids, err := c.client(through).Publish(ctx, "orders", client.Event{Key: key, Payload: fmt.Appendf(nil, "%s %d", key, seq[key])})
			if err != nil {
				t.Fatalf("publish %s through node %d: %v", key, through+1, err)
			}
			acked = append(acked, published{key: key, seq: seq[key], id: ids[0]})
			seq[key]++
		}
	}
	publish(0)
	// Idle for longer than a group waits before it quiesces (two
	// election timeouts): the scenario is a cluster that sleeps.
	time.Sleep(4 * time.Second)
	c.nodes[0].kill()
	start := time.Now()
	publish(1)
	t.Logf("first publishes to every shard after killing node 1 in an idle cluster took %v", time.Since(start).Round(time.Millisecond))
	byShard, unreadable := drainTopic(t, c.client(2), "orders")
	if len(unreadable) > 0 {
		t.Fatalf("unreadable shards: %v", unreadable)
	}
	checkConsumedOnce(t, byShard, acked)
}
