package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"herald/internal/testkit"
)

// BenchmarkPublish measures Node.Publish in process, with no HTTP in the
// way: 64 concurrent publishers of 1 KiB events over 1,024 keys, in
// batches of 1 and 100, to a topic of one shard, of 11 and of 100, fsync on (the
// node's data directory is a temporary directory on the test machine's
// disk). b.N counts events; events/s is the rate at which they were
// acknowledged. What one shard and 11 cost apart, per event, is what
// spreading a request's events over shards costs: a proposal per shard
// instead of one. Per event it also reports the process's CPU, and the
// Readies, WAL fsyncs, scheduler rounds and group turns, which show how
// many events share each. It measures after a warm-up (warmupEvents).
func BenchmarkPublish(b *testing.B) {
	for _, batch := range []int{1, 100} {
		for _, shards := range []int{1, 11, 100} {
			b.Run(fmt.Sprintf("batch=%d/shards=%d", batch, shards), func(b *testing.B) {
				benchPublish(b, shards, batch)
			})
		}
	}
}

func benchPublish(b *testing.B, shards, batch int) {
	const (
		publishers = 64
		keys       = 1024
	)
	cfg := testConfig(b.TempDir())
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	n, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	<-n.Opened()
	// Nothing consumes: the queue limit must hold every event published.
	attrs := map[string]string{"shards": fmt.Sprint(shards), "max_queue_bytes": fmt.Sprint(int64(64) << 30)}
	if _, err := n.CreateTopic(context.Background(), "bench", attrs); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	keyNames := make([]string, keys)
	for i := range keyNames {
		keyNames[i] = fmt.Sprint("key-", i)
	}
	publish := func(events int) {
		var next atomic.Int64 // events handed out
		var failed atomic.Pointer[error]
		var wg sync.WaitGroup
		for p := range publishers {
			wg.Go(func() {
				batchEvents := make([]Event, batch)
				for {
					first := next.Add(int64(batch)) - int64(batch)
					if first >= int64(events) {
						return
					}
					for i := range batchEvents {
						batchEvents[i] = Event{Key: keyNames[(int(first)+i*7+p)%keys], Payload: payload}
					}
					if _, err := n.Publish(context.Background(), "bench", batchEvents); err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			b.Fatalf("publish: %v", *err)
		}
	}
	// Measured once the node's memory has grown to its steady size
	// (warmupEvents): on a fresh virtual machine each new page costs a
	// fault of several microseconds, which a shard count holding more
	// memory would pay inside the measurement.
	publish(warmupEvents)
	counters := make(map[string]float64)
	for name := range perEventCounters() {
		counters[name] = counterValue(b, reg, name)
	}
	syncs0, syncSeconds0 := histogramTotals(b, reg, "herald_fsync_duration_seconds")
	b.ResetTimer()
	start, cpuStart := time.Now(), testkit.ProcessCPU(b)
	publish(b.N)
	elapsed, cpu := time.Since(start), testkit.ProcessCPU(b)-cpuStart
	b.StopTimer()
	// Every batch that started below b.N was published whole.
	published := (b.N + batch - 1) / batch * batch
	b.ReportMetric(float64(published)/elapsed.Seconds(), "events/s")
	// The process's CPU per event tells a run bound by the CPU from one
	// bound by waiting (for fsyncs, or for rounds to fill).
	b.ReportMetric(float64(cpu.Microseconds())/float64(published), "cpu-µs/event")
	for name, unit := range perEventCounters() {
		b.ReportMetric((counterValue(b, reg, name)-counters[name])/float64(published), unit)
	}
	// What a sync costs tells a round that waits on the disk from one that
	// waits on its own work.
	syncs, syncSeconds := histogramTotals(b, reg, "herald_fsync_duration_seconds")
	b.ReportMetric((syncSeconds-syncSeconds0)*1e6/max(syncs-syncs0, 1), "µs/fsync")
}

// warmupEvents are published before BenchmarkPublish measures: enough to
// fill the node's entry cache (consume.DefaultEntryCacheBytes) and every
// shard's write-behind tail with 1 KiB events.
const warmupEvents = 100_000

// perEventCounters are the counters BenchmarkPublish reports per event,
// with their units: how many events share a Ready and an fdatasync,
// whose costs are paid once per Ready or sync, not per event.
func perEventCounters() map[string]string {
	return map[string]string{
		"herald_raft_readies_total": "readies/event",
		"herald_wal_fsyncs_total":   "fsyncs/event",
		"herald_raft_rounds_total":  "rounds/event",
		"herald_raft_turns_total":   "turns/event",
	}
}

// histogramTotals reads the count and sum of the histogram name from reg.
func histogramTotals(b *testing.B, reg *prometheus.Registry, name string) (count, sum float64) {
	b.Helper()
	h := metricNamed(b, reg, name).GetHistogram()
	return float64(h.GetSampleCount()), h.GetSampleSum()
}

// counterValue reads the counter name from reg.
func counterValue(b *testing.B, reg *prometheus.Registry, name string) float64 {
	b.Helper()
	return metricNamed(b, reg, name).GetCounter().GetValue()
}

// metricNamed returns the one series of the metric name in reg.
func metricNamed(b *testing.B, reg *prometheus.Registry, name string) *dto.Metric {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0]
		}
	}
	b.Fatalf("no metric %s with one series", name)
	return nil
}
