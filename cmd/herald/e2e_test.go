package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

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
)

// These tests run the real herald binary, built once for the package.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func heraldBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "herald-e2e-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "herald")
		out, err := exec.Command("go", "build", "-race", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type server struct {
	cmd    *exec.Cmd
	addr   string
	output *bytes.Buffer
	done   chan error
}

func startServer(t *testing.T, dataDir, addr string, extra ...string) *server {
	t.Helper()
	s, err := tryStartServer(t, dataDir, addr, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tryStartServer starts herald serve and waits until it answers. If it
// exits first, or does not come up within a minute, the error holds its
// output.
func tryStartServer(t *testing.T, dataDir, addr string, extra ...string) (*server, error) {
	t.Helper()
	s, err := tryStartServerWith(t, client.New("http://"+addr), dataDir, addr, extra...)
	if err == nil {
		err = waitReadyz(addr, 60*time.Second)
	}
	return s, err
}

// tryStartServerWith is tryStartServer for a server that c reaches (over
// TLS, say).
func tryStartServerWith(t *testing.T, c *client.Client, dataDir, addr string, extra ...string) (*server, error) {
	t.Helper()
	// The tests' push receivers listen on loopback, which push endpoints
	// may reach only when allowed.
	args := append([]string{"serve", "--data-dir", dataDir, "--listen", addr, "--push-allow", "127.0.0.0/8,::1"}, extra...)
	cmd := exec.Command(heraldBinary(t), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, addr: addr, output: &out, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() { s.kill() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ListTopics(ctx)
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case err := <-s.done:
			return nil, fmt.Errorf("herald serve exited early: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("herald serve did not come up: %v\n%s", err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) kill() {
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
}

type published struct {
	key string
	seq int
	id  string
}

// TestE2EKillMidLoad publishes 10,000 events over many keys from concurrent
// clients while a consumer acks, SIGKILLs the server mid-load, restarts it,
// and consumes everything: no acknowledged event is missing, each key's
// events come in order, and nothing whose ack was confirmed comes back.
func TestE2EKillMidLoad(t *testing.T) {
	dataDir := t.TempDir()
	addr := testkit.FreeAddr(t)
	srv := startServer(t, dataDir, addr)
	c := client.New("http://"+addr, client.WithTimeout(10*time.Second))
	// Half the publishers send over a publish stream, which the kill breaks.
	streamed := client.New("http://"+addr, client.WithTimeout(10*time.Second), client.WithPublishStream())
	defer streamed.Close()
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, "e2e", map[string]string{"shards": "4"}); err != nil {
		t.Fatal(err)
	}

	const publishers, perPublisher, keysPerPublisher = 10, 1000, 8
	var mu sync.Mutex
	var acked []published
	confirmed := map[string]bool{} // ids whose Ack returned success
	attempted := map[string]bool{} // ids an Ack was sent for (it may have landed)
	lastAckedSeq := map[string]int{}

	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for i := 0; i < perPublisher; {
				// Batches of 5 events of one key, in sequence.
				key := fmt.Sprintf("p%d-k%d", p, (i/5)%keysPerPublisher)
				var evs []client.Event
				for j := range 5 {
					evs = append(evs, client.Event{Key: key, Payload: fmt.Appendf(nil, "%s %d", key, i+j)})
				}
				pub := c
				if p%2 == 1 {
					pub = streamed
				}
				ids, err := pub.Publish(ctx, "e2e", evs...)
				if err != nil {
					// The server is down or restarting: retry the same batch.
					// A batch that was committed before the kill is published
					// twice; that is at-least-once, and the order per key holds.
					time.Sleep(50 * time.Millisecond)
					continue
				}
				mu.Lock()
				for j, id := range ids {
					acked = append(acked, published{key, i + j, id})
				}
				mu.Unlock()
				i += 5
			}
		})
	}

	// A consumer acks events as they come until the kill.
	consumerCtx, stopConsumer := context.WithCancel(ctx)
	var consumer sync.WaitGroup
	consumer.Go(func() {
		for consumerCtx.Err() == nil {
			ds, err := c.Fetch(consumerCtx, "e2e", client.FetchOptions{MaxEvents: 200, VisibilityTimeout: time.Minute})
			if err != nil || len(ds) == 0 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			ids := make([]string, len(ds))
			for i, d := range ds {
				ids[i] = d.ID
				checkOrder(t, &mu, lastAckedSeq, d)
			}
			mu.Lock()
			for _, id := range ids {
				attempted[id] = true
			}
			mu.Unlock()
			if _, err := c.Ack(consumerCtx, ids...); err == nil {
				mu.Lock()
				for _, id := range ids {
					confirmed[id] = true
				}
				mu.Unlock()
			}
		}
	})

	// Kill the server once a good part of the load is acknowledged.
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 4000 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	srv.kill()
	stopConsumer()
	consumer.Wait()
	mu.Lock()
	confirmedBefore := len(confirmed)
	mu.Unlock()
	if confirmedBefore == 0 {
		t.Fatal("the consumer confirmed no acks before the kill; the test would prove nothing about redelivery")
	}

	startServer(t, dataDir, addr)
	wg.Wait()
	if len(acked) != publishers*perPublisher {
		t.Fatalf("%d publishes acknowledged, want %d", len(acked), publishers*perPublisher)
	}

	// Consume everything that is left.
	byShard, unreadable := drainTopic(t, c, "e2e")
	if len(unreadable) > 0 {
		t.Fatalf("shards unreadable after the restart: %v", unreadable)
	}
	got := map[string]client.Delivery{}
	for _, ds := range byShard {
		for _, d := range ds {
			if confirmed[d.ID] {
				t.Fatalf("event %s was redelivered after its ack was confirmed", d.ID)
			}
			if _, dup := got[d.ID]; dup {
				t.Fatalf("event %s delivered twice after the restart", d.ID)
			}
			got[d.ID] = d
			checkOrder(t, &mu, lastAckedSeq, d)
		}
	}
	for _, a := range acked {
		if confirmed[a.id] {
			continue
		}
		d, ok := got[a.id]
		if !ok && attempted[a.id] {
			continue // its ack was in flight at the kill and landed
		}
		if !ok {
			t.Fatalf("acknowledged event %s (key %s seq %d) is missing", a.id, a.key, a.seq)
		}
		if want := fmt.Sprintf("%s %d", a.key, a.seq); string(d.Payload) != want {
			t.Fatalf("event %s has payload %q, want %q", a.id, d.Payload, want)
		}
	}
	st, err := c.TopicStats(ctx, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	if st.Total.Events != 0 {
		t.Fatalf("%d events still pending after consuming everything", st.Total.Events)
	}
	t.Logf("%d acknowledged publishes, %d acks confirmed before the kill, %d consumed after", len(acked), confirmedBefore, len(got))
}

// checkOrder fails if an event of a key comes before one already consumed:
// sequence numbers per key never go down (a re-published batch may repeat
// the last ones, which at-least-once allows).
func checkOrder(t *testing.T, mu *sync.Mutex, last map[string]int, d client.Delivery) {
	var key string
	var seq int
	fmt.Sscanf(string(d.Payload), "%s %d", &key, &seq)
	mu.Lock()
	defer mu.Unlock()
	if prev, ok := last[key]; ok && seq < prev-4 {
		t.Errorf("key %s: event %d consumed after %d", key, seq, prev)
	}
	last[key] = max(last[key], seq)
}

func TestE2EStartupErrors(t *testing.T) {
	dataDir := t.TempDir()
	addr := testkit.FreeAddr(t)
	startServer(t, dataDir, addr)

	// A second server on the same port fails with advice.
	out, err := exec.Command(heraldBinary(t), "serve", "--data-dir", t.TempDir(), "--listen", addr).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already in use") || !strings.Contains(string(out), "--listen") {
		t.Fatalf("second server on %s: err %v, output:\n%s", addr, err, out)
	}

	// A data directory that cannot be created.
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	out, err = exec.Command(heraldBinary(t), "serve", "--data-dir", filepath.Join(file, "d"), "--listen", testkit.FreeAddr(t)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--data-dir") {
		t.Fatalf("unusable data dir: err %v, output:\n%s", err, out)
	}
}

func TestE2EGracefulShutdownOnSIGTERM(t *testing.T) {
	dataDir := t.TempDir()
	addr := testkit.FreeAddr(t)
	// A shutdown that waited for the open publish stream below as for a
	// request in flight would take this long, and the test time out.
	srv := startServer(t, dataDir, addr, "--shutdown-timeout", "10m")
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
	srv.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-srv.done:
		if err != nil {
			t.Fatalf("herald serve exited with %v after SIGTERM:\n%s", err, srv.output)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("herald serve did not exit after SIGTERM")
	}
	if !strings.Contains(srv.output.String(), "stopped") {
		t.Fatalf("no clean stop in the log:\n%s", srv.output)
	}
	if _, err := streamed.Publish(ctx, "t", client.Event{Key: "k", Payload: []byte("late")}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("publish on the stream of a stopped server: %v; want unavailable", err)
	}
	startServer(t, dataDir, addr)
	ds, err := c.Fetch(ctx, "t", client.FetchOptions{})
	if err != nil || len(ds) != 1 || ds[0].ID != ids[0] {
		t.Fatalf("after restart: %v, %v", ds, err)
	}
}

// TestE2EPushSurvivesKillMidDelivery SIGKILLs the server while it pushes
// to a webhook and restarts it: every event arrives, each key's events
// arrive in order (counting first arrivals), and the only duplicates are
// events that were in flight or not yet recorded as delivered.
func TestE2EPushSurvivesKillMidDelivery(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}    // event id → arrivals
	order := map[string][]int{} // key → sequence numbers in first-arrival order
	open := false               // the webhook refuses everything until the backlog is in
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		refuse := !open
		mu.Unlock()
		if refuse {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var env struct {
			ID      string `json:"id"`
			Key     string `json:"key"`
			Payload int    `json:"payload"`
		}
		if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		time.Sleep(time.Millisecond)
		mu.Lock()
		seen[env.ID]++
		if seen[env.ID] == 1 {
			order[env.Key] = append(order[env.Key], env.Payload)
		}
		mu.Unlock()
	}))
	defer hook.Close()
	arrived := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}

	dataDir := t.TempDir()
	addr := testkit.FreeAddr(t)
	srv := startServer(t, dataDir, addr)
	c := client.New("http://"+addr, client.WithTimeout(10*time.Second))
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, "hooks", map[string]string{"shards": "4", "push_endpoint": hook.URL, "retry_sleep_duration": "0"}); err != nil {
		t.Fatal(err)
	}
	const keys, perKey = 20, 150
	var ids []string
	for i := range perKey {
		var evs []client.Event
		for k := range keys {
			evs = append(evs, client.Event{Key: fmt.Sprint("k", k), Payload: []byte(fmt.Sprint(i))})
		}
		got, err := c.Publish(ctx, "hooks", evs...)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	mu.Lock()
	open = true
	mu.Unlock()
	for arrived() < 600 {
		time.Sleep(time.Millisecond)
	}
	srv.kill()
	before := arrived()
	startServer(t, dataDir, addr)
	deadline := time.Now().Add(60 * time.Second)
	for arrived() < len(ids) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if seen[id] == 0 {
			t.Fatalf("event %s was never delivered (%d of %d arrived)", id, len(seen), len(ids))
		}
	}
	for k, seqs := range order {
		for i, s := range seqs {
			if s != i {
				t.Fatalf("key %s: events arrived in the order %v", k, seqs[:min(len(seqs), i+5)])
			}
		}
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	// In flight at the kill: at most 4 shards × 64 sends, plus deliveries
	// finished but not yet recorded (one batch per shard).
	if dups > 4*64*2 {
		t.Fatalf("%d duplicate deliveries: more than what could have been in flight", dups)
	}
	t.Logf("%d events, %d arrived before the kill, %d duplicates after it", len(ids), before, dups)
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
	startServer(t, t.TempDir(), addr)
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(heraldBinary(t), append([]string{"--server", "http://" + addr}, args...)...).CombinedOutput()
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
