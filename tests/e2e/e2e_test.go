package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"herald/client"
	"herald/internal/testkit"
	heraldv1 "herald/proto/herald/v1"
	"herald/tests/framework"
)

func TestE2EStartupErrors(t *testing.T) {
	dataDir := t.TempDir()
	addr := testkit.FreeAddr(t)
	framework.StartServer(t, dataDir, addr)

	// A second server on the same port fails with advice.
	out, err := exec.Command(framework.Binary(), "serve", "--data-dir", t.TempDir(), "--listen", addr).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already in use") || !strings.Contains(string(out), "--listen") {
		t.Fatalf("second server on %s: err %v, output:\n%s", addr, err, out)
	}

	// A data directory that cannot be created.
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	out, err = exec.Command(framework.Binary(), "serve", "--data-dir", filepath.Join(file, "d"), "--listen", testkit.FreeAddr(t)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--data-dir") {
		t.Fatalf("unusable data dir: err %v, output:\n%s", err, out)
	}
}

func TestE2EGracefulShutdownOnSIGTERM(t *testing.T) {
	dataDir := t.TempDir()
	addr := testkit.FreeAddr(t)
	// A shutdown that waited for the open publish stream below as for a
	// request in flight would take this long, and the test time out.
	srv := framework.StartServer(t, dataDir, addr, "--shutdown-timeout", "10m")
	c := client.New("http://" + addr)
	ctx := context.Background()
	c.CreateTopic(ctx, "t", nil)
	// Through a publish stream, left open: the shutdown must end it.
	streamed := client.New("http://"+addr, client.WithPublishStream())
	defer streamed.Close()
	ids, err := streamed.Publish(ctx, "t", client.Event{Key: "k", Payload: []byte("kept")})
	if err != nil {
		t.Fatal(err)
	}
	srv.Signal(syscall.SIGTERM)
	select {
	case <-srv.Done():
		err := srv.Err()
		if err != nil {
			t.Fatalf("herald serve exited with %v after SIGTERM:\n%s", err, srv.Output())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("herald serve did not exit after SIGTERM")
	}
	if !strings.Contains(srv.Output(), "stopped") {
		t.Fatalf("no clean stop in the log:\n%s", srv.Output())
	}
	if _, err := streamed.Publish(ctx, "t", client.Event{Key: "k", Payload: []byte("late")}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("publish on the stream of a stopped server: %v; want unavailable", err)
	}
	framework.StartServer(t, dataDir, addr)
	ds, err := c.Fetch(ctx, "t", client.FetchOptions{})
	if err != nil || len(ds) != 1 || ds[0].ID != ids[0] {
		t.Fatalf("after restart: %v, %v", ds, err)
	}
}

// TestE2EDeadLettersThroughTheCLI drives the dead-letter queue with the
// real binary: a webhook refuses one key, its events are dead-lettered,
// listed, replayed after the webhook is fixed, and purged.
func TestE2EDeadLettersThroughTheCLI(t *testing.T) {
	var mu sync.Mutex
	refuse := true
	var got []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env struct {
			Key     string `json:"key"`
			Payload string `json:"payload"`
		}
		json.NewDecoder(r.Body).Decode(&env)
		mu.Lock()
		defer mu.Unlock()
		if refuse && env.Key == "bad" {
			http.Error(w, "no such customer", http.StatusUnprocessableEntity)
			return
		}
		got = append(got, env.Key+"="+env.Payload)
	}))
	defer hook.Close()
	addr := testkit.FreeAddr(t)
	framework.StartServer(t, t.TempDir(), addr)
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(framework.Binary(), append([]string{"--server", "http://" + addr}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("herald %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	cli("topic", "create", "hooks", "--shards", "2", "--push-endpoint", hook.URL)
	cli("publish", "hooks", "--key", "bad", `"b1"`, `"b2"`)
	cli("publish", "hooks", "--key", "good", `"g1"`)
	var list string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if list = cli("dlq", "list", "hooks"); strings.Count(list, "rejected") == 2 {
			break
		}
	}
	if strings.Count(list, "rejected") != 2 || !strings.Contains(list, "422") || !strings.Contains(list, "no such customer") {
		t.Fatalf("dlq list:\n%s", list)
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	if out := cli("dlq", "replay", "hooks", "--all"); !strings.Contains(out, "replayed 2") {
		t.Fatalf("dlq replay: %s", out)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 3 {
			break
		}
	}
	mu.Lock()
	joined := strings.Join(got, " ")
	mu.Unlock()
	if !strings.Contains(joined, "bad=b1 bad=b2") || !strings.Contains(joined, "good=g1") {
		t.Fatalf("webhook received %q; want b1 then b2 replayed, and g1", joined)
	}
	if out := cli("dlq", "list", "hooks"); strings.Contains(out, "rejected") {
		t.Fatalf("dead letters remain after replay:\n%s", out)
	}
	mu.Lock()
	refuse = true
	mu.Unlock()
	cli("publish", "hooks", "--key", "bad", `"b3"`)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(cli("dlq", "list", "hooks"), "rejected") {
			break
		}
	}
	// One dead letter per line, as the API's DeadLetter message.
	for _, line := range strings.Split(strings.TrimSpace(cli("dlq", "list", "hooks", "-o", "json")), "\n") {
		var dl heraldv1.DeadLetter
		if err := protojson.Unmarshal([]byte(line), &dl); err != nil || dl.GetEvent().GetKey() != "bad" ||
			!strings.Contains(line, `"lastError":`) || !strings.Contains(line, `"deliveryAttempt":`) {
			t.Fatalf("dlq list -o json line %s: %v", line, err)
		}
	}
	if out := cli("dlq", "purge", "hooks", "--all"); out != "purged 1 dead letter\n" {
		t.Fatalf("dlq purge printed %q, want \"purged 1 dead letter\"", out)
	}
	if out := cli("topic", "stats", "hooks", "-o", "json"); !strings.Contains(out, `"deadLetters": "0"`) {
		t.Fatalf("stats after purge:\n%s", out)
	}
}
