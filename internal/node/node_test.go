package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/internal/controller"
	"herald/internal/endpoint"
	"herald/internal/endpoint/endpointtest"
	"herald/internal/shard"
	"herald/internal/topic"
)

// testConfig is a node's config for tests: their push endpoints listen on
// loopback, and their CA files are anywhere.
func testConfig(dir string) Config {
	return Config{DataDir: dir, Logger: quietLog(),
		PushGuard: endpoint.GuardConfig{Allow: endpointtest.LoopbackCIDRs, CADir: "/"}}
}

// quietLog is a logger for tests, which writes nothing.
func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openNode opens a node and waits until it has opened its shards.
func openNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	<-n.Opened() // every shard it had has opened, or failed to
	return n
}

func mustCreate(t *testing.T, n *Node, name string, attrs map[string]string) {
	t.Helper()
	if _, err := n.CreateTopic(context.Background(), name, attrs); err != nil {
		t.Fatal(err)
	}
}

func ev(key, payload string) Event { return Event{Key: key, Payload: []byte(payload)} }

func publish(t *testing.T, n *Node, topicName string, events ...Event) []string {
	t.Helper()
	ids, err := n.Publish(context.Background(), topicName, events)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func fetch(t *testing.T, n *Node, topicName string, max int, visibility time.Duration) []Delivery {
	t.Helper()
	res, err := n.Fetch(context.Background(), topicName, FetchOptions{Max: max, Visibility: visibility})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Unreadable) > 0 {
		t.Fatalf("fetch from %s: unreadable shards %v", topicName, res.Unreadable)
	}
	return res.Deliveries
}

func TestPublishFetchAckKeepsOrderPerKey(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "orders", map[string]string{"shards": "3"})
	var events []Event
	for i := range 30 {
		events = append(events, ev(fmt.Sprint("k", i%5), fmt.Sprint(i)))
	}
	ids := publish(t, n, "orders", events...)
	if len(ids) != 30 {
		t.Fatalf("got %d ids", len(ids))
	}
	for i, id := range ids {
		tn, s, _, err := topic.ParseEventID(id)
		if err != nil || tn != "orders" || s != topic.ShardFor(events[i].Key, 3) {
			t.Fatalf("id %q of event %d: wrong topic or shard (%v)", id, i, err)
		}
	}
	// Consume everything, one fetch+ack round at a time; each key must come
	// out in publish order. A fetch may hand out a run of a key's events,
	// in order within it (consume.Shard.Fetch).
	last := map[string]int{}
	seen := 0
	for round := 0; seen < 30 && round < 100; round++ {
		ds := fetch(t, n, "orders", 100, time.Minute)
		var ackIDs []string
		for _, d := range ds {
			var v int
			fmt.Sscan(string(d.Event.Payload), &v)
			if d.ID != ids[v] {
				t.Fatalf("event %d delivered with id %s, but publishing it returned %s", v, d.ID, ids[v])
			}
			if prev, ok := last[d.Event.Key]; ok && v <= prev {
				t.Fatalf("key %s: event %d after %d", d.Event.Key, v, prev)
			}
			last[d.Event.Key] = v
			ackIDs = append(ackIDs, d.ID)
		}
		if _, err := n.Ack(context.Background(), ackIDs); err != nil {
			t.Fatal(err)
		}
		seen += len(ds)
	}
	if seen != 30 {
		t.Fatalf("consumed %d events, want 30", seen)
	}
	st, err := n.TopicStats(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if st.Total.Stats.Published != 30 || st.Total.Stats.Acked != 30 || st.Total.Stats.Events != 0 || len(st.Shards) != 3 {
		t.Fatalf("stats after consuming everything: %+v", st.Total)
	}
}

func TestLeaseBlocksKeyAndExpires(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "1"})
	publish(t, n, "t", ev("a", "a1"), ev("a", "a2"), ev("b", "b1"))
	// a's events go out as one run (a1, a2), held by this fetch alone.
	ds := fetch(t, n, "t", 10, 300*time.Millisecond)
	if !slices.Equal(payloads(ds), []string{"a1", "a2", "b1"}) {
		t.Fatalf("first fetch = %v, want a1, a2 (a's run) and b1", payloads(ds))
	}
	if again := fetch(t, n, "t", 10, time.Minute); len(again) != 0 {
		t.Fatalf("fetch while a's run is leased handed out %v", payloads(again))
	}
	// After the visibility timeout the run comes back whole (b1 too), as a
	// second attempt.
	time.Sleep(350 * time.Millisecond)
	ds = fetch(t, n, "t", 10, time.Minute)
	if !slices.Equal(payloads(ds), []string{"a1", "a2", "b1"}) || ds[0].Attempt != 2 || ds[1].Attempt != 2 {
		t.Fatalf("fetch after expiry = %v (attempt %d), want a1, a2 and b1 redelivered as attempt 2", payloads(ds), ds[0].Attempt)
	}
	if _, err := n.Ack(context.Background(), []string{ds[0].ID, ds[2].ID}); err != nil {
		t.Fatal(err)
	}
	if again := fetch(t, n, "t", 10, time.Minute); len(again) != 0 {
		t.Fatalf("fetch while a2 is leased in its run handed out %v", payloads(again))
	}
	// Nack makes an event available again at once.
	if err := n.Nack(context.Background(), []string{ds[1].ID}); err != nil {
		t.Fatal(err)
	}
	if ds = fetch(t, n, "t", 10, time.Minute); len(ds) != 1 || string(ds[0].Event.Payload) != "a2" {
		t.Fatalf("fetch after nack = %v, want a2", payloads(ds))
	}
}

func payloads(ds []Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, string(d.Event.Payload))
	}
	return out
}

func TestFetchWaitsForPublish(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", nil)
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(100 * time.Millisecond)
		publish(t, n, "t", ev("k", "late"))
	})
	start := time.Now()
	res, err := n.Fetch(context.Background(), "t", FetchOptions{Max: 10, Visibility: time.Minute, Wait: 10 * time.Second})
	wg.Wait()
	ds := res.Deliveries
	if err != nil || len(ds) != 1 || string(ds[0].Event.Payload) != "late" {
		t.Fatalf("long-poll fetch = %v, %v", payloads(ds), err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("long-poll fetch did not wake on publish")
	}
}

func TestReserveCommitAbortAndExpiry(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.ReservationTimeout = 300 * time.Millisecond
	n := openNode(t, cfg)
	mustCreate(t, n, "outbox", map[string]string{"shards": "4"})
	ctx := context.Background()
	r, err := n.Reserve(ctx, "outbox", "user-1", 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	// A key routing to another shard cannot be committed into this reservation.
	var other string
	for i := 0; ; i++ {
		other = fmt.Sprint("other-", i)
		if topic.ShardFor(other, 4) != topic.ShardFor("user-1", 4) {
			break
		}
	}
	if _, err := n.Commit(ctx, r.ID, []Event{ev(other, "x")}); !errors.Is(err, topic.ErrInvalid) || !strings.Contains(err.Error(), "routes to shard") {
		t.Fatalf("commit with a key of another shard: err = %v", err)
	}
	ids, err := n.Commit(ctx, r.ID, []Event{ev("user-1", "created")})
	if err != nil || len(ids) != 1 {
		t.Fatalf("commit = %v, %v", ids, err)
	}
	if _, err := n.Commit(ctx, r.ID, []Event{ev("user-1", "again")}); !errors.Is(err, shard.ErrUnknownReservation) {
		t.Fatalf("second commit of a reservation: err = %v, want ErrUnknownReservation", err)
	}
	r2, _ := n.Reserve(ctx, "outbox", "user-2", 100, 0)
	if err := n.Abort(ctx, r2.ID); err != nil {
		t.Fatal(err)
	}
	if err := n.Abort(ctx, r2.ID); err != nil {
		t.Fatalf("aborting twice: %v", err)
	}
	r3, _ := n.Reserve(ctx, "outbox", "user-3", 100, 0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := n.TopicStats(ctx, "outbox")
		if st.Total.Stats.Reservations == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reservation never expired: %+v", st.Total.Stats)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err = n.Commit(ctx, r3.ID, []Event{ev("user-3", "late")})
	if !errors.Is(err, shard.ErrUnknownReservation) || !strings.Contains(err.Error(), "reserve again") {
		t.Fatalf("commit of an expired reservation: err = %v", err)
	}
}

func TestQueueFullRejectsAndKeepsQueuedEvents(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "small", map[string]string{"shards": "1", "max_queue_bytes": "1000"})
	publish(t, n, "small", ev("k", strings.Repeat("a", 600)))
	_, err := n.Publish(context.Background(), "small", []Event{ev("k", strings.Repeat("b", 600))})
	if !errors.Is(err, shard.ErrQueueFull) || !strings.Contains(err.Error(), "retry") {
		t.Fatalf("publish into a full queue: err = %v, want ErrQueueFull with retry advice", err)
	}
	ds := fetch(t, n, "small", 10, time.Minute)
	if len(ds) != 1 || string(ds[0].Event.Payload) != strings.Repeat("a", 600) {
		t.Fatalf("queued event after the rejected publish: %v", payloads(ds))
	}
	n.Ack(context.Background(), []string{ds[0].ID})
	publish(t, n, "small", ev("k", strings.Repeat("b", 600)))
}

func TestBadInputErrors(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	ctx := context.Background()
	mustCreate(t, n, "t", nil)
	cases := []struct {
		name string
		err  error
		is   error
		says string
	}{
		{"invalid name", errOf(n.CreateTopic(ctx, "a.b", nil)), topic.ErrInvalid, "dots"},
		{"existing topic", errOf(n.CreateTopic(ctx, "t", nil)), controller.ErrTopicExists, "already exists"},
		{"shards out of range", errOf(n.CreateTopic(ctx, "x", map[string]string{"shards": "0"})), topic.ErrInvalid, "between 1 and 1024"},
		{"unknown scheme", errOf(n.CreateTopic(ctx, "x", map[string]string{"push_endpoint": "ftp://h/x"})), topic.ErrInvalid, "http"},
		{"no host", errOf(n.CreateTopic(ctx, "x", map[string]string{"push_endpoint": "http:///path"})), topic.ErrInvalid, "host"},
		{"amqp without exchange", errOf(n.CreateTopic(ctx, "x", map[string]string{"push_endpoint": "amqp://localhost"})), topic.ErrInvalid, "amqp_exchange"},
		{"unknown topic", errOf(n.Publish(ctx, "nope", []Event{ev("k", "v")})), controller.ErrTopicNotFound, "create it"},
		{"payload too large", errOf(n.Publish(ctx, "t", []Event{ev("k", strings.Repeat("x", DefaultMaxPayloadBytes+1))})), ErrPayloadTooLarge, "limit"},
		{"ack unknown offset", errOf(n.Ack(ctx, []string{"t/0/999"})), shard.ErrUnknownOffset, "999"},
		{"ack bad id", errOf(n.Ack(ctx, []string{"garbage"})), topic.ErrInvalid, ""},
		{"shards fixed", errOf(n.SetTopicAttributes(ctx, "t", map[string]string{"shards": "5"})), controller.ErrShardsFixed, "recreate"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.is) || !strings.Contains(c.err.Error(), c.says) {
			t.Errorf("%s: err = %v, want %v mentioning %q", c.name, c.err, c.is, c.says)
		}
	}
	if got := len(n.ListTopics()); got != 1 {
		t.Fatalf("failed requests created topics: %d topics", got)
	}
}

func errOf[T any](_ T, err error) error { return err }

func TestTopicsAndEventsSurviveRestartAndDeleteRemovesData(t *testing.T) {
	dir := t.TempDir()
	n := openNode(t, testConfig(dir))
	mustCreate(t, n, "keep", map[string]string{"shards": "2", "opaque_data": "hello"})
	mustCreate(t, n, "drop", map[string]string{"shards": "2"})
	publish(t, n, "keep", ev("a", "1"), ev("b", "2"))
	publish(t, n, "drop", ev("a", "1"))
	if err := n.DeleteTopic(context.Background(), "drop"); err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(dir, "shards", "*-drop*"))
	if len(dirs) != 0 {
		t.Fatalf("shard directories of the deleted topic remain: %v", dirs)
	}
	n.Close()

	n2 := openNode(t, testConfig(dir))
	tp, err := n2.GetTopic("keep")
	if err != nil || tp.Attributes["opaque_data"] != "hello" || tp.Attributes["shards"] != "2" {
		t.Fatalf("topic after restart = %+v, %v", tp, err)
	}
	if _, err := n2.GetTopic("drop"); !errors.Is(err, controller.ErrTopicNotFound) {
		t.Fatalf("deleted topic after restart: %v", err)
	}
	if ds := fetch(t, n2, "keep", 10, time.Minute); len(ds) != 2 {
		t.Fatalf("events after restart: %v", payloads(ds))
	}
	// A recreated topic starts empty.
	mustCreate(t, n2, "drop", nil)
	if ds := fetch(t, n2, "drop", 10, time.Minute); len(ds) != 0 {
		t.Fatalf("recreated topic has old events: %v", payloads(ds))
	}
}

func TestCorruptedShardIsReportedOthersServe(t *testing.T) {
	n2, _, files := brokenTopic(t, "t.1")
	broken := n2.BrokenShards()
	if len(broken) != 1 || broken["t.1"] == nil || !strings.Contains(broken["t.1"].Error(), files["t.1"]) {
		t.Fatalf("broken shards = %v, want t.1 naming %s", broken, files["t.1"])
	}
	var k0, k1 string
	for i := 0; k0 == "" || k1 == ""; i++ {
		k := fmt.Sprint("key", i)
		if topic.ShardFor(k, 2) == 0 {
			k0 = k
		} else {
			k1 = k
		}
	}
	if _, err := n2.Publish(context.Background(), "t", []Event{ev(k0, "fine")}); err != nil {
		t.Fatalf("publish to the healthy shard: %v", err)
	}
	_, err := n2.Publish(context.Background(), "t", []Event{ev(k1, "x")})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "t.1") {
		t.Fatalf("publish to the broken shard: err = %v", err)
	}
	st, _ := n2.TopicStats(context.Background(), "t")
	if st.Shards[1].Err == nil || st.Shards[0].Err != nil {
		t.Fatalf("stats do not flag the broken shard: %+v", st.Shards)
	}
}

func TestDataDirNotUsable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	_, err := Open(context.Background(), testConfig(filepath.Join(file, "data")))
	if err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("open under a file: err = %v, want advice about --data-dir", err)
	}
}
