package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"herald/internal/testkit"
	"herald/internal/topic"
)

// brokenTopic creates topic t with 2 shards, publishes 200 events over
// both, stops the node, damages the first log segment of each shard in
// broken and reopens the node. It returns the node, the number of events
// in shard 0, and the damaged file of each broken shard by name.
func brokenTopic(t *testing.T, broken ...string) (*Node, int, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.SegmentSize = 4096 // several segments, so the damage is not in the tail
	n := openNode(t, cfg)
	mustCreate(t, n, "t", map[string]string{"shards": "2"})
	inShard0 := 0
	for i := range 200 {
		key := fmt.Sprint("k", i)
		if topic.ShardFor(key, 2) == 0 {
			inShard0++
		}
		publish(t, n, "t", ev(key, strings.Repeat("x", 100)))
	}
	n.Close()
	files := make(map[string]string)
	for _, name := range broken {
		files[name] = testkit.DamageFirstSegment(t, dir, name)
	}
	return openNode(t, cfg), inShard0, files
}

func TestFetchNamesUnreadableShardBesideHealthyEvents(t *testing.T) {
	n, inShard0, files := brokenTopic(t, "t.1")
	res, err := n.Fetch(context.Background(), "t", FetchOptions{Max: MaxFetchEvents, Visibility: time.Minute})
	if err != nil {
		t.Fatalf("fetch with one healthy shard: %v", err)
	}
	if len(res.Deliveries) != inShard0 {
		t.Errorf("fetched %d events, want the %d of the healthy shard", len(res.Deliveries), inShard0)
	}
	var ids []string
	for _, d := range res.Deliveries {
		if d.Shard != 0 {
			t.Fatalf("event %s from the broken shard", d.ID)
		}
		ids = append(ids, d.ID)
	}
	checkUnreadable(t, res.Unreadable, files["t.1"])

	// Once the healthy shard is drained, a long poll that ends with nothing
	// still says that shard 1 was not read.
	if _, err := n.Ack(context.Background(), ids); err != nil {
		t.Fatal(err)
	}
	res, err = n.Fetch(context.Background(), "t", FetchOptions{Max: 10, Visibility: time.Minute, Wait: 300 * time.Millisecond})
	if err != nil || len(res.Deliveries) != 0 {
		t.Fatalf("long poll of a drained topic = %d events, %v", len(res.Deliveries), err)
	}
	checkUnreadable(t, res.Unreadable, files["t.1"])
}

// checkUnreadable fails unless got names shard 1 alone, with a reason that
// names the damaged file.
func checkUnreadable(t *testing.T, got []UnreadableShard, file string) {
	t.Helper()
	if len(got) != 1 || got[0].Shard != 1 || got[0].Name != "t.1" {
		t.Fatalf("unreadable shards = %v, want t.1 alone", got)
	}
	if err := got[0].Err; !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), file) {
		t.Fatalf("reason %q: want an unavailable error naming %s", err, file)
	}
}

func TestFetchFailsWhenNoShardIsReadable(t *testing.T) {
	n, _, files := brokenTopic(t, "t", "t.1")
	start := time.Now()
	res, err := n.Fetch(context.Background(), "t", FetchOptions{Max: 10, Visibility: time.Minute, Wait: 10 * time.Second})
	if len(res.Deliveries) != 0 || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("fetch with every shard broken = %d events, %v; want an unavailable error", len(res.Deliveries), err)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("fetch waited for events that no shard can hand out")
	}
	var ue *UnreadableError
	if !errors.As(err, &ue) || ue.Topic != "t" || len(ue.Shards) != 2 || ue.Shards[0].Name != "t" || ue.Shards[1].Name != "t.1" {
		t.Fatalf("error %v: want an *UnreadableError listing t and t.1", err)
	}
	for name, file := range files {
		if !strings.Contains(err.Error(), file) {
			t.Errorf("error %q does not name %s, the damaged file of %s", err, file, name)
		}
	}
}
