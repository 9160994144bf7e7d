package consume

import (
	"context"
	"fmt"
	"testing"
	"time"

	"herald/internal/shard"
)

// BenchmarkFetch drains a backlog of the given size, spread over the given
// number of keys, with fetches of up to 1,000 events, each acknowledged
// before the next fetch, by the index (Shard.Fetch) and by the scan it
// replaced (fetchByScan). The backlog is topped up after each fetch, off
// the clock, so that each fetch also indexes as many new events as it
// hands out, as when publishers keep up with the consumer. It reports ns
// per event handed out and events per second.
func BenchmarkFetch(b *testing.B) {
	fetchers := []struct {
		name  string
		fetch func(ctx context.Context, s Shard) ([]Lease, error)
	}{
		{"scan", func(ctx context.Context, s Shard) ([]Lease, error) {
			return fetchByScan(ctx, s, 1000, time.Hour, MaxScan)
		}},
		{"index", func(ctx context.Context, s Shard) ([]Lease, error) { return s.Fetch(ctx, 1000, time.Hour) }},
	}
	for _, backlog := range []int{10_000, 100_000, 1_000_000} {
		for _, keys := range []int{40, 1024} {
			for _, f := range fetchers {
				b.Run(fmt.Sprintf("backlog=%d/keys=%d/%s", backlog, keys, f.name), func(b *testing.B) {
					benchmarkFetch(b, backlog, keys, f.fetch)
				})
			}
		}
	}
}

func benchmarkFetch(b *testing.B, backlog, keys int, fetch func(context.Context, Shard) ([]Lease, error)) {
	ctx := context.Background()
	s, g := newShard()
	published := 0
	topUp := func() {
		for n := backlog - int(g.m.Stats().Events); n > 0; {
			batch := make([]shard.Event, min(n, 100)) // events per publish
			for i := range batch {
				batch[i] = shard.Event{Key: fmt.Sprint("key-", published%keys), Payload: make([]byte, 64)}
				published++
			}
			g.apply(b, shard.Command{Op: shard.OpPublish, Time: 1, Events: batch})
			n -= len(batch)
		}
	}
	topUp()
	// The index is built once per leader, a step per fetch: measure the
	// fetches it serves once built.
	for s.table().index.indexed < g.m.NextOffset() {
		if _, err := s.index(ctx, s.table()); err != nil {
			b.Fatal(err)
		}
	}
	handed := 0
	b.ResetTimer()
	for range b.N {
		got, err := fetch(ctx, s)
		if err != nil || len(got) == 0 {
			b.Fatalf("fetch = %d events, %v", len(got), err)
		}
		handed += len(got)
		g.ack(b, offsets(got)...)
		b.StopTimer()
		topUp()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(handed), "ns/event")
	b.ReportMetric(float64(handed)/b.Elapsed().Seconds(), "events/s")
}
