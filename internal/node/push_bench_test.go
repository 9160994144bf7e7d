package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPushWebhook measures publish → webhook acknowledgement: b.N
// events over 1,000 keys are published and timed until the webhook, which
// takes 1 ms per request, has acknowledged all of them. It compares one
// shard with 11, and 11 with one of the 1,000 keys failing every request
// (its events are not counted; the others must not slow down), with 64,
// 16 (the default) and 4 concurrent pushes per shard.
func BenchmarkPushWebhook(b *testing.B) {
	for _, conc := range []int{64, 16, 4} {
		for _, c := range []struct {
			name    string
			shards  int
			failing bool
		}{{"shards=1", 1, false}, {"shards=11", 11, false}, {"shards=11/failing-key", 11, true}} {
			b.Run(fmt.Sprintf("concurrency=%d/%s", conc, c.name), func(b *testing.B) { benchPush(b, c.shards, c.failing, conc) })
		}
	}
}

func benchPush(b *testing.B, shards int, failing bool, concurrency int) {
	const keys = 1000
	var delivered atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env struct {
			Key  string    `json:"key"`
			Time time.Time `json:"time"`
		}
		json.NewDecoder(r.Body).Decode(&env)
		time.Sleep(time.Millisecond)
		if failing && env.Key == "k0" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		d := time.Since(env.Time)
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		delivered.Add(1)
	}))
	defer hook.Close()
	cfg := testConfig(b.TempDir())
	cfg.DeliveryConcurrency = concurrency
	n, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	if _, err := n.CreateTopic(context.Background(), "bench", map[string]string{
		"shards": fmt.Sprint(shards), "push_endpoint": hook.URL}); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"order":12345,"status":"paid","note":"` + string(make([]byte, 0)) + `"}`)
	want := int64(0)
	var batch []Event
	var batches [][]Event
	for i := range b.N {
		k := i % keys
		if !(failing && k == 0) {
			want++
		}
		batch = append(batch, Event{Key: fmt.Sprint("k", k), Payload: payload})
		if len(batch) == 500 || i == b.N-1 {
			batches = append(batches, batch)
			batch = nil
		}
	}
	b.ResetTimer()
	start := time.Now()
	for _, batch := range batches {
		if _, err := n.Publish(context.Background(), "bench", batch); err != nil {
			b.Fatal(err)
		}
	}
	for delivered.Load() < want {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(want)/elapsed.Seconds(), "delivered/s")
	mu.Lock()
	defer mu.Unlock()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Milliseconds()) }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// BenchmarkPushLatency measures publish → webhook receipt for one event at
// a time on an idle node: the latency an event sees when nothing queues
// ahead of it. The webhook answers at once.
func BenchmarkPushLatency(b *testing.B) {
	got := make(chan struct{}, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- struct{}{}
	}))
	defer hook.Close()
	n, err := Open(context.Background(), testConfig(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	if _, err := n.CreateTopic(context.Background(), "lat", map[string]string{"push_endpoint": hook.URL}); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := n.Publish(context.Background(), "lat", []Event{{Key: fmt.Sprint("k", i%100), Payload: []byte(`{}`)}}); err != nil {
			b.Fatal(err)
		}
		<-got
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(q(1), "max-µs")
}
