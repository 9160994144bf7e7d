package tier

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// putObject builds an object of runs runs and stores it as name.
func putObject(t *testing.T, s *Store, name string, seed uint64, runs int) builtObject {
	t.Helper()
	o := buildObject(t, rand.New(rand.NewPCG(seed, seed)), runs)
	if err := s.Put(context.Background(), name, o.data); err != nil {
		t.Fatal(err)
	}
	return o
}

func newReader(t *testing.T, s *Store, maxBytes int64) *Reader {
	t.Helper()
	r := NewReader(s, maxBytes)
	t.Cleanup(func() { r.Close() })
	return r
}

func TestReaderCaches(t *testing.T) {
	s := openMem(t)
	o := putObject(t, s, "tier/o1", 1, 10)
	r := newReader(t, s, 1<<30)
	ctx := context.Background()
	var total int64
	for round := range 2 {
		for i, run := range o.runs {
			got, err := r.Read(ctx, "tier/o1", run)
			if err != nil {
				t.Fatal(err)
			}
			sameEntries(t, run.String(), got, o.entries[i])
			if round == 0 {
				total += run.Length
			}
		}
	}
	st := r.Stats()
	want := ReaderStats{Hits: 10, Misses: 10, BytesRead: uint64(total), CachedBytes: total}
	if st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
}

func TestReaderEvicts(t *testing.T) {
	s := openMem(t)
	o := putObject(t, s, "tier/o1", 2, 20)
	var largest int64
	for _, run := range o.runs {
		largest = max(largest, run.Length)
	}
	limit := 3 * largest
	r := newReader(t, s, limit)
	ctx := context.Background()
	for _, run := range o.runs {
		if _, err := r.Read(ctx, "tier/o1", run); err != nil {
			t.Fatal(err)
		}
		if c := r.Stats().CachedBytes; c > limit || c == 0 {
			t.Fatalf("cache holds %d bytes, limit %d", c, limit)
		}
	}
	// The first run was evicted long ago, the last is still cached.
	before := r.Stats()
	if _, err := r.Read(ctx, "tier/o1", o.runs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(ctx, "tier/o1", o.runs[len(o.runs)-1]); err != nil {
		t.Fatal(err)
	}
	after := r.Stats()
	if after.Misses != before.Misses+1 || after.Hits != before.Hits+1 {
		t.Fatalf("stats went from %+v to %+v: want one miss (evicted run) and one hit", before, after)
	}

	// A run larger than the whole cache is read, not cached.
	tiny := newReader(t, s, 1)
	if _, err := tiny.Read(ctx, "tier/o1", o.runs[0]); err != nil {
		t.Fatal(err)
	}
	if c := tiny.Stats().CachedBytes; c != 0 {
		t.Fatalf("a cache of 1 byte holds %d", c)
	}
}

// Many goroutines reading the same runs at once fetch each run once.
func TestReaderSharesFetches(t *testing.T) {
	s := openMem(t)
	o := putObject(t, s, "tier/o1", 3, 8)
	r := newReader(t, s, 1<<30)
	var wg sync.WaitGroup
	errs := make(chan error, 32*len(o.runs))
	for g := range 32 {
		wg.Go(func() {
			for j := range o.runs {
				i := (g + j) % len(o.runs)
				got, err := r.Read(context.Background(), "tier/o1", o.runs[i])
				if err == nil && len(got) != len(o.entries[i]) {
					err = errors.New("wrong entries")
				}
				if err != nil {
					errs <- err
				}
			}
		})
		if g%4 == 0 {
			r.Prefetch("tier/o1", o.runs[g%len(o.runs)])
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var total uint64
	for _, run := range o.runs {
		total += uint64(run.Length)
	}
	if st := r.Stats(); st.BytesRead != total || st.Hits+st.Misses != uint64(32*len(o.runs)) {
		t.Fatalf("stats %+v: want each of the %d bytes read once", st, total)
	}
}

func TestReaderCorruptNotCached(t *testing.T) {
	s := openMem(t)
	o := putObject(t, s, "tier/o1", 4, 3)
	run := o.runs[1]
	damaged := append([]byte(nil), o.data...)
	damaged[run.Offset+run.Length/2] ^= 0x10
	ctx := context.Background()
	if err := s.Put(ctx, "tier/o1", damaged); err != nil {
		t.Fatal(err)
	}
	r := newReader(t, s, 1<<30)
	var ce *CorruptError
	for range 2 {
		if _, err := r.Read(ctx, "tier/o1", run); !errors.As(err, &ce) || ce.Object != "tier/o1" {
			t.Fatalf("read of a damaged run: %v, want a *CorruptError of tier/o1", err)
		}
	}
	if c := r.Stats().CachedBytes; c != 0 {
		t.Fatalf("a damaged run was cached (%d bytes)", c)
	}
	// Restored, the object reads again.
	if err := s.Put(ctx, "tier/o1", o.data); err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, "tier/o1", run)
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, "restored", got, o.entries[1])

	if _, err := r.Read(ctx, "tier/gone", run); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read of a missing object: %v, want ErrNotFound", err)
	}
}

func TestReaderPrefetch(t *testing.T) {
	s := openMem(t)
	o := putObject(t, s, "tier/o1", 5, 6)
	r := newReader(t, s, 1<<30)
	var total int64
	for _, run := range o.runs {
		r.Prefetch("tier/o1", run)
		total += run.Length
		// Wait for it: the slots must not run out in this test.
		waitFor(t, func() bool { return r.Stats().CachedBytes == total })
	}
	r.Prefetch("tier/o1", o.runs[0]) // cached: nothing to do
	for i, run := range o.runs {
		got, err := r.Read(context.Background(), "tier/o1", run)
		if err != nil {
			t.Fatal(err)
		}
		sameEntries(t, run.String(), got, o.entries[i])
	}
	st := r.Stats()
	if st.Prefetches != uint64(len(o.runs)) || st.Hits != uint64(len(o.runs)) || st.Misses != 0 {
		t.Fatalf("stats %+v: want every run prefetched once, then every read a hit", st)
	}

	// With every slot taken, a prefetch is dropped.
	busy := newReader(t, s, 1<<30)
	for range MaxPrefetches {
		busy.slots <- struct{}{}
	}
	busy.Prefetch("tier/o1", o.runs[0])
	if st := busy.Stats(); st.Prefetches != 0 || st.PrefetchDrops != 1 {
		t.Fatalf("stats %+v: want the prefetch dropped", st)
	}
	for range MaxPrefetches {
		<-busy.slots
	}
}

func TestReaderClose(t *testing.T) {
	s := openMem(t)
	o := putObject(t, s, "tier/o1", 6, 30)
	r := NewReader(s, 1<<30)
	for _, run := range o.runs {
		r.Prefetch("tier/o1", run)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(context.Background(), "tier/o1", o.runs[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after Close: %v, want ErrClosed", err)
	}
	r.Prefetch("tier/o1", o.runs[0])
	if len(r.slots) != 0 || len(r.flights) != 0 {
		t.Fatalf("after Close: %d prefetch slots taken, %d fetches", len(r.slots), len(r.flights))
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// A read that gives up returns its context's error, and a later read of
// the same run succeeds.
func TestReaderGivesUp(t *testing.T) {
	s := openMem(t)
	o := putObject(t, s, "tier/o1", 7, 4)
	r := newReader(t, s, 1<<30)
	for range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := r.Read(ctx, "tier/o1", o.runs[0]); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("read with a cancelled context: %v", err)
		}
	}
	got, err := r.Read(context.Background(), "tier/o1", o.runs[0])
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, "after giving up", got, o.entries[0])
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
