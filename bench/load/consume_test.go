package load

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeQueue hands out events in batches to fake consumers; every ackFail-th
// ack fails (0: none), and the events of a failed ack are handed out again.
type fakeQueue struct {
	mu      sync.Mutex
	left    int64
	acks    int
	ackFail int
	closed  atomic.Int64
}

type fakeConsumer struct {
	q    *fakeQueue
	held int64
	busy atomic.Bool
}

func (q *fakeQueue) newConsumer(context.Context, int) (Consumer, error) {
	return &fakeConsumer{q: q}, nil
}

func (c *fakeConsumer) Fetch(ctx context.Context, max int) (int, error) {
	if !c.busy.CompareAndSwap(false, true) {
		panic("Fetch called concurrently on one consumer")
	}
	defer c.busy.Store(false)
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	c.held = min(int64(max), c.q.left)
	c.q.left -= c.held
	return int(c.held), nil
}

func (c *fakeConsumer) Ack(ctx context.Context) error {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	c.q.acks++
	if c.q.ackFail > 0 && c.q.acks%c.q.ackFail == 0 {
		c.q.left += c.held // handed out again
		return errors.New("ack refused")
	}
	return nil
}

func (c *fakeConsumer) Close() error {
	c.q.closed.Add(1)
	return nil
}

func testConsume() ConsumeConfig {
	cc := DefaultConsumeConfig()
	cc.Backlog, cc.Consumers, cc.Batch, cc.EventBytes = 1000, 3, 64, 10
	return cc
}

func TestDrain(t *testing.T) {
	q := &fakeQueue{left: 1000}
	cc := testConsume()
	res, err := Drain(context.Background(), cc, q.newConsumer)
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 1000 || res.Bytes != 10000 || res.Errors != 0 {
		t.Errorf("events %d bytes %d errors %d, want 1000 10000 0", res.Events, res.Bytes, res.Errors)
	}
	// 1000 events in batches of at most 64: at least 16 batches.
	if res.Batches < 16 || res.Batches > 1000 {
		t.Errorf("batches %d", res.Batches)
	}
	if res.Consume == nil || *res.Consume != cc {
		t.Errorf("consume %+v, want %+v", res.Consume, cc)
	}
	if res.Config != cc.Fill() || res.Config.Count != 1000 {
		t.Errorf("config %+v, want the fill %+v", res.Config, cc.Fill())
	}
	if res.FetchLatency == nil || res.AckLatency == nil || res.Seconds <= 0 || res.EventsPerSecond <= 0 {
		t.Errorf("figures: %+v", res)
	}
	if q.closed.Load() != 3 {
		t.Errorf("closed %d consumers, want 3", q.closed.Load())
	}
}

// TestDrainAckErrors: a failed ack is counted, and its events, handed out
// again, are drained all the same.
func TestDrainAckErrors(t *testing.T) {
	q := &fakeQueue{left: 1000, ackFail: 3}
	res, err := Drain(context.Background(), testConsume(), q.newConsumer)
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 1000 || res.Errors == 0 || res.FirstError != "ack refused" {
		t.Errorf("events %d errors %d first %q", res.Events, res.Errors, res.FirstError)
	}
}

// TestDrainTimeout: a backlog that never drains fails after the timeout,
// saying how far it got.
func TestDrainTimeout(t *testing.T) {
	q := &fakeQueue{left: 10}
	cc := testConsume()
	cc.Timeout = 50 * time.Millisecond
	_, err := Drain(context.Background(), cc, q.newConsumer)
	if err == nil || !strings.Contains(err.Error(), "drained 10 of 1000 events") {
		t.Errorf("Drain = %v", err)
	}
}

func TestDrainConsumerError(t *testing.T) {
	_, err := Drain(context.Background(), testConsume(), func(_ context.Context, i int) (Consumer, error) {
		return nil, fmt.Errorf("no connection for %d", i)
	})
	if err == nil || err.Error() != "consumer 0: no connection for 0" {
		t.Errorf("Drain = %v", err)
	}
}

func TestConsumeConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		edit func(*ConsumeConfig)
		want string
	}{
		{func(c *ConsumeConfig) {}, ""},
		{func(c *ConsumeConfig) { c.Mode = "push" }, ""},
		{func(c *ConsumeConfig) { c.Mode = "" }, `--mode "": want pull or push`},
		{func(c *ConsumeConfig) { c.Backlog = 0 }, "--backlog 0"},
		{func(c *ConsumeConfig) { c.Consumers = 0 }, "--consumers 0"},
		{func(c *ConsumeConfig) { c.Batch = 0 }, "--batch 0"},
		{func(c *ConsumeConfig) { c.FillBatch = -1 }, "--fill-batch -1"},
		{func(c *ConsumeConfig) { c.Timeout = 0 }, "--timeout 0s"},
		{func(c *ConsumeConfig) { c.FillProducers = 0 }, "--producers 0"},
		{func(c *ConsumeConfig) { c.EventBytes = -1 }, "--event-bytes -1"},
		{func(c *ConsumeConfig) { c.Keys = 0 }, "--keys 0"},
	} {
		c := DefaultConsumeConfig()
		tc.edit(&c)
		err := c.Validate()
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate = %v, want %q", c, err, tc.want)
		}
	}
}

func TestWriteConsumeText(t *testing.T) {
	q := &fakeQueue{left: 1000}
	res, err := Drain(context.Background(), testConsume(), q.newConsumer)
	if err != nil {
		t.Fatal(err)
	}
	res.System, res.Label = "fake", "pull"
	var b strings.Builder
	if err := WriteText(&b, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fake (pull)\n", "backlog of 1000 10-byte events, 1024 keys; pull: 3 consumers, fetch batch 64",
		"drained:    1000 events in", "fetch:      p50", "ack:        p50", "both:       p50"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

// TestMedianSplitLatency: the fetch and ack latencies of several runs have
// medians of their own; a run without them leaves them out.
func TestMedianSplitLatency(t *testing.T) {
	run := func(fetch float64) Result {
		return Result{FetchLatency: &Latency{P50: fetch}, AckLatency: &Latency{P50: 2 * fetch}}
	}
	m := Median([]Result{run(1), run(5), run(3)})
	if m.FetchLatency == nil || m.FetchLatency.P50 != 3 || m.AckLatency.P50 != 6 {
		t.Errorf("median fetch %+v ack %+v", m.FetchLatency, m.AckLatency)
	}
	if m := Median([]Result{run(1), {}}); m.FetchLatency != nil || m.AckLatency != nil {
		t.Errorf("median with a run without them: fetch %+v ack %+v", m.FetchLatency, m.AckLatency)
	}
}

// TestReceiver: it counts each event id once and is done at the wanted
// number.
func TestReceiver(t *testing.T) {
	r, err := startReceiver(2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	for _, id := range []string{"t/0/1", "t/0/1", "", "t/1/1"} {
		req, _ := http.NewRequest(http.MethodPost, r.url, strings.NewReader("{}"))
		req.Header.Set("X-Herald-Event-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("status %d", resp.StatusCode)
		}
	}
	<-r.done
	if r.received() != 2 || r.requests() != 4 {
		t.Errorf("received %d, requests %d; want 2, 4", r.received(), r.requests())
	}
}
