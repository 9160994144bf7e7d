package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// subscribeAll creates, on topic, subscription "all" to a and "even" to
// b, whose filter admits only events with header parity=even, and deletes
// the default subscription, which would hold every event for pull
// consumers that never come.
func subscribeAll(t *testing.T, c *client.Client, topic string, a, b *framework.Webhook) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.CreateSubscription(ctx, topic, "all", map[string]string{"push_endpoint": a.URL, "retry_sleep_duration": "0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSubscription(ctx, topic, "even", map[string]string{"push_endpoint": b.URL, "retry_sleep_duration": "0",
		"filter_policy": `{"parity": ["even"]}`}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSubscription(ctx, topic, "default"); err != nil {
		t.Fatal(err)
	}
}

// parityEvent is event seq of key, a JSON number, with its parity as a
// header.
func parityEvent(key string, seq int) client.Event {
	parity := "even"
	if seq%2 == 1 {
		parity = "odd"
	}
	return client.Event{Key: key, Payload: fmt.Append(nil, seq), Headers: map[string]string{"parity": parity}}
}

func evens(ps []framework.Published) []framework.Published {
	var out []framework.Published
	for _, p := range ps {
		if p.Seq%2 == 0 {
			out = append(out, p)
		}
	}
	return out
}

// TestE2ESubscriptionsSurviveAKillMidDelivery SIGKILLs the server while
// it pushes one topic's events to two subscriptions, one filtered, and
// restarts it: each gets every event its filter admits and no other, each
// key's in order, with no more duplicates than were in flight.
func TestE2ESubscriptionsSurviveAKillMidDelivery(t *testing.T) {
	all, even := framework.NewWebhook(t), framework.NewWebhook(t)
	dataDir := t.TempDir()
	addr := testkit.FreeAddr(t)
	srv := framework.StartServer(t, dataDir, addr)
	c := client.New("http://"+addr, client.WithTimeout(10*time.Second))
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, "orders", map[string]string{"shards": "4"}); err != nil {
		t.Fatal(err)
	}
	subscribeAll(t, c, "orders", all, even)

	const keys, perKey = 10, 100
	var acked []framework.Published
	for i := range perKey {
		var evs []client.Event
		for k := range keys {
			evs = append(evs, parityEvent(fmt.Sprint("k", k), i))
		}
		ids, err := c.Publish(ctx, "orders", evs...)
		if err != nil {
			t.Fatal(err)
		}
		for k, id := range ids {
			acked = append(acked, framework.Published{Key: fmt.Sprint("k", k), Seq: i, ID: id})
		}
	}
	all.Open()
	even.Open()
	framework.WaitFor(t, "deliveries are under way", func() bool { return all.Arrived() >= 300 })
	srv.Kill()
	framework.StartServer(t, dataDir, addr)
	framework.WaitFor(t, "both subscriptions have their events", func() bool {
		return all.Arrived() >= len(acked) && even.Arrived() >= len(acked)/2
	})
	// In flight at the kill: at most 4 shards × 16 sends, plus deliveries
	// made but not yet recorded (a window per shard), per subscription.
	t.Logf("all: %d duplicates", all.Check(t, "all", acked, 4*64*2))
	t.Logf("even: %d duplicates", even.Check(t, "even", evens(acked), 4*64*2))
}

// TestE2EClusterSubscriptionsSurviveANodeKill runs three nodes, with two
// push subscriptions on a topic of three shards: it publishes through
// every node, SIGKILLs node 1, publishes through the others, restarts
// node 1 and publishes through all again. Each subscription gets every
// acknowledged event its filter admits, in order per key, whichever node
// led its shards when.
func TestE2EClusterSubscriptionsSurviveANodeKill(t *testing.T) {
	all, even := framework.NewWebhook(t), framework.NewWebhook(t)
	all.Open()
	even.Open()
	c := startCluster(t)
	ctx := context.Background()
	if _, err := c.client(0).CreateTopic(ctx, "orders", map[string]string{"shards": "3"}); err != nil {
		t.Fatal(err)
	}
	subscribeAll(t, c.client(0), "orders", all, even)

	var acked []framework.Published
	seq := map[string]int{}
	publish := func(rounds int, through ...int) {
		t.Helper()
		for r := range rounds {
			for k := range 6 {
				key := fmt.Sprint("k", k)
				i := through[(r+k)%len(through)]
				ids, err := c.client(i).Publish(ctx, "orders", parityEvent(key, seq[key]))
				if err != nil {
					t.Fatalf("publish %s %d through node %d: %v", key, seq[key], i+1, err)
				}
				acked = append(acked, framework.Published{Key: key, Seq: seq[key], ID: ids[0]})
				seq[key]++
			}
		}
	}
	publish(10, 0, 1, 2)
	c.nodes[0].Kill()
	publish(10, 1, 2)
	var err error
	if c.nodes[0], err = c.tryStart(0); err != nil {
		t.Fatalf("restart node 1: %v", err)
	}
	publish(10, 0, 1, 2)
	framework.WaitFor(t, "both subscriptions have their events", func() bool {
		return all.Arrived() >= len(acked) && even.Arrived() >= len(evens(acked))
	})
	t.Logf("all: %d duplicates", all.Check(t, "all", acked, 3*64*2))
	t.Logf("even: %d duplicates", even.Check(t, "even", evens(acked), 3*64*2))
}
