package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
)

// TestSecondServerOnADataDirectoryIsRefused starts two real servers on one
// data directory: the second must fail at once, naming the directory and
// the process holding it, and the first must go on serving untouched, then
// start again on the directory after it stops.
func TestSecondServerOnADataDirectoryIsRefused(t *testing.T) {
	dataDir := t.TempDir()
	first := startServer(t, dataDir, testkit.FreeAddr(t))
	c := client.New("http://" + first.addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.CreateTopic(ctx, "orders", map[string]string{"shards": "2"}); err != nil {
		t.Fatal(err)
	}
	var want []string
	publish := func(n int) {
		t.Helper()
		for i := range n {
			ids, err := c.Publish(ctx, "orders", client.Event{Key: "k", Payload: fmt.Appendf(nil, "%d", len(want)+i)})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, ids...)
		}
	}
	publish(5)

	second := exec.CommandContext(ctx, heraldBinary(t), "serve", "--data-dir", dataDir, "--listen", testkit.FreeAddr(t))
	start := time.Now()
	out, err := second.CombinedOutput()
	if err == nil {
		t.Fatalf("a second server on %s started:\n%s", dataDir, out)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the second server took %v to be refused", took)
	}
	for _, s := range []string{dataDir, "in use", fmt.Sprintf("pid %d", first.cmd.Process.Pid), "--listen " + first.addr, "--data-dir"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("the second server's error does not say %q:\n%s", s, out)
		}
	}

	// The first still serves, and what it holds is whole.
	publish(5)
	got := consumeAll(t, c, "orders", len(want))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("consumed %v, want %v", got, want)
	}

	// Its lock goes with it, even when killed: the directory starts again.
	first.kill()
	again := startServer(t, dataDir, testkit.FreeAddr(t))
	again.kill()
}

// consumeAll fetches and acknowledges n events of topic, failing the test
// if they do not come within a minute, and returns their ids in the order
// received.
func consumeAll(t *testing.T, c *client.Client, topic string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids []string
	for len(ids) < n {
		ds, err := c.Fetch(ctx, topic, client.FetchOptions{MaxEvents: n, Wait: time.Second})
		if err != nil {
			t.Fatalf("fetch after %d of %d events: %v", len(ids), n, err)
		}
		var receipts []string
		for _, d := range ds {
			ids = append(ids, d.ID)
			receipts = append(receipts, d.Receipt)
		}
		if len(receipts) > 0 {
			if _, err := c.Ack(ctx, receipts...); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ids
}
