package framework

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// Webhook is a receiver of herald's webhook deliveries whose payloads are
// sequence numbers (JSON numbers): it records how often each event id
// arrived, and each key's sequence numbers in order of first arrival. It
// answers 503 until Open, so that a test can build a backlog first.
type Webhook struct {
	*httptest.Server
	open atomic.Bool

	mu    sync.Mutex
	seen  map[string]int   // event id → arrivals
	order map[string][]int // key → sequence numbers, first arrivals
}

// NewWebhook starts a closed webhook on loopback, stopped when the test
// ends.
func NewWebhook(t *testing.T) *Webhook {
	h := &Webhook{seen: map[string]int{}, order: map[string][]int{}}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	return h
}

func (h *Webhook) serve(w http.ResponseWriter, r *http.Request) {
	if !h.open.Load() {
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
	h.mu.Lock()
	h.seen[env.ID]++
	if h.seen[env.ID] == 1 {
		h.order[env.Key] = append(h.order[env.Key], env.Payload)
	}
	h.mu.Unlock()
}

// Open makes the webhook accept deliveries.
func (h *Webhook) Open() { h.open.Store(true) }

// Arrived returns how many distinct events arrived.
func (h *Webhook) Arrived() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// Times returns how often the event with id arrived.
func (h *Webhook) Times(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[id]
}

// Order returns key's sequence numbers in order of first arrival.
func (h *Webhook) Order(key string) []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.order[key]...)
}

// Check fails the test unless the webhook got exactly the events of want,
// each at least once, each key's in publish order, with at most maxDups
// more deliveries than events (those in flight at a crash). It returns
// the number of duplicates.
func (h *Webhook) Check(t testing.TB, name string, want []Published, maxDups int) int {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	wantIDs := make(map[string]bool, len(want))
	wantOrder := map[string][]int{}
	for _, p := range want {
		wantIDs[p.ID] = true
		wantOrder[p.Key] = append(wantOrder[p.Key], p.Seq)
		if h.seen[p.ID] == 0 {
			t.Fatalf("%s: event %s (%s %d) was never delivered (%d of %d arrived)", name, p.ID, p.Key, p.Seq, len(h.seen), len(want))
		}
	}
	dups := 0
	for id, n := range h.seen {
		if !wantIDs[id] {
			t.Fatalf("%s: got event %s, which is not among those it should get", name, id)
		}
		dups += n - 1
	}
	for k, seqs := range wantOrder {
		if got := h.order[k]; fmt.Sprint(got) != fmt.Sprint(seqs) {
			t.Fatalf("%s: key %s arrived in the order %v, want %v", name, k, got, seqs)
		}
	}
	if dups > maxDups {
		t.Fatalf("%s: %d duplicate deliveries, more than could have been in flight (%d)", name, dups, maxDups)
	}
	return dups
}
