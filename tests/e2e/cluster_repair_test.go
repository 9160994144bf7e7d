package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"herald/client"
	"herald/tests/framework"
)

// TestE2EClusterRebuildsDamagedAndLostReplicas damages two shard replicas
// of node 3 (a flipped bit in one's snapshot, the log segments of another
// deleted) and wipes node 1's whole data directory. Both nodes come back
// and rebuild their replicas from the others. Then node 2, the only one
// whose files were never touched, is killed: nodes 1 and 3 alone must
// serve every acknowledged event, once, in order per key.
func TestE2EClusterRebuildsDamagedAndLostReplicas(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	if _, err := c.client(0).CreateTopic(ctx, "orders", map[string]string{"shards": "3"}); err != nil {
		t.Fatal(err)
	}
	p := newKeyedPublisher(c, "orders")
	publish := func(through ...int) { t.Helper(); p.publish(t, 5, 6, through...) }
	publish(0, 1, 2)

	c.nodes[2].Kill()
	flipByteIn(t, shardFile(t, c.dirs[2], "orders", "snapshot"))
	segs, _ := filepath.Glob(filepath.Join(shardFile(t, c.dirs[2], "orders.1", "log"), "*.seg"))
	if len(segs) == 0 {
		t.Fatal("shard orders.1 of node 3 has no log segment")
	}
	for _, s := range segs {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if c.nodes[2], err = c.tryStart(2); err != nil {
		t.Fatalf("restart node 3 with damaged replicas: %v", err)
	}
	for _, shard := range []string{"orders", "orders.1"} {
		if _, err := os.Stat(shardFile(t, c.dirs[2], shard, "") + ".damaged"); err != nil {
			t.Errorf("node 3's damaged replica of %s was not kept aside: %v", shard, err)
		}
	}
	publish(0, 1, 2)

	c.nodes[0].Kill()
	if err := os.RemoveAll(c.dirs[0]); err != nil {
		t.Fatal(err)
	}
	if c.nodes[0], err = c.tryStart(0); err != nil {
		t.Fatalf("restart node 1 on an empty data directory: %v", err)
	}
	publish(0, 1, 2)
	waitRebuilt(t, c.dirs[0], c.dirs[2])

	c.nodes[1].Kill()
	publish(0, 2) // waits, with retries, for the shards node 2 led to elect a new leader
	drainConsumedOnce(t, c.client(0), "orders", p.acked)
}

// shardFile is the path of name in the directory of shard in dataDir.
func shardFile(t *testing.T, dataDir, shard, name string) string {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(dataDir, "shards", "*-"+shard))
	if len(dirs) != 1 {
		t.Fatalf("shard %s in %s: directories %v", shard, dataDir, dirs)
	}
	return filepath.Join(dirs[0], name)
}

func flipByteIn(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitRebuilt waits until no replica in the data directories is still
// marked as rebuilding (see internal/host's rebuild.go).
func waitRebuilt(t *testing.T, dataDirs ...string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var marked []string
		for _, dir := range dataDirs {
			filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err == nil && d.Name() == "rebuilding" {
					marked = append(marked, path)
				}
				return nil
			})
		}
		if len(marked) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas still rebuilding after a minute: %v", marked)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// drainConsumedOnce drains topic through c and checks that every shard
// was readable and that the events consumed are the acknowledged ones
// (checkConsumedOnce).
func drainConsumedOnce(t *testing.T, c *client.Client, topic string, acked []framework.Published) {
	t.Helper()
	byShard, unreadable := framework.DrainTopic(t, c, topic)
	if len(unreadable) > 0 {
		t.Fatalf("unreadable shards: %v", unreadable)
	}
	checkConsumedOnce(t, byShard, acked)
}

// checkConsumedOnce checks that the events consumed, per shard, are the
// acknowledged ones: each once, with its payload, each key's in order.
func checkConsumedOnce(t *testing.T, byShard map[int][]client.Delivery, acked []framework.Published) {
	t.Helper()
	got := make(map[string]client.Delivery)
	last := make(map[string]int)
	for _, ds := range byShard {
		for _, d := range ds {
			if _, dup := got[d.ID]; dup {
				t.Errorf("event %s delivered twice", d.ID)
			}
			got[d.ID] = d
			var key string
			var n int
			if _, err := fmt.Sscanf(string(d.Payload), "%s %d", &key, &n); err != nil {
				t.Fatalf("event %s has payload %q", d.ID, d.Payload)
			}
			if prev, ok := last[key]; ok && n <= prev {
				t.Errorf("key %s: event %d came after %d", key, n, prev)
			}
			last[key] = n
		}
	}
	for _, a := range acked {
		d, ok := got[a.ID]
		if !ok {
			t.Errorf("acknowledged event %s (key %s seq %d) is missing", a.ID, a.Key, a.Seq)
			continue
		}
		if want := fmt.Sprintf("%s %d", a.Key, a.Seq); string(d.Payload) != want {
			t.Errorf("event %s has payload %q, want %q", a.ID, d.Payload, want)
		}
	}
	if len(got) != len(acked) {
		t.Errorf("consumed %d events, published %d", len(got), len(acked))
	}
}
