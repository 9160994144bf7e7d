package framework

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"herald/client"
)

// Published is an event a publish acknowledged: its key, its number
// among the key's events, and the id it was given.
type Published struct {
	Key string
	Seq int
	ID  string
}

// DrainTopic fetches and acknowledges until the topic has nothing more to
// give, and returns the events per shard in the order they came and the
// reasons of the shards Fetch could not read.
func DrainTopic(t *testing.T, c *client.Client, topic string) (map[int][]client.Delivery, map[int]string) {
	t.Helper()
	ctx := context.Background()
	got := map[int][]client.Delivery{}
	var unreadable map[int]string
	// A shard between leaders (an election after a leadership transfer)
	// is unreadable for a moment: drain until the last fetches list only
	// shards that stay unreadable, or give up after a while.
	deadline := time.Now().Add(15 * time.Second)
	electing := func() bool {
		for _, reason := range unreadable {
			if strings.Contains(reason, "no leader yet") {
				return time.Now().Before(deadline)
			}
		}
		return false
	}
	for idle := 0; idle < 2 || electing(); {
		ds, err := c.Fetch(ctx, topic, client.FetchOptions{MaxEvents: 500, VisibilityTimeout: time.Minute, Wait: 100 * time.Millisecond})
		unreadable = map[int]string{}
		var ue *client.UnreadableError
		if errors.As(err, &ue) {
			for _, s := range ue.Shards {
				unreadable[s.Shard] = s.Reason
			}
		} else if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		if len(ds) == 0 {
			idle++
			continue
		}
		idle = 0
		ids := make([]string, len(ds))
		for i, d := range ds {
			got[d.Shard] = append(got[d.Shard], d)
			ids[i] = d.ID
		}
		if _, err := c.Ack(ctx, ids...); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	return got, unreadable
}

// ConsumeAll fetches and acknowledges n events of topic, failing the test
// if they do not come within a minute, and returns them in the order
// received.
func ConsumeAll(t *testing.T, c *client.Client, topic string, n int) []client.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []client.Delivery
	for len(got) < n {
		ds, err := c.Fetch(ctx, topic, client.FetchOptions{MaxEvents: n, Wait: time.Second})
		if err != nil {
			t.Fatalf("fetch after %d of %d events: %v", len(got), n, err)
		}
		var receipts []string
		for _, d := range ds {
			got = append(got, d)
			receipts = append(receipts, d.Receipt)
		}
		if len(receipts) > 0 {
			if _, err := c.Ack(ctx, receipts...); err != nil {
				t.Fatal(err)
			}
		}
	}
	return got
}
