package node

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/internal/topic"
)

// receiver is a webhook that records what it receives, per key, and can be
// told to fail.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	byKey  map[string][]string // payloads in arrival order
	ids    map[string]int      // event id → times received
	status func(key string) int
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{byKey: map[string][]string{}, ids: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var env struct {
			ID      string          `json:"id"`
			Key     string          `json:"key"`
			Payload json.RawMessage `json:"payload"`
		}
		json.Unmarshal(body, &env)
		r.mu.Lock()
		status := http.StatusOK
		if r.status != nil {
			status = r.status(env.Key)
		}
		if status == http.StatusOK {
			var p string
			json.Unmarshal(env.Payload, &p)
			r.byKey[env.Key] = append(r.byKey[env.Key], p)
			r.ids[env.ID]++
		}
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.byKey[key]...)
}

func (r *receiver) setStatus(f func(key string) int) {
	r.mu.Lock()
	r.status = f
	r.mu.Unlock()
}

func jsonEvents(key string, from, n int) []Event {
	var out []Event
	for i := from; i < from+n; i++ {
		out = append(out, ev(key, fmt.Sprintf("%q", fmt.Sprint(i))))
	}
	return out
}

func waitStats(t *testing.T, n *Node, topicName string, cond func(ShardStats) bool) ShardStats {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := n.TopicStats(context.Background(), topicName)
		if err != nil {
			t.Fatal(err)
		}
		if cond(st.Total) {
			return st.Total
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached; stats %+v", st.Total.Stats)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPushDeliversInOrderPerKey(t *testing.T) {
	rcv := newReceiver(t)
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "hooks", map[string]string{"shards": "3", "push_endpoint": rcv.URL, "opaque_data": "x"})
	for k := range 5 {
		publish(t, n, "hooks", jsonEvents(fmt.Sprint("k", k), 0, 20)...)
	}
	waitStats(t, n, "hooks", func(s ShardStats) bool { return s.Stats.Delivered == 100 })
	for k := range 5 {
		got := rcv.got(fmt.Sprint("k", k))
		for i, p := range got {
			if p != fmt.Sprint(i) {
				t.Fatalf("key k%d received %v: not in order", k, got)
			}
		}
	}
	if _, err := n.Fetch(context.Background(), "hooks", FetchOptions{Max: 10, Visibility: time.Minute}); !errors.Is(err, ErrPushTopic) {
		t.Fatalf("fetch from a push topic: err = %v, want ErrPushTopic", err)
	}
}

// TestPushFetchErrorHidesEndpointSecrets: the error for a pull from a push
// topic names the endpoint without its password or query-string token.
func TestPushFetchErrorHidesEndpointSecrets(t *testing.T) {
	rcv := newReceiver(t)
	n := openNode(t, testConfig(t.TempDir()))
	ep := strings.Replace(rcv.URL, "http://", "http://hook:hunter2@", 1) + "/in?token=secret-token"
	mustCreate(t, n, "hooks", map[string]string{"push_endpoint": ep})
	_, err := n.Fetch(context.Background(), "hooks", FetchOptions{Max: 10, Visibility: time.Minute})
	if !errors.Is(err, ErrPushTopic) {
		t.Fatalf("fetch from a push topic: err = %v, want ErrPushTopic", err)
	}
	if strings.Contains(err.Error(), "secret-token") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %q shows the endpoint's token or password", err)
	}
	if !strings.Contains(err.Error(), "hook:xxxxx@") || !strings.Contains(err.Error(), "/in?token=xxxxx") {
		t.Errorf("error %q does not name the endpoint, redacted", err)
	}
}

func TestPushDeadLettersReplayAndPurge(t *testing.T) {
	rcv := newReceiver(t)
	rcv.setStatus(func(key string) int {
		if key == "bad" {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	dir := t.TempDir()
	n := openNode(t, testConfig(dir))
	mustCreate(t, n, "hooks", map[string]string{"shards": "2", "push_endpoint": rcv.URL})
	publish(t, n, "hooks", jsonEvents("bad", 0, 3)...)
	publish(t, n, "hooks", jsonEvents("good", 0, 3)...)
	waitStats(t, n, "hooks", func(s ShardStats) bool { return s.Stats.DeadLetters == 3 && s.Stats.Delivered == 3 })

	dls, err := n.ListDeadLetters(context.Background(), "hooks", "", 10)
	if err != nil || len(dls) != 3 {
		t.Fatalf("dead letters = %v, %v", dls, err)
	}
	for i, dl := range dls {
		if dl.Reason != "rejected" || !strings.Contains(dl.LastError, "400") || dl.Event.Key != "bad" || string(dl.Event.Payload) != fmt.Sprintf("%q", fmt.Sprint(i)) {
			t.Fatalf("dead letter %d = %+v", i, dl)
		}
	}
	// Dead letters survive a restart.
	n.Close()
	n = openNode(t, testConfig(dir))
	if dls, _ := n.ListDeadLetters(context.Background(), "hooks", "", 10); len(dls) != 3 {
		t.Fatalf("after restart: %d dead letters, want 3", len(dls))
	}
	// Fix the receiver and replay: delivered in the original order.
	rcv.setStatus(nil)
	replayed, err := n.ReplayDeadLetters(context.Background(), "hooks", "", nil)
	if err != nil || replayed != 3 {
		t.Fatalf("replay = %d, %v", replayed, err)
	}
	waitStats(t, n, "hooks", func(s ShardStats) bool { return s.Stats.DeadLetters == 0 && s.Stats.Delivered == 6 })
	if got := rcv.got("bad"); strings.Join(got, ",") != "0,1,2" {
		t.Fatalf("replayed events arrived as %v", got)
	}
	// Purge removes dead letters for good.
	rcv.setStatus(func(string) int { return http.StatusNotFound })
	publish(t, n, "hooks", jsonEvents("gone", 0, 2)...)
	waitStats(t, n, "hooks", func(s ShardStats) bool { return s.Stats.DeadLetters == 2 })
	if purged, err := n.PurgeDeadLetters(context.Background(), "hooks", "", nil); err != nil || purged != 2 {
		t.Fatalf("purge = %d, %v", purged, err)
	}
	if dls, _ := n.ListDeadLetters(context.Background(), "hooks", "", 10); len(dls) != 0 {
		t.Fatalf("%d dead letters after purge", len(dls))
	}
}

func TestPushEndpointDownThenBack(t *testing.T) {
	rcv := newReceiver(t)
	rcv.setStatus(func(string) int { return http.StatusServiceUnavailable })
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "hooks", map[string]string{"shards": "2", "push_endpoint": rcv.URL, "retry_sleep_duration": "0"})
	for k := range 4 {
		publish(t, n, "hooks", jsonEvents(fmt.Sprint("k", k), 0, 10)...)
	}
	waitStats(t, n, "hooks", func(s ShardStats) bool { return s.Stats.Retried >= 8 })
	rcv.setStatus(nil)
	waitStats(t, n, "hooks", func(s ShardStats) bool { return s.Stats.Delivered == 40 })
	for k := range 4 {
		if got := rcv.got(fmt.Sprint("k", k)); strings.Join(got, ",") != "0,1,2,3,4,5,6,7,8,9" {
			t.Fatalf("key k%d received %v", k, got)
		}
	}
}

// TestNonPersistentIDsDoNotRepeatAcrossRestarts: receivers de-duplicate on
// event ids, so two starts of a node on one data directory must not hand
// out the same id to different events.
func TestNonPersistentIDsDoNotRepeatAcrossRestarts(t *testing.T) {
	rcv := newReceiver(t)
	dir := t.TempDir()
	seen := map[string]bool{}
	shard := topic.ShardFor("k", 2)
	for start := 1; start <= 2; start++ {
		n := openNode(t, testConfig(dir))
		if start == 1 {
			mustCreate(t, n, "live", map[string]string{"shards": "2", "persistent": "false", "push_endpoint": rcv.URL})
		}
		ids := publish(t, n, "live", jsonEvents("k", 0, 3)...)
		for i, id := range ids {
			if want := topic.NonPersistentEventID("live", shard, uint64(start), uint64(i+1)); id != want {
				t.Errorf("start %d: id %q, want %q", start, id, want)
			}
			if seen[id] {
				t.Errorf("start %d: id %q was handed out before", start, id)
			}
			seen[id] = true
			if _, err := n.Ack(context.Background(), []string{id}); !errors.Is(err, topic.ErrInvalid) || !strings.Contains(err.Error(), "non-persistent") {
				t.Errorf("Ack(%s) = %v, want an error saying the event of a non-persistent topic was not stored", id, err)
			}
		}
		n.Close()
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.ids) != 6 {
		t.Errorf("the receiver got %d distinct ids, want 6: %v", len(rcv.ids), rcv.ids)
	}
}

func TestNonPersistentPushesSynchronouslyAndStoresNothing(t *testing.T) {
	rcv := newReceiver(t)
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "live", map[string]string{"shards": "2", "persistent": "false", "push_endpoint": rcv.URL})
	ids := publish(t, n, "live", jsonEvents("k", 0, 3)...)
	if len(ids) != 3 {
		t.Fatalf("ids = %v", ids)
	}
	// Delivered before Publish returned.
	if got := rcv.got("k"); strings.Join(got, ",") != "0,1,2" {
		t.Fatalf("received %v", got)
	}
	st, _ := n.TopicStats(context.Background(), "live")
	if st.Total.Stats.Published != 0 {
		t.Fatalf("a non-persistent topic stored %d events", st.Total.Stats.Published)
	}
	rcv.setStatus(func(string) int { return http.StatusBadGateway })
	if _, err := n.Publish(context.Background(), "live", jsonEvents("k", 3, 1)); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "nothing was stored") {
		t.Fatalf("publish while the endpoint fails: err = %v", err)
	}
}

// TestPushEndpointThatFailsToOpenIsRetried: a push endpoint that cannot be
// opened (its CA file is not installed yet) is tried again until it opens,
// without a restart or a change of leadership, and the queued events are
// then delivered.
func TestPushEndpointThatFailsToOpenIsRetried(t *testing.T) {
	rcv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer rcv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "hooks", map[string]string{"push_endpoint": rcv.URL, "tls_ca_file": caFile})
	publish(t, n, "hooks", jsonEvents("k", 0, 5)...)

	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rcv.Certificate().Raw})
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	waitStats(t, n, "hooks", func(s ShardStats) bool { return s.Stats.Delivered == 5 })
}
