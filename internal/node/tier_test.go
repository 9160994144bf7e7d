package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tieringConfig is a node's config that tiers to a directory every few
// milliseconds, with small log segments and a small local retention, so
// that a backlog of a few hundred kilobytes is mostly in the store.
func tieringConfig(t *testing.T, dir, store string) Config {
	cfg := testConfig(dir)
	cfg.SegmentSize = 16 << 10
	cfg.SnapshotEntries = 50
	cfg.Tier = TierConfig{URL: "file://" + store, Interval: 20 * time.Millisecond, LocalRetention: 32 << 10, CacheBytes: 1 << 20}
	return cfg
}

// TestTieredBacklogIsConsumedInOrder fills a pull topic with a backlog
// many times its local retention: the node uploads it, records it, and
// deletes its local copy down to the retention; then a consumer gets every
// event once, in order per key, read back from the store, also after a
// restart.
func TestTieredBacklogIsConsumedInOrder(t *testing.T) {
	dir, store := t.TempDir(), t.TempDir()
	n := openNode(t, tieringConfig(t, dir, store))
	mustCreate(t, n, "orders", map[string]string{"shards": "2"})

	const keys, perKey = 8, 100
	payload := strings.Repeat("p", 400)
	for i := range perKey {
		var evs []Event
		for k := range keys {
			evs = append(evs, ev(fmt.Sprintf("k%d", k), fmt.Sprintf("%d:%s", i, payload)))
		}
		publish(t, n, "orders", evs...)
	}
	// 8 × 100 × ~450 bytes ≈ 360 KB over two shards, ten times the
	// retention: most of it must leave the local disk.
	waitUntil(t, "the backlog is tiered and its local logs shrink to their retention", func() bool {
		st, err := n.TopicStats(context.Background(), "orders")
		if err != nil {
			return false
		}
		for _, s := range st.Shards {
			if s.LRO == 0 || s.LocalBytes > 32<<10+3*16<<10 {
				return false
			}
		}
		return st.Total.TieredBytes > 200<<10
	})
	st, _ := n.TopicStats(context.Background(), "orders")
	for _, s := range st.Shards {
		t.Logf("shard %s: lro %d local %d tiered %d", s.Name, s.LRO, s.LocalBytes, s.TieredBytes)
	}
	if objs := objectFiles(t, store); objs == 0 {
		t.Fatal("the store holds no object")
	}

	// Half the backlog consumed now, half after a restart.
	next := consumeInOrder(t, n, "orders", keys*perKey/2, map[string]int{})
	if st := n.tier.reader.Stats(); st.Misses == 0 || st.BytesRead == 0 {
		t.Fatalf("the consumer read nothing from the store (%+v): the backlog was not tiered", st)
	}
	n.Close()
	n = openNode(t, tieringConfig(t, dir, store))
	consumeInOrder(t, n, "orders", keys*perKey/2, next)
	if ds := fetch(t, n, "orders", 10, time.Minute); len(ds) != 0 {
		t.Fatalf("fetched %d more events than were published", len(ds))
	}
}

// consumeInOrder fetches and acks count events, checking that each key's
// events come in the order they were published (next holds the number
// each key expects next), and returns next.
func consumeInOrder(t *testing.T, n *Node, topicName string, count int, next map[string]int) map[string]int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for got := 0; got < count; {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d of %d events", got, count)
		}
		ds := fetch(t, n, topicName, min(50, count-got), time.Minute)
		var ids []string
		for _, d := range ds {
			seq, _, _ := strings.Cut(string(d.Event.Payload), ":")
			if want := fmt.Sprint(next[d.Event.Key]); seq != want {
				t.Fatalf("key %s: got event %s, want %s", d.Event.Key, seq, want)
			}
			next[d.Event.Key]++
			ids = append(ids, d.Receipt)
		}
		if len(ids) > 0 {
			if _, err := n.Ack(context.Background(), ids); err != nil {
				t.Fatal(err)
			}
		}
		got += len(ds)
	}
	return next
}

func objectFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".hto") {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
