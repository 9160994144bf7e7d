package consume

import (
	"container/heap"
	"fmt"
	"time"

	"herald/internal/delivery"
	"herald/internal/shard"
)

// A keyIndex is what Shard.Fetch reads instead of the queue: for each
// key, its pending events in offset order, and which keys may hand one
// out. Only a key's first pending event (its front) may be leased, so a
// fetch needs, in offset order of their fronts, the keys whose front is
// not leased: the ready heap. Keys whose front is leased wait in the
// leased heap, by lease expiry, and go back to the ready heap when it
// passes or when their lease ends early (a nack, an ack). A fetch so costs
// O(log keys) per key it visits, whatever the backlog behind them.
//
// The index is derived from the shard's log and state, and lives beside
// the pull leases it is read with, in this node's memory. It is extended
// lazily: each fetch first reads the events appended since it last looked
// (at most MaxScan of them), so a new leader builds it from the head over
// its first fetches, and every event is read from the log once. It is not
// told of acks, only of ended leases: an event acknowledged or
// dead-lettered stays in its key's queue until it reaches the front, where
// a fetch, which reads the shard's state, drops it. The hints it keeps
// (a key's place in a heap) may be stale, never wrong in the direction
// that matters: a key whose front can go out is always in the ready heap,
// or in the leased heap under an expiry that has passed.
//
// Memory: 8 bytes per indexed event (up to 3 times that while a queue's
// front is consumed, see dropOffsets), and per key with pending events
// about 120 bytes and its name.
type keyIndex struct {
	keys   map[string]*keyQueue
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

// A keyQueue is one key's indexed events.
type keyQueue struct {
	key     string
	offsets []uint64 // ascending; offsets[0] is the front; done ones are dropped lazily
	dropped int      // see dropOffsets
	pos     int      // in its heap
	until   int64    // in the leased heap: when the front's lease expires, Unix ns
}

func newKeyIndex(indexed uint64) *keyIndex {
	return &keyIndex{
		keys: make(map[string]*keyQueue), fronts: make(map[uint64]*keyQueue), indexed: indexed,
		ready:  keyHeap{less: func(a, b *keyQueue) bool { return a.offsets[0] < b.offsets[0] }},
		leased: keyHeap{less: func(a, b *keyQueue) bool { return a.until < b.until }},
	}
}

// add indexes pending events read from x.indexed on, in offset order, and
// moves x.indexed to next.
func (x *keyIndex) add(events []delivery.Event, next uint64) {
	for _, e := range events {
		if e.Offset < x.indexed {
			panic(fmt.Sprintf("consume: offset %d indexed again (index at %d)", e.Offset, x.indexed))
		}
		k, ok := x.keys[e.Event.Key]
		if !ok {
			k = &keyQueue{key: e.Event.Key}
			x.keys[k.key] = k
			x.peak = max(x.peak, len(x.keys))
		}
		k.offsets = append(k.offsets, e.Offset)
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

// A pick is an event a fetch leased, found in the index: the lease, and
// where its event is in the log.
type pick struct {
	lease Lease
	index uint64 // of the log entry holding the event
	slot  int
}

// handOut leases the fronts of up to max ready keys, in offset order,
// until then, as the shard's state m, and c, the subscription's cursor in
// it, are now. It runs in a View of the shard, so that it sees every ack
// whose lease Leases.Applied has dropped; the caller holds t.mu.
func (t *table) handOut(m *shard.Machine, c shard.Cursor, max int, now, then time.Time) []pick {
	x := t.index
	x.wake(now.UnixNano())
	var out []pick
	for len(out) < max && x.ready.Len() > 0 {
		k := x.ready.items[0]
		if !x.settle(k, c) {
			continue
		}
		front := k.offsets[0]
		if u, ok := t.until[front]; ok && u.After(now) {
			x.hold(k, u.UnixNano())
			continue
		}
		index, slot, ok := m.Locate(front)
		if !ok {
			panic(fmt.Sprintf("consume: pending offset %d has no log entry", front))
		}
		number := t.lease(front, then)
		x.hold(k, then.UnixNano())
		out = append(out, pick{Lease{Offset: front, Number: number, Attempt: t.attempts[front]}, index, slot})
	}
	return out
}
