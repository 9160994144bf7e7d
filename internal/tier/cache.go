package tier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"
)

// MaxPrefetches is how many prefetches a Reader runs at once; it drops
// further requests until one ends, so that read-ahead never queues up
// behind itself or crowds out reads.
const MaxPrefetches = 4

// ErrClosed is returned by the reads of a closed Reader.
var ErrClosed = errors.New("tier: reader closed")

// Reader reads runs from a Store through a cache of decoded runs bounded
// by bytes, fetching each missing run once however many goroutines ask
// for it, and fetches runs ahead of need on request. Its methods are safe
// for concurrent use. The entries it returns are shared with the cache
// and other callers: callers must not modify them.
type Reader struct {
	store *Store

	ctx    context.Context // of every fetch; Close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup // the fetches' goroutines
	slots  chan struct{}  // a token per running prefetch

	mu      sync.Mutex
	closed  bool
	cache   *lru
	flights map[runKey]*flight

	hits, misses, bytesRead, prefetches, dropped atomic.Uint64
}

// flight is a fetch in progress, shared by the reads that wait for it.
type flight struct {
	done    chan struct{}
	entries []raftpb.Entry // set before done is closed
	err     error

	// Guarded by Reader.mu. A fetch that only reads wait for is
	// cancelled when the last of them gives up; a prefetch runs on.
	waiters  int
	prefetch bool
	cancel   context.CancelFunc
}

// ReaderStats counts a Reader's work since it was made, for metrics.
type ReaderStats struct {
	Hits          uint64 // reads served from the cache
	Misses        uint64 // reads that waited for a fetch, theirs or a shared one
	BytesRead     uint64 // bytes read from the store
	Prefetches    uint64 // prefetches started
	PrefetchDrops uint64 // prefetches not started: all slots were busy
	CachedBytes   int64  // the runs cached now, by Length
}

// NewReader returns a Reader of store whose cache holds up to maxBytes of
// runs (by their Length); with maxBytes 0 it caches nothing, and reads
// of a run at the same time still share one fetch. Close it to stop its
// fetches.
func NewReader(store *Store, maxBytes int64) *Reader {
	ctx, cancel := context.WithCancel(context.Background())
	return &Reader{
		store: store, ctx: ctx, cancel: cancel,
		slots:   make(chan struct{}, MaxPrefetches),
		cache:   newLRU(maxBytes),
		flights: make(map[runKey]*flight),
	}
}

// Read returns the entries of run, a run of object, from the cache or
// else from the store. Damage is reported as a *CorruptError, which is not
// cached: the next read fetches again.
func (r *Reader) Read(ctx context.Context, object string, run Run) ([]raftpb.Entry, error) {
	k := runKey{object, run}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	if entries, ok := r.cache.get(k); ok {
		r.mu.Unlock()
		r.hits.Add(1)
		return entries, nil
	}
	r.misses.Add(1)
	f := r.flights[k]
	if f == nil {
		f = r.startLocked(k, false)
	}
	f.waiters++
	r.mu.Unlock()

	select {
	case <-f.done:
		return f.entries, f.err
	case <-ctx.Done():
		r.mu.Lock()
		f.waiters--
		if f.waiters == 0 && !f.prefetch {
			// Nobody wants it any more. Forget it now, so that a read
			// arriving before the fetch ends starts afresh rather than
			// joining a cancelled fetch.
			f.cancel()
			if r.flights[k] == f {
				delete(r.flights, k)
			}
		}
		r.mu.Unlock()
		return nil, fmt.Errorf("tier: read %s run %v: %w", object, run, ctx.Err())
	}
}

// Prefetch starts fetching run of object into the cache, unless it is
// cached or being fetched, or would not fit the cache, or MaxPrefetches
// prefetches are running; it does not wait. Errors are dropped: a read of
// the run fetches it again and reports them.
func (r *Reader) Prefetch(object string, run Run) {
	k := runKey{object, run}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.cache.has(k) || r.flights[k] != nil || !r.cache.fits(run.Length) {
		return
	}
	select {
	case r.slots <- struct{}{}:
	default:
		r.dropped.Add(1)
		return
	}
	r.prefetches.Add(1)
	r.startLocked(k, true)
}

// startLocked starts fetching k; r.mu is held and r is not closed, so
// Close waits for the goroutine. A prefetch holds a slot, which the
// goroutine returns.
func (r *Reader) startLocked(k runKey, prefetch bool) *flight {
	ctx, cancel := context.WithCancel(r.ctx)
	f := &flight{done: make(chan struct{}), prefetch: prefetch, cancel: cancel}
	r.flights[k] = f
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if prefetch {
			defer func() { <-r.slots }()
		}
		r.fetch(ctx, k, f)
	}()
	return f
}

// fetch reads and decodes k, caches the entries if they are sound, and
// hands the outcome to f's waiters.
func (r *Reader) fetch(ctx context.Context, k runKey, f *flight) {
	defer f.cancel()
	data, err := r.store.ReadRange(ctx, k.object, k.run.Offset, k.run.Length)
	var entries []raftpb.Entry
	if err == nil {
		r.bytesRead.Add(uint64(len(data)))
		entries, err = DecodeRun(k.object, data, k.run)
	}
	r.mu.Lock()
	if r.flights[k] == f {
		delete(r.flights, k)
	}
	if err == nil && !r.closed {
		r.cache.add(k, entries)
	}
	r.mu.Unlock()
	f.entries, f.err = entries, err
	close(f.done)
}

// Stats returns the Reader's counters.
func (r *Reader) Stats() ReaderStats {
	r.mu.Lock()
	cached := r.cache.size
	r.mu.Unlock()
	return ReaderStats{
		Hits: r.hits.Load(), Misses: r.misses.Load(), BytesRead: r.bytesRead.Load(),
		Prefetches: r.prefetches.Load(), PrefetchDrops: r.dropped.Load(),
		CachedBytes: cached,
	}
}

// Close cancels the fetches in progress, waits for their goroutines and
// empties the cache. Reads after Close fail with ErrClosed. The Store is
// the caller's to close.
func (r *Reader) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	r.cache = newLRU(r.cache.max)
	r.mu.Unlock()
	return nil
}
