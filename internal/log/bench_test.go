package log

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// benchDir returns where benchmark logs live. HERALD_BENCH_DIR lets them
// run on the disk being evaluated instead of the temporary directory,
// which may be a RAM file system.
func benchDir(b *testing.B) string {
	if d := os.Getenv("HERALD_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "herald-log-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// BenchmarkAppendSync has g goroutines each repeatedly append one 1 KiB
// record and Sync it, as Raft proposals arriving concurrently would. Group
// commit should let syncs/s stay near the device's fdatasync rate while
// records/s grows with g.
func BenchmarkAppendSync(b *testing.B) {
	for _, g := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			l := mustOpen(b, benchDir(b), Options{})
			defer l.Close()
			data := make([]byte, 1024)
			var mu sync.Mutex // makes "next index, Append" atomic
			var left atomic.Int64
			left.Store(int64(b.N))
			syncs0 := l.SyncCount()
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			var wg sync.WaitGroup
			for range g {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						mu.Lock()
						i := l.LastIndex() + 1
						err := l.Append([]Record{{Index: i, Term: 1, Data: data}})
						mu.Unlock()
						if err == nil {
							err = l.Sync()
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/secs, "records/s")
			b.ReportMetric(float64(l.SyncCount()-syncs0)/secs, "syncs/s")
		})
	}
}

// BenchmarkAppend measures the write path alone, without Sync.
func BenchmarkAppend(b *testing.B) {
	l := mustOpen(b, benchDir(b), Options{})
	defer l.Close()
	rs := make([]Record, 64)
	for i := range rs {
		rs[i] = Record{Term: 1, Data: make([]byte, 1024)}
	}
	b.SetBytes(int64(len(rs)) * 1024)
	b.ReportAllocs()
	next := uint64(1)
	for b.Loop() {
		for i := range rs {
			rs[i].Index = next + uint64(i)
		}
		if err := l.Append(rs); err != nil {
			b.Fatal(err)
		}
		next += uint64(len(rs))
	}
}

// BenchmarkEntries measures reading 64 1 KiB records.
func BenchmarkEntries(b *testing.B) {
	l := mustOpen(b, benchDir(b), Options{})
	defer l.Close()
	const n = 4096
	rs := make([]Record, n)
	for i := range rs {
		rs[i] = Record{Index: uint64(i + 1), Term: 1, Data: make([]byte, 1024)}
	}
	if err := l.Append(rs); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	lo := uint64(1)
	for b.Loop() {
		if _, err := l.Entries(lo, lo+64, 0); err != nil {
			b.Fatal(err)
		}
		lo = (lo+64)%(n-64) + 1
	}
}
