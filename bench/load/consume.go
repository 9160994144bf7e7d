package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
)

// ConsumeConfig shapes a consumption run: a backlog of Backlog events is
// published first (not timed), then consumers drain it.
type ConsumeConfig struct {
	// Mode is "pull" (consumers fetch and acknowledge batches) or "push"
	// (the system delivers to a receiver of the benchmark's).
	Mode string `json:"mode"`
	// Backlog is the number of events published before the drain starts,
	// and drained.
	Backlog int64 `json:"backlog"`
	// Consumers fetch concurrently, each acknowledging one batch before it
	// fetches the next.
	Consumers int `json:"consumers"`
	// Batch is the number of events a fetch asks for, acknowledged
	// together.
	Batch int `json:"batch"`
	// EventBytes and Keys shape the backlog's events, as in Config.
	EventBytes int `json:"event_bytes"`
	Keys       int `json:"keys"`
	// FillProducers and FillBatch shape the publishing of the backlog.
	FillProducers int `json:"fill_producers"`
	FillBatch     int `json:"fill_batch"`
	// Subscriptions is, in push mode, how many webhook subscriptions the
	// backlog fans out to, each delivering every event; 0 pushes to the
	// topic's own push_endpoint (its default subscription).
	Subscriptions int `json:"subscriptions,omitempty"`
	// Timeout bounds the drain: a run that has not drained the backlog by
	// then fails.
	Timeout time.Duration `json:"-"`
	// ServerPIDs are the system's server processes whose CPU time the
	// drain measures (Result.ServerCPU), not the fill's; none: not
	// measured.
	ServerPIDs string `json:"-"`
}

// DefaultConsumeConfig returns the defaults of the command-line flags.
func DefaultConsumeConfig() ConsumeConfig {
	return ConsumeConfig{
		Mode:          "pull",
		Backlog:       10_000,
		Consumers:     4,
		Batch:         100,
		EventBytes:    1024,
		Keys:          1024,
		FillProducers: 16,
		FillBatch:     100,
		Timeout:       10 * time.Minute,
	}
}

// AddFlags defines the consumption flags on fs, with c's values as
// defaults.
func (c *ConsumeConfig) AddFlags(fs *pflag.FlagSet) {
	fs.Int64Var(&c.Backlog, "backlog", c.Backlog, "events to publish before the drain (not timed), then drain")
	fs.IntVar(&c.Consumers, "consumers", c.Consumers, "concurrent consumers, each acknowledging its batch before fetching the next")
	fs.IntVar(&c.Batch, "batch", c.Batch, "events per fetch, acknowledged together")
	addEventFlags(fs, &c.EventBytes, &c.Keys)
	fs.IntVar(&c.FillProducers, "producers", c.FillProducers, "concurrent producers publishing the backlog")
	fs.IntVar(&c.FillBatch, "fill-batch", c.FillBatch, "events per publish of the backlog")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "give up if the backlog is not drained within this long")
	fs.IntVar(&c.Subscriptions, "subscriptions", c.Subscriptions, "push mode: webhook subscriptions the backlog fans out to, each getting every event (0: the topic's push_endpoint)")
	addServerPIDsFlag(fs, &c.ServerPIDs)
}

// Validate reports the first setting that makes no sense.
func (c *ConsumeConfig) Validate() error {
	switch {
	case c.Mode != "pull" && c.Mode != "push":
		return fmt.Errorf("--mode %q: want pull or push", c.Mode)
	case c.Backlog < 1:
		return fmt.Errorf("--backlog %d: want at least 1", c.Backlog)
	case c.Consumers < 1:
		return fmt.Errorf("--consumers %d: want at least 1", c.Consumers)
	case c.Subscriptions < 0 || c.Subscriptions > 0 && c.Mode != "push":
		return fmt.Errorf("--subscriptions %d: want 0, or a number of push subscriptions with --mode push", c.Subscriptions)
	case c.Batch < 1:
		return fmt.Errorf("--batch %d: want at least 1", c.Batch)
	case c.FillBatch < 1:
		return fmt.Errorf("--fill-batch %d: want at least 1", c.FillBatch)
	case c.Timeout <= 0:
		return fmt.Errorf("--timeout %v: want a positive duration", c.Timeout)
	}
	if _, err := parsePIDs(c.ServerPIDs); err != nil {
		return err
	}
	// The rest shapes the backlog, checked as a publish load is.
	fill := c.Fill()
	return fill.Validate()
}

// Fill returns the publish load that makes the backlog.
func (c *ConsumeConfig) Fill() Config {
	return Config{
		Producers:  c.FillProducers,
		Batch:      c.FillBatch,
		EventBytes: c.EventBytes,
		Keys:       c.Keys,
		Count:      c.Backlog,
	}
}

// Describe says in one line what consumption c is.
func (c ConsumeConfig) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backlog of %d %d-byte events, %d keys; ", c.Backlog, c.EventBytes, c.Keys)
	if c.Mode == "push" {
		b.WriteString("push to a local receiver")
	} else {
		fmt.Fprintf(&b, "pull: %d consumers, fetch batch %d, acked per batch", c.Consumers, c.Batch)
	}
	return b.String()
}

// A Consumer fetches and acknowledges batches for one consumer goroutine;
// Drain never calls one Consumer concurrently.
type Consumer interface {
	// Fetch receives up to max events and returns how many. They stay
	// unacknowledged until Ack. No events and no error means none came in
	// the consumer's wait: Drain fetches again.
	Fetch(ctx context.Context, max int) (int, error)
	// Ack acknowledges the events of the last Fetch and returns once the
	// system confirmed it.
	Ack(ctx context.Context) error
}

// NewConsumer makes consumer i of a drain (from 0). Consumers that are
// also io.Closers are closed when the drain ends.
type NewConsumer func(ctx context.Context, i int) (Consumer, error)

// Drain makes cc.Consumers consumers with newConsumer and has them fetch
// and acknowledge batches of cc.Batch events until cc.Backlog events are
// acknowledged, and returns what was measured: the time from the start to
// the acknowledgement that completes the backlog, and the latencies of the
// fetches that returned events, of their acks, and of both together
// (Result.Latency). It fails if cc.Timeout passes first. Only
// Result.System, Label, FsyncBeforeAck and Settings are left for the
// caller to fill in.
func Drain(ctx context.Context, cc ConsumeConfig, newConsumer NewConsumer) (*Result, error) {
	if err := cc.Validate(); err != nil {
		return nil, err
	}
	consumers := make([]Consumer, cc.Consumers)
	defer func() {
		for _, c := range consumers {
			if c, ok := c.(io.Closer); ok {
				c.Close()
			}
		}
	}()
	for i := range consumers {
		c, err := newConsumer(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("consumer %d: %w", i, err)
		}
		consumers[i] = c
	}

	dctx, cancel := context.WithTimeout(ctx, cc.Timeout)
	defer cancel()
	d := &drainer{cc: cc, cancel: cancel}
	d.pids, _ = parsePIDs(cc.ServerPIDs) // checked by Validate
	if len(d.pids) > 0 {
		d.cpuFrom = sampleCPU(d.pids)
	}
	d.start = time.Now()
	stats := make([]consumerStats, len(consumers))
	var wg sync.WaitGroup
	for i, c := range consumers {
		wg.Go(func() { d.consume(dctx, c, &stats[i]) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return d.result(stats)
}

type drainer struct {
	cc     ConsumeConfig
	start  time.Time
	cancel context.CancelFunc // ends the other consumers' waits once drained
	acked  atomic.Int64
	end    atomic.Int64 // nanoseconds from start to the completing ack
	// pids are cc.ServerPIDs; cpuFrom and cpuTo their CPU time at the
	// start and at the completing ack (taken by its consumer before
	// cancel).
	pids           []int
	cpuFrom, cpuTo cpuSample
}

// consumerStats is what one consumer measured; only its goroutine writes it.
type consumerStats struct {
	fetch, ack, both Histogram
	events, batches  int64
	errors           int64
	firstErr         error
}

func (s *consumerStats) fail(err error) {
	s.errors++
	if s.firstErr == nil {
		s.firstErr = err
	}
	time.Sleep(errorPause)
}

func (d *drainer) consume(ctx context.Context, c Consumer, s *consumerStats) {
	for d.acked.Load() < d.cc.Backlog && ctx.Err() == nil {
		t0 := time.Now()
		n, err := c.Fetch(ctx, d.cc.Batch)
		t1 := time.Now()
		if ctx.Err() != nil {
			return
		}
		if n == 0 {
			if err != nil {
				s.fail(err)
			}
			continue
		}
		if aerr := c.Ack(ctx); aerr != nil {
			if ctx.Err() == nil {
				s.fail(aerr)
			}
			continue
		}
		t2 := time.Now()
		if err != nil { // the events of a partial fetch are acknowledged all the same
			s.fail(err)
		}
		s.fetch.Record(t1.Sub(t0))
		s.ack.Record(t2.Sub(t1))
		s.both.Record(t2.Sub(t0))
		s.events += int64(n)
		s.batches++
		if after := d.acked.Add(int64(n)); after >= d.cc.Backlog && after-int64(n) < d.cc.Backlog {
			d.end.Store(int64(t2.Sub(d.start)))
			if len(d.pids) > 0 {
				d.cpuTo = sampleCPU(d.pids)
			}
			d.cancel()
		}
	}
}

func (d *drainer) result(stats []consumerStats) (*Result, error) {
	res := &Result{Config: d.cc.Fill(), Consume: &d.cc, Start: d.start.UTC()}
	var fetch, ack, both Histogram
	for i := range stats {
		s := &stats[i]
		fetch.Merge(&s.fetch)
		ack.Merge(&s.ack)
		both.Merge(&s.both)
		res.Events += s.events
		res.Batches += s.batches
		res.Errors += s.errors
		if res.FirstError == "" && s.firstErr != nil {
			res.FirstError = s.firstErr.Error()
		}
	}
	if res.Events < d.cc.Backlog {
		msg := fmt.Sprintf("drained %d of %d events within --timeout %v", res.Events, d.cc.Backlog, d.cc.Timeout)
		if res.FirstError != "" {
			msg += "; the first error: " + res.FirstError
		}
		return nil, errors.New(msg)
	}
	res.Seconds = time.Duration(d.end.Load()).Seconds()
	res.finishConsume(both)
	fl, al := latencyOf(&fetch), latencyOf(&ack)
	res.FetchLatency, res.AckLatency = &fl, &al
	if len(d.pids) > 0 {
		var err error
		if res.ServerCPU, err = serverCPU(d.pids, d.cpuFrom, d.cpuTo, res.Events); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// finishConsume fills in the figures derived from Events and Seconds, and
// Latency from h.
func (r *Result) finishConsume(h Histogram) {
	r.Bytes = r.Events * int64(r.Consume.EventBytes)
	r.EventsPerSecond = float64(r.Events) / r.Seconds
	r.MBPerSecond = float64(r.Bytes) / 1e6 / r.Seconds
	r.Latency = latencyOf(&h)
}

// writeConsumeText writes consumption result r for people.
func writeConsumeText(b *strings.Builder, r *Result) {
	fmt.Fprintf(b, "consume:    %s\n", r.Consume.Describe())
	unit := "batches"
	if r.Consume.Mode == "push" {
		unit = "requests received"
	}
	fmt.Fprintf(b, "drained:    %d events in %.2fs (%d %s)\n", r.Events, r.Seconds, r.Batches, unit)
	fmt.Fprintf(b, "throughput: %.0f events/s, %.2f MB/s\n", r.EventsPerSecond, r.MBPerSecond)
	line := func(name string, l Latency, what string) {
		fmt.Fprintf(b, "%-11s p50 %s  p90 %s  p99 %s  p99.9 %s  max %s ms (%s)\n", name,
			FormatMS(l.P50), FormatMS(l.P90), FormatMS(l.P99), FormatMS(l.P999), FormatMS(l.Max), what)
	}
	if r.FetchLatency != nil {
		line("fetch:", *r.FetchLatency, "per batch")
		line("ack:", *r.AckLatency, "per batch, until confirmed")
	}
	if r.Batches > 0 && r.Consume.Mode == "pull" {
		line("both:", r.Latency, "fetch and ack of a batch")
	}
}
