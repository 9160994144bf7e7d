package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"herald/internal/shard"
	"herald/internal/topic"
)

// TestAckAcrossShards: one ack of receipts from every shard of a topic
// acknowledges them all, and counts them; lapsed receipts of several
// shards are all named.
func TestAckAcrossShards(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "5"})
	var events []Event
	for i := range 50 {
		events = append(events, ev(fmt.Sprint("k", i), fmt.Sprint(i)))
	}
	publish(t, n, "t", events...)
	ds := fetch(t, n, "t", 100, time.Minute)
	if len(ds) != 50 {
		t.Fatalf("fetched %d events, want 50", len(ds))
	}
	shards := map[int]bool{}
	for _, d := range ds {
		shards[d.Shard] = true
	}
	if len(shards) != 5 {
		t.Fatalf("fetched events of %d shards, want 5", len(shards))
	}
	count, err := n.Ack(context.Background(), receipts(ds))
	if err != nil || count != 50 {
		t.Fatalf("ack of 50 receipts of 5 shards = %d, %v; want 50, nil", count, err)
	}
	st, err := n.TopicStats(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if st.Total.Stats.Acked != 50 || st.Total.Stats.Events != 0 {
		t.Fatalf("after the ack: %+v, want 50 acked and none left", st.Total.Stats)
	}
}

// TestAckAcrossShardsOneFails: an ack whose receipts of one shard fail
// (an offset never assigned) acknowledges those of the other shards all
// the same, counts them, and returns the failure.
func TestAckAcrossShardsOneFails(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "3"})
	var events []Event
	for i := range 30 {
		events = append(events, ev(fmt.Sprint("k", i), fmt.Sprint(i)))
	}
	publish(t, n, "t", events...)
	ds := fetch(t, n, "t", 100, time.Minute)
	var ids []string
	good := 0
	for _, d := range ds {
		if d.Shard == 0 {
			continue
		}
		ids = append(ids, d.Receipt)
		good++
	}
	ids = append(ids, topic.Receipt("t/0/999", 5))
	count, err := n.Ack(context.Background(), ids)
	if !errors.Is(err, shard.ErrUnknownOffset) {
		t.Fatalf("ack with a receipt of offset 999 of shard 0 = %v, want an unknown-offset error", err)
	}
	if count != good {
		t.Fatalf("ack counted %d, want the %d of shards 1 and 2", count, good)
	}
	st, err := n.TopicStats(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if st.Shards[0].Stats.Acked != 0 || st.Shards[1].Stats.Acked+st.Shards[2].Stats.Acked != uint64(good) {
		t.Fatalf("acked by shard: %d, %d, %d; want 0 and %d in all of 1 and 2",
			st.Shards[0].Stats.Acked, st.Shards[1].Stats.Acked, st.Shards[2].Stats.Acked, good)
	}
}

// TestDeletedTopicLeavesNoCachedEntries: the entries fetches cached of a
// topic's shards are dropped once the topic is deleted.
func TestDeletedTopicLeavesNoCachedEntries(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "2"})
	publish(t, n, "t", ev("a", "1"), ev("b", "2"), ev("c", "3"))
	if ds := fetch(t, n, "t", 10, time.Minute); len(ds) != 3 {
		t.Fatalf("fetched %d events, want 3", len(ds))
	}
	cache := n.reconciler.entries
	if cache.Bytes() == 0 {
		t.Fatal("the fetch cached no entry")
	}
	if err := n.DeleteTopic(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for cache.Bytes() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of a deleted topic's entries still cached", cache.Bytes())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
