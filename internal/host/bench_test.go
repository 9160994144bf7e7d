package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herald/internal/host"
	"herald/internal/shard"
)

// benchHost starts a host with n shard groups in a fresh directory.
func benchHost(b *testing.B, shards int, mod func(*host.Config)) *host.Host {
	b.Helper()
	cfg := host.Config{Dir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if mod != nil {
		mod(&cfg)
	}
	h, err := host.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	for i := range shards {
		name := "bench"
		if i > 0 {
			name = fmt.Sprintf("bench.%d", i)
		}
		if err := h.AddGroup(host.GroupConfig{ID: uint64(i + 1), Name: name, StateMachine: shard.NewMachine()}); err != nil {
			b.Fatal(err)
		}
	}
	// Wait until every group has elected itself.
	for i := range shards {
		for {
			st, _ := h.GroupStatus(uint64(i + 1))
			if st.IsLeader {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	return h
}

func publishOne(ctx context.Context, h *host.Host, group uint64, key string, payload []byte) error {
	cmd := shard.Command{Op: shard.OpPublish, Time: time.Now().UnixNano(), Events: []shard.Event{{Key: key, Payload: payload}}}
	r, err := h.Propose(ctx, group, &cmd)
	if err != nil {
		return err
	}
	return r.(shard.Result).Err
}

// BenchmarkGroupCommit measures acknowledged (committed, fsynced, applied)
// 1 KiB events per second with many concurrent publishers, each publishing
// one event at a time, on one shard and on 11.
func BenchmarkGroupCommit(b *testing.B) {
	for _, shards := range []int{1, 11} {
		for _, pubs := range []int{1, 16, 64, 256} {
			b.Run(fmt.Sprintf("shards=%d/publishers=%d", shards, pubs), func(b *testing.B) {
				h := benchHost(b, shards, nil)
				payload := make([]byte, 1024)
				var next atomic.Int64
				fsyncs := h.Stats().Fsyncs.Load()
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for p := range pubs {
					wg.Go(func() {
						ctx := context.Background()
						for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
							key := fmt.Sprintf("key-%d-%d", p, i%16)
							if err := publishOne(ctx, h, uint64(int(i)%shards+1), key, payload); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start).Seconds()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/elapsed, "events/s")
				b.ReportMetric(float64(h.Stats().Fsyncs.Load()-fsyncs)/elapsed, "fsyncs/s")
			})
		}
	}
}

// BenchmarkSnapshotTailLatency measures publish latency on one shard under
// steady load while snapshots are taken every 2,000 entries, with the
// snapshot written on the apply loop (sync) or in the background (async).
// With a backlog the shard holds that many undelivered events, as a queue
// does while its consumers lag, so each snapshot carries their metadata; a
// consumer acks the new events so the log is also compacted.
func BenchmarkSnapshotTailLatency(b *testing.B) {
	for _, backlog := range []int{0, 1000000} {
		for _, mode := range []string{"sync", "async"} {
			b.Run(fmt.Sprintf("backlog=%d/mode=%s", backlog, mode), func(b *testing.B) {
				snapshotTail(b, backlog, mode == "sync")
			})
		}
	}
}

func snapshotTail(b *testing.B, backlog int, syncSnapshots bool) {
	h := benchHost(b, 1, func(c *host.Config) {
		c.SnapshotEntries = 2000
		c.SegmentSize = 4 << 20
		c.SyncSnapshots = syncSnapshots
	})
	payload := make([]byte, 1024)
	fill(b, h, backlog, payload)
	const pubs = 16
	lat := make([][]time.Duration, pubs)
	var next atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var consumer sync.WaitGroup
	consumer.Go(func() { ackFrom(ctx, h, 1, uint64(backlog)) })
	snaps, snapNanos := h.Stats().Snapshots.Load(), h.Stats().SnapshotNanos.Load()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for p := range pubs {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				t0 := time.Now()
				if err := publishOne(context.Background(), h, 1, fmt.Sprint("key-", i%64), payload); err != nil {
					b.Error(err)
					return
				}
				lat[p] = append(lat[p], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	b.StopTimer()
	cancel()
	consumer.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	q := func(p float64) float64 {
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds())
	}
	b.ReportMetric(float64(b.N)/elapsed, "events/s")
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.90), "p90-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(q(0.999), "p99.9-µs")
	b.ReportMetric(float64(all[len(all)-1].Microseconds()), "max-µs")
	n := h.Stats().Snapshots.Load() - snaps
	b.ReportMetric(float64(n), "snapshots")
	if n > 0 {
		b.ReportMetric(float64(h.Stats().SnapshotNanos.Load()-snapNanos)/float64(n)/1e3, "µs/snapshot")
	}
}

// fill publishes n events in batches of 500, fast, to build a backlog.
func fill(b *testing.B, h *host.Host, n int, payload []byte) {
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(n))
	for range 8 {
		wg.Go(func() {
			for left.Add(-500) > -500 {
				cmd := shard.Command{Op: shard.OpPublish, Time: time.Now().UnixNano()}
				for j := range 500 {
					cmd.Events = append(cmd.Events, shard.Event{Key: fmt.Sprint("fill-", j%64), Payload: payload})
				}
				if _, err := h.Propose(context.Background(), 1, &cmd); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// ackFrom plays a consumer that acknowledges every event from offset from
// on, leaving the backlog below it in place.
func ackFrom(ctx context.Context, h *host.Host, group uint64, from uint64) {
	acked := from
	for ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
		var next uint64
		if err := h.View(ctx, group, func(sm host.StateMachine, _ uint64) {
			next = sm.(*shard.Machine).NextOffset()
		}); err != nil {
			return
		}
		if next <= acked {
			continue
		}
		offs := make([]uint64, 0, next-acked)
		for o := acked; o < next; o++ {
			offs = append(offs, o)
		}
		cmd := shard.Command{Op: shard.OpAck, Offsets: offs}
		if _, err := h.Propose(ctx, group, &cmd); err != nil {
			return
		}
		acked = next
	}
}
