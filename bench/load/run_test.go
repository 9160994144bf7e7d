package load

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// fakeSystem acknowledges batches after a fixed delay and records them.
type fakeSystem struct {
	delay  time.Duration
	failAt int64 // fail every batch whose number is a multiple (0: never)

	batches atomic.Int64
	events  atomic.Int64
	closed  atomic.Int64
	active  atomic.Int64 // producers publishing right now
	maxSeen atomic.Int64

	mu        sync.Mutex
	keys      map[string]int
	size      map[int]int // payload length → events
	mixedKeys int         // batches with more than one key
}

func newFake(delay time.Duration) *fakeSystem {
	return &fakeSystem{delay: delay, keys: map[string]int{}, size: map[int]int{}}
}

type fakeProducer struct {
	sys  *fakeSystem
	busy atomic.Bool
}

func (f *fakeSystem) newProducer(ctx context.Context, i int) (Producer, error) {
	return &fakeProducer{sys: f}, nil
}

func (p *fakeProducer) Publish(ctx context.Context, events []Event) error {
	if !p.busy.CompareAndSwap(false, true) {
		panic("Publish called concurrently on one producer")
	}
	defer p.busy.Store(false)
	s := p.sys
	n := s.active.Add(1)
	for {
		m := s.maxSeen.Load()
		if n <= m || s.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	defer s.active.Add(-1)
	b := s.batches.Add(1)
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	if s.failAt > 0 && b%s.failAt == 0 {
		return errors.New("refused")
	}
	s.events.Add(int64(len(events)))
	s.mu.Lock()
	for _, e := range events {
		s.keys[e.Key]++
		s.size[len(e.Payload)]++
	}
	if slices.ContainsFunc(events, func(e Event) bool { return e.Key != events[0].Key }) {
		s.mixedKeys++
	}
	s.mu.Unlock()
	return nil
}

func (p *fakeProducer) Close() error {
	p.sys.closed.Add(1)
	return nil
}

func TestRunCountStopsExactly(t *testing.T) {
	f := newFake(0)
	cfg := Config{Producers: 4, Batch: 7, EventBytes: 100, Keys: 3, Count: 1000}
	res, err := Run(context.Background(), cfg, f.newProducer)
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 1000 || f.events.Load() != 1000 {
		t.Errorf("events: result %d, acknowledged %d; want 1000 both", res.Events, f.events.Load())
	}
	if want := int64(1000/7 + 1); res.Batches != want {
		t.Errorf("batches = %d, want %d (the last one short)", res.Batches, want)
	}
	if res.Bytes != 100_000 {
		t.Errorf("bytes = %d, want 100000", res.Bytes)
	}
	if got := slices.Sorted(maps.Keys(f.keys)); !slices.Equal(got, []string{"k0", "k1", "k2"}) {
		t.Errorf("keys used = %v, want k0 k1 k2", got)
	}
	if len(f.size) != 1 || f.size[100] != 1000 {
		t.Errorf("payload sizes = %v, want 1000 of 100 bytes", f.size)
	}
	if f.closed.Load() != 4 {
		t.Errorf("%d producers closed, want 4", f.closed.Load())
	}
	if f.maxSeen.Load() > 4 {
		t.Errorf("%d batches in flight at once, want at most 4", f.maxSeen.Load())
	}
	if res.Latency.Max <= 0 || res.Latency.P50 > res.Latency.P99 || res.Latency.P99 > res.Latency.Max {
		t.Errorf("latency not ordered: %+v", res.Latency)
	}
}

// TestRunKeyPerBatch: with KeyPerBatch every batch has one key, and the
// batches still spread over the keys; without it, batches mix keys.
func TestRunKeyPerBatch(t *testing.T) {
	for _, perBatch := range []bool{true, false} {
		f := newFake(0)
		cfg := Config{Producers: 2, Batch: 50, Keys: 8, Count: 5000, KeyPerBatch: perBatch}
		if _, err := Run(context.Background(), cfg, f.newProducer); err != nil {
			t.Fatal(err)
		}
		if perBatch && (f.mixedKeys != 0 || len(f.keys) != 8) {
			t.Errorf("one key per batch: %d batches mixed keys, %d keys used; want 0 and 8", f.mixedKeys, len(f.keys))
		}
		if !perBatch && f.mixedKeys == 0 {
			t.Errorf("keys per event: no batch mixed keys")
		}
	}
}

func TestRunDurationStops(t *testing.T) {
	f := newFake(2 * time.Millisecond)
	cfg := Config{Producers: 8, Batch: 10, EventBytes: 16, Keys: 100, Duration: 300 * time.Millisecond}
	start := time.Now()
	res, err := Run(context.Background(), cfg, f.newProducer)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < 300*time.Millisecond || took > 3*time.Second {
		t.Errorf("run took %v, want about 300ms", took)
	}
	if res.Seconds < 0.3 || res.Seconds > 3 {
		t.Errorf("measured %v seconds, want about 0.3", res.Seconds)
	}
	if res.Events != f.events.Load() || res.Events == 0 || res.Events%10 != 0 {
		t.Errorf("events %d, acknowledged %d: want equal, non-zero, whole batches", res.Events, f.events.Load())
	}
	wantRate := float64(res.Events) / res.Seconds
	if res.EventsPerSecond != wantRate {
		t.Errorf("events/s = %v, want %v", res.EventsPerSecond, wantRate)
	}
	// Each batch takes at least the fake's 2ms.
	if res.Latency.Min < 2 || res.Latency.P50 < 2 {
		t.Errorf("latency %+v: want at least 2ms", res.Latency)
	}
}

func TestRunWarmupIsNotCounted(t *testing.T) {
	f := newFake(time.Millisecond)
	cfg := Config{Producers: 2, Batch: 1, EventBytes: 1, Keys: 1, Count: 20, Warmup: 100 * time.Millisecond}
	res, err := Run(context.Background(), cfg, f.newProducer)
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 20 {
		t.Errorf("measured events = %d, want 20", res.Events)
	}
	if f.events.Load() <= 20 {
		t.Errorf("acknowledged %d events, want more than the 20 measured (the warm-up's)", f.events.Load())
	}
}

func TestRunCountsErrors(t *testing.T) {
	f := newFake(0)
	f.failAt = 5
	res, err := Run(context.Background(), Config{Producers: 1, Batch: 1, EventBytes: 1, Keys: 1, Count: 40}, f.newProducer)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 8 || res.Events != 32 || res.FirstError != "refused" {
		t.Errorf("errors %d events %d first %q, want 8 32 refused", res.Errors, res.Events, res.FirstError)
	}
}

func TestRunFailsWhenNothingSucceeds(t *testing.T) {
	f := newFake(0)
	f.failAt = 1
	_, err := Run(context.Background(), Config{Producers: 2, Batch: 1, EventBytes: 1, Keys: 1, Count: 10}, f.newProducer)
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("err = %v, want one naming the first error", err)
	}
}

func TestRunProducerSetupError(t *testing.T) {
	closed := 0
	newProducer := func(ctx context.Context, i int) (Producer, error) {
		if i == 2 {
			return nil, errors.New("no connection")
		}
		return closer{&closed}, nil
	}
	_, err := Run(context.Background(), Config{Producers: 4, Batch: 1, EventBytes: 1, Keys: 1, Count: 1}, newProducer)
	if err == nil || !strings.Contains(err.Error(), "producer 2: no connection") {
		t.Errorf("err = %v", err)
	}
	if closed != 2 {
		t.Errorf("closed %d producers, want the 2 made", closed)
	}
}

type closer struct{ n *int }

func (c closer) Publish(context.Context, []Event) error { return nil }
func (c closer) Close() error                           { *c.n++; return nil }

func TestRunCancelled(t *testing.T) {
	f := newFake(time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Run(ctx, Config{Producers: 2, Batch: 1, EventBytes: 1, Keys: 1, Duration: time.Hour}, f.newProducer)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's", err)
	}
}

func TestConfigFlags(t *testing.T) {
	parse := func(args ...string) (Config, error) {
		c := DefaultConfig()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		c.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			return c, err
		}
		return c, c.Resolve(fs)
	}
	c, err := parse()
	if err != nil || c != DefaultConfig() {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	c, err = parse("--count", "500")
	if err != nil || c.Count != 500 || c.Duration != 0 {
		t.Errorf("--count alone: %+v, %v; want no time limit", c, err)
	}
	c, err = parse("--count", "500", "--duration", "3s", "--producers", "2", "--batch", "50",
		"--event-bytes", "4096", "--keys", "1", "--warmup", "1s")
	want := Config{Producers: 2, Batch: 50, EventBytes: 4096, Keys: 1, Count: 500, Duration: 3 * time.Second, Warmup: time.Second}
	if err != nil || c != want {
		t.Errorf("all flags: %+v, %v; want %+v", c, err, want)
	}
	for _, bad := range [][]string{
		{"--producers", "0"}, {"--batch", "0"}, {"--keys", "0"}, {"--event-bytes", "-1"},
		{"--duration", "0s"}, {"--count", "-1"}, {"--warmup", "-1s"},
	} {
		if _, err := parse(bad...); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: err = %v, want one naming %s", bad, err, bad[0])
		}
	}
}

func TestResultJSON(t *testing.T) {
	r := Result{
		System: "herald", Label: "11 shards", FsyncBeforeAck: true,
		Settings: map[string]string{"shards": "11"},
		Config:   Config{Producers: 64, Batch: 1, EventBytes: 1024, Keys: 1024, Duration: 20 * time.Second, Warmup: 2 * time.Second},
		Start:    time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Seconds:  20, Events: 100, Batches: 100, Bytes: 102400,
		EventsPerSecond: 5, MBPerSecond: 0.00512,
		Latency: Latency{Min: 0.1, Mean: 1, P50: 1, P90: 2, P99: 3, P999: 4, Max: 5},
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var shape map[string]any
	if err := json.Unmarshal(data, &shape); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"system", "label", "fsync_before_ack", "settings", "config", "start",
		"seconds", "events", "batches", "bytes", "errors", "events_per_second", "mb_per_second", "latency_ms"} {
		if _, ok := shape[key]; !ok {
			t.Errorf("JSON has no %q: %s", key, data)
		}
	}
	cfg := shape["config"].(map[string]any)
	if cfg["duration"] != "20s" || cfg["warmup"] != "2s" || cfg["producers"] != 64.0 || cfg["event_bytes"] != 1024.0 {
		t.Errorf("config JSON = %v", cfg)
	}
	lat := shape["latency_ms"].(map[string]any)
	for _, key := range []string{"min", "mean", "p50", "p90", "p99", "p99_9", "max"} {
		if _, ok := lat[key]; !ok {
			t.Errorf("latency_ms has no %q: %v", key, lat)
		}
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Config != r.Config || back.Latency != r.Latency || back.Events != r.Events || !back.Start.Equal(r.Start) {
		t.Errorf("round trip: %+v, want %+v", back, r)
	}
}

func TestMedian(t *testing.T) {
	runs := []Result{
		{System: "x", EventsPerSecond: 300, Errors: 1, FirstError: "a", Latency: Latency{P99: 9}},
		{System: "x", EventsPerSecond: 100, Latency: Latency{P99: 1}},
		{System: "x", EventsPerSecond: 200, Errors: 2, FirstError: "b", Latency: Latency{P99: 5}},
	}
	m := Median(runs)
	if m.EventsPerSecond != 200 || m.Latency.P99 != 5 || m.Rounds != 3 || m.Errors != 3 || m.FirstError != "a" || m.System != "x" {
		t.Errorf("Median = %+v", m)
	}
	if got := Median(runs[:2]).EventsPerSecond; got != 200 {
		t.Errorf("median of 300 and 100 = %v, want 200", got)
	}
	if runs[0].EventsPerSecond != 300 {
		t.Error("Median changed its input")
	}
}

func TestWriteText(t *testing.T) {
	var b strings.Builder
	r := &Result{System: "nats-jetstream", Label: "default", Config: DefaultConfig(), Events: 10, Seconds: 1,
		EventsPerSecond: 10, Errors: 1, FirstError: "boom", Latency: Latency{P50: 1.5, P99: 12.25, Max: 250}}
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"nats-jetstream (default)", "WITHOUT fsync", "64 producers, batch 1, 1024-byte events, 1024 keys, 10s",
		"10 events/s", "p50 1.50", "p99 12.2", "max 250 ms", "1 failed batches; the first: boom"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
