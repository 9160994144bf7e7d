// Package load generates publish load against herald or a peer system and
// measures it: producers publish batches of events, each waiting for its
// batch to be acknowledged before sending the next, and the run records
// throughput and the latency from sending a batch to its acknowledgement.
//
// herald bench publish and the peer clients under bench/cmd share it, so
// every system sees the same load and reports the same Result.
//
// It is the one package under bench/ that the herald binary imports (for
// herald bench publish), so it holds only the load, its results and herald's
// producer (RunHerald); what runs servers, peers and comparisons lives in
// the other packages under bench/.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Event is one event to publish.
type Event struct {
	Key     string
	Payload []byte
}

// A Producer publishes batches for one producer goroutine; Run never calls
// one Producer concurrently.
type Producer interface {
	// Publish sends events and returns once every one is acknowledged, or
	// with the first error. It must not keep events after it returns.
	Publish(ctx context.Context, events []Event) error
}

// NewProducer makes producer i of a run (from 0). Producers that are also
// io.Closers are closed when the run ends.
type NewProducer func(ctx context.Context, i int) (Producer, error)

// errorPause is how long a producer waits after a failed publish, so that
// a refusing server is not hammered.
const errorPause = 10 * time.Millisecond

// Run makes cfg.Producers producers with newProducer, runs the load of cfg
// through them and returns what was measured. It returns an error if cfg is
// invalid, if a producer cannot be made, if ctx ends, or if no batch
// succeeded at all; failed batches are otherwise counted in Result.Errors.
// Only Result.System, Label, FsyncBeforeAck and Settings are left for the
// caller to fill in.
func Run(ctx context.Context, cfg Config, newProducer NewProducer) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pids, _ := parsePIDs(cfg.ServerPIDs) // checked by Validate
	producers := make([]Producer, cfg.Producers)
	defer func() {
		for _, p := range producers {
			if c, ok := p.(io.Closer); ok {
				c.Close()
			}
		}
	}()
	for i := range producers {
		p, err := newProducer(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("producer %d: %w", i, err)
		}
		producers[i] = p
	}

	keys := make([]string, cfg.Keys)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	r := &runner{cfg: cfg, keys: keys}
	start := time.Now()
	r.measureFrom = start.Add(cfg.Warmup)
	// The servers' CPU time is read when the measured run begins, after
	// the warm-up, and once its last batch is acknowledged.
	var cpuFrom cpuSample
	var cpuStarted sync.WaitGroup
	if len(pids) > 0 {
		cpuStarted.Add(1)
		t := time.AfterFunc(cfg.Warmup, func() { cpuFrom = sampleCPU(pids); cpuStarted.Done() })
		defer t.Stop()
	}
	var stopTimer *time.Timer
	if cfg.Duration > 0 {
		stopTimer = time.AfterFunc(cfg.Warmup+cfg.Duration, func() { r.stop.Store(true) })
		defer stopTimer.Stop()
	}
	stats := make([]producerStats, len(producers))
	var wg sync.WaitGroup
	for i, p := range producers {
		wg.Go(func() { r.produce(ctx, i, p, &stats[i]) })
	}
	wg.Wait()
	end := time.Now()
	var cpuTo cpuSample
	if len(pids) > 0 {
		cpuTo = sampleCPU(pids)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	res := &Result{Config: cfg, Start: r.measureFrom.UTC()}
	var h Histogram
	for i := range stats {
		s := &stats[i]
		h.Merge(&s.latency)
		res.Events += s.events
		res.Batches += s.batches
		res.Errors += s.errors
		if res.FirstError == "" && s.firstErr != nil {
			res.FirstError = s.firstErr.Error()
		}
	}
	if res.Batches == 0 {
		if res.FirstError != "" {
			return nil, fmt.Errorf("no batch was acknowledged; the first error: %s", res.FirstError)
		}
		return nil, errors.New("no batch was sent in the measured run; is --duration shorter than one publish?")
	}
	res.Bytes = res.Events * int64(cfg.EventBytes)
	res.Seconds = end.Sub(r.measureFrom).Seconds()
	res.EventsPerSecond = float64(res.Events) / res.Seconds
	res.MBPerSecond = float64(res.Bytes) / 1e6 / res.Seconds
	res.Latency = latencyOf(&h)
	if len(pids) > 0 {
		cpuStarted.Wait() // a run ends after its warm-up: the first sample is taken
		var err error
		if res.ServerCPU, err = serverCPU(pids, cpuFrom, cpuTo, res.Events); err != nil {
			return nil, err
		}
	}
	return res, nil
}

type runner struct {
	cfg         Config
	keys        []string
	measureFrom time.Time
	stop        atomic.Bool
	claimed     atomic.Int64 // events claimed against cfg.Count
}

// producerStats is what one producer measured; only its goroutine writes it.
type producerStats struct {
	latency  Histogram
	events   int64
	batches  int64
	errors   int64
	firstErr error
}

// claim returns how many events the next measured batch may hold: Batch,
// fewer at the end of a counted run, 0 when the count is spent.
func (r *runner) claim() int {
	n := int64(r.cfg.Batch)
	if r.cfg.Count == 0 {
		return int(n)
	}
	after := r.claimed.Add(n)
	before := after - n
	if before >= r.cfg.Count {
		return 0
	}
	return int(min(after, r.cfg.Count) - before)
}

func (r *runner) produce(ctx context.Context, id int, p Producer, s *producerStats) {
	rng := rand.New(rand.NewPCG(uint64(id), 0x6865_7261_6c64)) // "herald"
	// One random block serves every payload: event j of a batch starts at
	// byte j, so the events of a batch differ.
	block := make([]byte, r.cfg.EventBytes+r.cfg.Batch)
	for i := range block {
		block[i] = byte(rng.Uint32())
	}
	events := make([]Event, r.cfg.Batch)
	for j := range events {
		events[j].Payload = block[j : j+r.cfg.EventBytes : j+r.cfg.EventBytes]
	}
	for !r.stop.Load() && ctx.Err() == nil {
		n := r.cfg.Batch
		measured := !time.Now().Before(r.measureFrom)
		if measured {
			if n = r.claim(); n == 0 {
				r.stop.Store(true)
				return
			}
		}
		batch := events[:n]
		key := r.keys[rng.IntN(len(r.keys))]
		for j := range batch {
			if !r.cfg.KeyPerBatch {
				key = r.keys[rng.IntN(len(r.keys))]
			}
			batch[j].Key = key
		}
		t0 := time.Now()
		err := p.Publish(ctx, batch)
		took := time.Since(t0)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if measured {
				s.errors++
				if s.firstErr == nil {
					s.firstErr = err
				}
			}
			time.Sleep(errorPause)
			continue
		}
		if measured {
			s.latency.Record(took)
			s.events += int64(n)
			s.batches++
		}
	}
}
