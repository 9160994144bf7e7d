package consume

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
	"time"

	"herald/internal/shard"
)

// A keyIndex is what Shard.Fetch reads instead of the queue: for each
// key, its pending events in offset order, and which keys may hand some
// out. A fetch leases a run of a key's events from its first pending one
// (its front), and a key whose front is leased is held by the consumer
// that has it, so a fetch needs, in offset order of their fronts, the keys
// whose front is not leased: the ready heap. Keys whose front is leased
// wait in the leased heap, by lease expiry (a run's events share one),
// and go back to the ready heap when it passes or when the front's lease
// ends early (a nack, an ack); the key's next front, if leased in the
// same run, holds it again. A fetch so costs O(log keys) per key it
// visits, and O(1) per event of a run, whatever the backlog behind them.
//
// Keys are told apart by the hash the shard records of each event's key
// (shard.KeyHash): two keys hashed alike share a queue, which holds back
// each for the other but keeps the order of both.
//
// The index is derived from the shard's state, and lives beside the pull
// leases it is read with, in this node's memory. It is extended lazily:
// each fetch first indexes the events appended since it last looked (at
// most MaxScan of them), so a new leader builds it from the head over its
// first fetches. It learns their keys from the shard's state, or, for the
// events of a snapshot that did not record keys, from the log. It is not
// told of acks, only of ended leases: an event acknowledged or
// dead-lettered stays in its key's queue until it reaches the front, where
// a fetch, which reads the shard's state, drops it. The hints it keeps
// (a key's place in a heap) may be stale, never wrong in the direction
// that matters: a key whose front can go out is always in the ready heap,
// or in the leased heap under an expiry that has passed.
//
// Memory: 8 bytes per indexed event (up to 3 times that while a queue's
// front is consumed, see dropOffsets), and per key with pending events
// about 120 bytes.
type keyIndex struct {
	keys   map[uint32]*keyQueue // by key hash
	ready  keyHeap              // by front offset
	leased keyHeap              // by until
	fronts map[uint64]*keyQueue // the keys in leased, by their front
	// indexed is the offset from which the log has not been read: every
	// pending event below it is in its key's queue.
	indexed uint64
	entries int // offsets held by all queues
	peak    int // most keys held since the maps were made
	// stale is set when the shard's state was replaced by a snapshot,
	// whose acks no lease heard of: the index is rebuilt before use.
	stale bool
}

// A keyQueue is one key's indexed events (or, should their hashes be
// equal, several keys').
type keyQueue struct {
	key     uint32   // shard.KeyHash of the key
	offsets []uint64 // ascending; offsets[0] is the front; done ones are dropped lazily
	dropped int      // see dropOffsets
	pos     int      // in its heap
	until   int64    // in the leased heap: when the front's lease expires (table.clock)
}

func newKeyIndex(indexed uint64) *keyIndex {
	return &keyIndex{
		keys: make(map[uint32]*keyQueue), fronts: make(map[uint64]*keyQueue), indexed: indexed,
		ready:  keyHeap{less: func(a, b *keyQueue) bool { return a.offsets[0] < b.offsets[0] }},
		leased: keyHeap{less: func(a, b *keyQueue) bool { return a.until < b.until }},
	}
}

// A keyedOffset is a pending event as the index knows it: its offset and
// the hash of its key.
type keyedOffset struct {
	offset uint64
	key    uint32 // shard.KeyHash
}

// add indexes pending events found from x.indexed on, in offset order,
// and moves x.indexed to next.
func (x *keyIndex) add(events []keyedOffset, next uint64) {
	for _, e := range events {
		if e.offset < x.indexed {
			panic(fmt.Sprintf("consume: offset %d indexed again (index at %d)", e.offset, x.indexed))
		}
		k, ok := x.keys[e.key]
		if !ok {
			k = &keyQueue{key: e.key}
			x.keys[k.key] = k
			x.peak = max(x.peak, len(x.keys))
		}
		k.offsets = append(k.offsets, e.offset)
		x.entries++
		if !ok {
			heap.Push(&x.ready, k)
		}
	}
	x.indexed = max(x.indexed, next)
}

// wasteful reports whether most offsets the index holds are done, given
// the shard's head, or its maps have outgrown what they hold: then a new
// index costs less than it.
func (x *keyIndex) wasteful(head uint64) bool {
	live := int(x.indexed - min(head, x.indexed))
	return x.entries > 2*live+4096 || (len(x.keys) == 0 && x.peak > 4096)
}

// wake moves the keys whose leases expired by now to the ready heap.
func (x *keyIndex) wake(now int64) {
	for x.leased.Len() > 0 && x.leased.items[0].until <= now {
		k := x.leased.items[0]
		heap.Pop(&x.leased)
		delete(x.fronts, k.offsets[0])
		heap.Push(&x.ready, k)
	}
}

// released tells the index that the lease of the event at offset ended
// before it expired: if it held back a key, the key is ready again.
func (x *keyIndex) released(offset uint64) {
	k, ok := x.fronts[offset]
	if !ok {
		return
	}
	delete(x.fronts, offset)
	heap.Remove(&x.leased, k.pos)
	heap.Push(&x.ready, k)
}

// hold moves k, the top of the ready heap, to the leased heap: its front
// is leased until then.
func (x *keyIndex) hold(k *keyQueue, until int64) {
	heap.Pop(&x.ready)
	k.until = until
	heap.Push(&x.leased, k)
	x.fronts[k.offsets[0]] = k
}

// settle drops the done events at the front of k, the top of the ready
// heap, and reports whether k's front is where the heap has it: if not,
// k has moved within the heap, or left the index with nothing pending.
func (x *keyIndex) settle(k *keyQueue, c shard.Cursor) bool {
	n := 0
	for n < len(k.offsets) && c.IsAcked(k.offsets[n]) {
		n++
	}
	if n == 0 {
		return true
	}
	x.dropOffsets(k, n)
	if len(k.offsets) == 0 {
		heap.Pop(&x.ready)
		delete(x.keys, k.key)
	} else {
		heap.Fix(&x.ready, 0)
	}
	return false
}

// dropOffsets drops the first n offsets of k. Reslicing alone would keep
// them in memory as long as appends fit, so once the dropped outnumber
// the held twice over, the held move to a new array; each copy costs less
// than the drops before it.
func (x *keyIndex) dropOffsets(k *keyQueue, n int) {
	x.entries -= n
	k.offsets = k.offsets[n:]
	k.dropped += n
	if k.dropped >= max(2*len(k.offsets), 16) {
		k.offsets = append([]uint64(nil), k.offsets...)
		k.dropped = 0
	}
}

// keyHeap is a heap of keys that keeps each key's position in it.
type keyHeap struct {
	items []*keyQueue
	less  func(a, b *keyQueue) bool
}

func (h *keyHeap) Len() int           { return len(h.items) }
func (h *keyHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }

func (h *keyHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].pos = i
	h.items[j].pos = j
}

func (h *keyHeap) Push(k any) {
	k.(*keyQueue).pos = len(h.items)
	h.items = append(h.items, k.(*keyQueue))
}

func (h *keyHeap) Pop() any {
	n := len(h.items) - 1
	k := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	return k
}

// A pick is an event a fetch leased, found in the index: its lease, and
// where the event is in the log. It holds no event, which the fetch reads
// after: picks are sorted, and a Lease is thrice their size.
type pick struct {
	offset, number uint64 // of the event, of its lease
	index          uint64 // of the log entry holding the event
	slot           int
	attempt        uint32
}

// Spread is how many consumers a fetch leaves room for: it takes runs of
// up to ceil(max / ceil(keys/Spread)) events, so that when the keys' runs
// are long enough to fill its batch it holds about a quarter of the keys,
// and three more consumers fetching as much find keys of their own. With
// fewer keys' runs to fill it, it takes more keys; with more keys than
// its batch, it takes one event of each of the oldest, as before runs.
const Spread = 4

// runCap returns the longest run a fetch of n events takes of one key
// when the index holds keys keys (see Spread).
func runCap(n, keys int) int {
	share := max(1, (keys+Spread-1)/Spread)
	return (n + share - 1) / share // 1 when share >= n
}

// handOut leases up to max events until then, as the shard's state m, and
// c, the subscription's cursor in it, are now: visiting the ready keys in
// offset order of their fronts, it leases of each a run of its next
// pending events, up to runCap, ending before an event leased to someone
// else. It returns them in offset order. It runs in a View of the shard,
// so that it sees every ack whose lease Leases.Applied has dropped; the
// caller holds t.mu.
func (t *table) handOut(m *shard.Machine, c shard.Cursor, max int, now, then time.Time) []pick {
	x := t.index
	nowNs := t.clock(now)
	x.wake(nowNs)
	limit := runCap(max, len(x.keys))
	out := make([]pick, 0, min(max, x.entries))
	for len(out) < max && x.ready.Len() > 0 {
		k := x.ready.items[0]
		if !x.settle(k, c) {
			continue
		}
		if e := t.events[k.offsets[0]]; e.leased(nowNs) {
			x.hold(k, e.until)
			continue
		}
		out = t.leaseRun(m, c, k, out, min(limit, max-len(out)), nowNs, then)
		x.hold(k, t.clock(then))
	}
	slices.SortFunc(out, func(a, b pick) int { return cmp.Compare(a.offset, b.offset) })
	return out
}

// leaseRun leases until then a run of up to n pending events of k, whose
// front is not leased, and appends them to out: its events in order from
// the front, passing over those done, ending before one leased beyond
// now (held for an ack, or by a lease that outlived its run's); leasing
// it would hand out the key's later events while an earlier one is out.
// The caller holds t.mu.
func (t *table) leaseRun(m *shard.Machine, c shard.Cursor, k *keyQueue, out []pick, n int, now int64, then time.Time) []pick {
	// The run's offsets and numbers in one allocation, of the size the
	// run can reach, rather than grown by appends event by event.
	size := min(n, len(k.offsets))
	buf := make([]uint64, 2*size)
	r := &run{offsets: buf[:0:size], numbers: buf[size:size]}
	for _, o := range k.offsets {
		if len(r.offsets) == n {
			break
		}
		if c.IsAcked(o) {
			continue
		}
		if t.events[o].leased(now) {
			break
		}
		index, slot, ok := m.Locate(o)
		if !ok {
			panic(fmt.Sprintf("consume: pending offset %d has no log entry", o))
		}
		number, attempts := t.lease(o, then, r, len(r.offsets))
		r.offsets = append(r.offsets, o)
		r.numbers = append(r.numbers, number)
		out = append(out, pick{offset: o, number: number, index: index, slot: slot, attempt: attempts})
	}
	return out
}
