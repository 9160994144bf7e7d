package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// docBlock returns the shell block of the document at path (relative to
// the repository's root) that follows the line after.
func docBlock(t *testing.T, path, after string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../..", path))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), after+"\n\n```sh\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatalf("%s has no shell block after %q", path, after)
	}
	return block
}

// TestREADMEClusterBlockPastedWhole runs the three-node block of
// docs/cluster.md (the README links to it) at once, as pasted into a
// shell, on free loopback ports.
func TestREADMEClusterBlockPastedWhole(t *testing.T) {
	block := docBlock(t, "docs/cluster.md", "directory; `--peers` lists every node, itself included, as `id=host:port`.\nOn one machine:")
	block = strings.Replace(block, "go build -o herald ./cmd/herald\n", "", 1)
	block = strings.ReplaceAll(block, "./herald ", framework.Binary()+" ")
	for i := 1; i <= 3; i++ {
		block = strings.ReplaceAll(block, fmt.Sprintf("127.0.0.1:760%d", i), testkit.FreeAddr(t))
	}
	cmd := exec.Command("bash", "-e", "-c", block)
	cmd.Dir = t.TempDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the nodes it starts in the background are its group
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	// Files, not pipes: the nodes left running hold them open.
	out, errOut := testFile(t, "stdout"), testFile(t, "stderr")
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		stdout, stderr := readFile(t, out.Name()), readFile(t, errOut.Name())
		if err != nil || !strings.HasSuffix(stdout, " k hello\n") {
			tail := exec.Command("sh", "-c", "tail -n 5 d?.log")
			tail.Dir = cmd.Dir
			logs, _ := tail.CombinedOutput()
			t.Fatalf("the block failed (%v); stdout:\n%s\nstderr:\n%s\nlogs:\n%s", err, stdout, stderr, logs)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("the block did not finish; stdout:\n%s", readFile(t, out.Name()))
	}
}

func testFile(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestStartingNodeIsReportedAndWaitedFor starts one node of three alone:
// the CLI says it is starting (not that it cannot be reached), the node
// logs whom it waits for, and a command given time waits until the others
// are up.
func TestStartingNodeIsReportedAndWaitedFor(t *testing.T) {
	var addrs, spec []string
	for i := range 3 {
		addrs = append(addrs, testkit.FreeAddr(t))
		spec = append(spec, fmt.Sprintf("%d=%s", i+1, addrs[i]))
	}
	peers := strings.Join(spec, ",")
	node1 := exec.Command(framework.Binary(), "serve", "--node-id", "1", "--peers", peers,
		"--listen", addrs[0], "--data-dir", t.TempDir())
	var log1 framework.SyncBuffer
	node1.Stdout, node1.Stderr = &log1, &log1
	if err := node1.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node1.Process.Kill(); node1.Wait() })
	server := "http://" + addrs[0]

	framework.WaitFor(t, "node 1 to log whom it waits for", func() bool {
		return strings.Contains(log1.String(), "waiting for a majority of --peers") &&
			strings.Contains(log1.String(), "2="+addrs[1]) && strings.Contains(log1.String(), "3="+addrs[2])
	})
	r := runBinary(t, "", "--server", server, "--timeout", "1s", "topic", "list")
	if r.code != 1 || !strings.Contains(r.stderr, "herald is starting") || strings.Contains(r.stderr, "cannot reach") {
		t.Errorf("topic list on a node waiting for its peers: exit %d, stderr %q; want it reported as starting", r.code, r.stderr)
	}
	if r := runBinary(t, "", "--server", server, "--timeout", "1s", "wait", "--ready"); r.code != 1 || !strings.Contains(r.stderr, "not ready") {
		t.Errorf("wait --ready on a node waiting for its peers: exit %d, stderr %q", r.code, r.stderr)
	}

	// A command with time enough waits while the other nodes start.
	create := exec.Command(framework.Binary(), "--server", server, "--timeout", "2m", "topic", "create", "orders", "--shards", "2")
	var createOut, createErr framework.SyncBuffer
	create.Stdout, create.Stderr = &createOut, &createErr
	if err := create.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // it has met the starting node
	var wg sync.WaitGroup
	for i := 1; i < 3; i++ {
		wg.Go(func() {
			if _, err := framework.TryStartServer(t, t.TempDir(), addrs[i], "--node-id", fmt.Sprint(i+1), "--peers", peers); err != nil {
				t.Errorf("node %d: %v", i+1, err)
			}
		})
	}
	wg.Wait()
	if err := create.Wait(); err != nil || !strings.Contains(createOut.String(), "orders") {
		t.Fatalf("topic create while the cluster started: %v\nstdout %s\nstderr %s", err, createOut.String(), createErr.String())
	}
	if !strings.Contains(createErr.String(), "is starting") || !strings.Contains(createErr.String(), "waiting up to") {
		t.Errorf("topic create did not say it waited for the starting node: stderr %q", createErr.String())
	}
	if r := runBinary(t, "", "--server", server, "--timeout", "1m", "wait", "--ready"); r.code != 0 || !strings.HasPrefix(r.stdout, "ready: ") {
		t.Errorf("wait --ready once the cluster is up: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestConsumeWaitsForShardsStillOpening restarts a node with many shards,
// opened one at a time, and consumes at once: the shards still opening are
// waited for within --wait, not reported unreadable.
func TestConsumeWaitsForShardsStillOpening(t *testing.T) {
	dir, addr := t.TempDir(), testkit.FreeAddr(t)
	s := framework.StartServer(t, dir, addr)
	c := client.New("http://"+addr, client.WithTimeout(time.Minute))
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, "many", map[string]string{"shards": "1024"}); err != nil {
		t.Fatal(err)
	}
	keys := keysCovering(1024, 1)
	var events []client.Event
	for _, k := range keys {
		events = append(events, client.Event{Key: k, Payload: []byte("p")})
	}
	if _, err := c.Publish(ctx, "many", events...); err != nil {
		t.Fatal(err)
	}
	s.Kill()

	// Back at once, opening its shards one at a time.
	if _, err := framework.TryStartServerWith(t, c, dir, addr, "--boot-parallelism", "1"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz answered %s at once: the shards opened too fast for this test", resp.Status)
	}
	r := runBinary(t, "", "--server", "http://"+addr, "consume", "many", "--wait", "1m", "--max", fmt.Sprint(len(events)))
	if n := strings.Count(r.stdout, "\n"); r.code != 0 || n != len(events) {
		t.Fatalf("consume right after the restart: exit %d, %d of %d events; stderr:\n%s", r.code, n, len(events), r.stderr)
	}
	if strings.Contains(r.stderr, "could not be read") {
		t.Errorf("consume reported shards still opening as unreadable:\n%s", r.stderr)
	}
}
