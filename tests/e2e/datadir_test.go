package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herald/client"
	"herald/internal/datadir"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// TestSecondServerOnADataDirectoryIsRefused starts two real servers on one
// data directory: the second must fail at once, naming the directory and
// the process holding it, and the first must go on serving untouched, then
// start again on the directory after it stops.
func TestSecondServerOnADataDirectoryIsRefused(t *testing.T) {
	dataDir := t.TempDir()
	first := framework.StartServer(t, dataDir, testkit.FreeAddr(t))
	c := client.New("http://" + first.Addr())
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

	second := exec.CommandContext(ctx, framework.Binary(), "serve", "--data-dir", dataDir, "--listen", testkit.FreeAddr(t))
	start := time.Now()
	out, err := second.CombinedOutput()
	if err == nil {
		t.Fatalf("a second server on %s started:\n%s", dataDir, out)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the second server took %v to be refused", took)
	}
	for _, s := range []string{dataDir, "in use", fmt.Sprintf("pid %d", first.Pid()), "--listen " + first.Addr(), "--data-dir"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("the second server's error does not say %q:\n%s", s, out)
		}
	}

	// The first still serves, and what it holds is whole.
	publish(5)
	var got []string
	for _, d := range framework.ConsumeAll(t, c, "orders", len(want)) {
		got = append(got, d.ID)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("consumed %v, want %v", got, want)
	}

	// Its lock goes with it, even when killed: the directory starts again.
	first.Kill()
	again := framework.StartServer(t, dataDir, testkit.FreeAddr(t))
	again.Kill()
}

// TestDataDirectoryOfAnotherNodeIsRefused starts a node on a directory
// recorded as another node's: refused, saying whose it is and what to do,
// and the directory still starts as its own node.
func TestDataDirectoryOfAnotherNodeIsRefused(t *testing.T) {
	dataDir := t.TempDir()
	framework.StartServer(t, dataDir, testkit.FreeAddr(t)).Kill() // node 1, the default

	out, err := exec.Command(framework.Binary(), "serve", "--data-dir", dataDir, "--listen", testkit.FreeAddr(t), "--node-id", "2").CombinedOutput()
	if err == nil {
		t.Fatalf("node 2 started on node 1's data directory:\n%s", out)
	}
	for _, s := range []string{dataDir, "belongs to node 1", "--node-id 1", "a data directory of its own"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("the refusal does not say %q:\n%s", s, out)
		}
	}
	framework.StartServer(t, dataDir, testkit.FreeAddr(t)).Kill()
}

// TestDataDirectoryOfAnotherClusterIsRefused starts, among the nodes of a
// running cluster, a node whose data directory belongs to another cluster
// (a node alone, with the same node id): it is refused before it serves,
// the cluster goes on serving, and the node's own directory rejoins.
func TestDataDirectoryOfAnotherClusterIsRefused(t *testing.T) {
	c := startCluster(t)
	waitClusterID(t, c.dirs...)
	c.nodes[2].Kill()

	// Node 3 of another cluster: a cluster of one.
	foreign := t.TempDir()
	framework.StartServer(t, foreign, testkit.FreeAddr(t), "--node-id", "3").Kill()
	waitClusterID(t, foreign)

	own := c.dirs[2]
	c.dirs[2] = foreign
	s, err := c.tryStart(2)
	if err == nil {
		s.Kill()
		t.Fatal("a node of another cluster started among the cluster's nodes")
	}
	for _, want := range []string{foreign, "belongs to node 3 of cluster", "check --peers", "herald cluster add"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}

	// The cluster serves, and node 3 on its own directory rejoins it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Node 3, killed above, may have led the controller: the others elect
	// another, and a request in flight meanwhile has an unknown outcome.
	for {
		_, err := c.client(0).CreateTopic(ctx, "after", map[string]string{"shards": "1"})
		if err == nil || client.IsAlreadyExists(err) {
			break
		}
		if !client.IsRetryable(err) || ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.dirs[2] = own
	if c.nodes[2], err = c.tryStart(2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client(2).Publish(ctx, "after", client.Event{Key: "k", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
}

// waitClusterID waits until each data directory has recorded its cluster
// id, which a node learns from its controller shortly after it starts.
func waitClusterID(t *testing.T, dirs ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, dir := range dirs {
		for {
			data, _ := os.ReadFile(filepath.Join(dir, datadir.IdentityFile))
			if bytes.Contains(data, []byte(`"cluster":"`)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s recorded no cluster id within 30s: %q", dir, data)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
