package consume

import (
	"container/list"
	"sync"
	"time"

	"herald/internal/shard"
)

// DefaultEntryCacheBytes is the bound of a node's EntryCache: enough for
// the entries a few hundred shards' fetches revisit as they drain a
// backlog spread over many keys, little next to the memory of a node that
// leads that many.
const DefaultEntryCacheBytes = 64 << 20

// An EntryCache holds the decoded commands of log entries that fetches
// read, of every shard of a node, the least recently used dropped first
// beyond a bound on their size.
//
// A log entry holds a batch of events, often of many keys; a fetch hands
// out runs of a few keys' events, so, with many keys, the events of one
// entry go out in many fetches, and each of them would read and decode
// the entry again. Only the entries of committed events are read, and
// those never change, so nothing in the cache is ever stale: it needs no
// invalidation. A shard's entries are dropped all the same when its state
// is restored from a snapshot, and when the node stops leading it (see
// Leases), where its fetches no longer run: they would only hold memory.
//
// The events of a cached command are shared by every fetch that reads
// them: their payloads must not be modified.
type EntryCache struct {
	mu      sync.Mutex
	max     int
	size    int
	entries map[entryKey]*list.Element // of *cachedEntry, in lru
	lru     list.List                  // the most recently used first
	// floors holds, for each shard with entries cached, an index below
	// which it has none: where dropBelow starts looking.
	floors map[*Leases]uint64
}

// An entryKey names a log entry of a shard: the shard is known by its
// Leases, which live as long as its runtime on the node.
type entryKey struct {
	shard *Leases
	index uint64
}

type cachedEntry struct {
	key  entryKey
	cmd  shard.Command
	size int
}

// NewEntryCache returns an empty cache of entries of up to maxBytes in all
// (as commandSize counts them).
func NewEntryCache(maxBytes int) *EntryCache {
	return &EntryCache{max: maxBytes, entries: make(map[entryKey]*list.Element), floors: make(map[*Leases]uint64)}
}

// get returns the command of the entry at k, if cached.
func (c *EntryCache) get(k entryKey) (shard.Command, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok {
		return shard.Command{}, false
	}
	c.lru.MoveToFront(e)
	return e.Value.(*cachedEntry).cmd, true
}

// put caches cmd, the command of the entry at k, and drops the least
// recently used entries beyond the bound; or, unless evict, caches it
// only if it fits without. A command larger than the whole bound is not
// cached.
func (c *EntryCache) put(k entryKey, cmd shard.Command, evict bool) {
	size := commandSize(cmd)
	c.mu.Lock()
	defer c.mu.Unlock()
	if size > c.max || !evict && c.size+size > c.max {
		return
	}
	if _, ok := c.entries[k]; ok {
		return // read by another fetch meanwhile: the same command
	}
	c.entries[k] = c.lru.PushFront(&cachedEntry{key: k, cmd: cmd, size: size})
	c.size += size
	if f, ok := c.floors[k.shard]; !ok || k.index < f {
		c.floors[k.shard] = k.index
	}
	for c.size > c.max {
		c.remove(c.lru.Back())
	}
}

// dropBelow forgets the entries of the shard of l below index: no
// subscription has an event in them left to read (shard.State's
// CompactIndex), so they only take room from the entries still to be
// read. Each index is looked at once, from the shard's floor up, and the
// floor moves to index: its cost is that of the log entries the shard's
// subscriptions passed.
func (c *EntryCache) dropBelow(l *Leases, index uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.floors[l]
	if !ok || f >= index {
		return
	}
	for i := f; i < index; i++ {
		if e, ok := c.entries[entryKey{l, i}]; ok {
			c.remove(e)
		}
	}
	c.floors[l] = index
}

// drop forgets every entry of the shard of l.
func (c *EntryCache) drop(l *Leases) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.floors, l)
	for e := c.lru.Front(); e != nil; {
		next := e.Next()
		if e.Value.(*cachedEntry).key.shard == l {
			c.remove(e)
		}
		e = next
	}
}

// remove forgets e; c.mu is held.
func (c *EntryCache) remove(e *list.Element) {
	ce := c.lru.Remove(e).(*cachedEntry)
	delete(c.entries, ce.key)
	c.size -= ce.size
}

// Bytes returns the size of the entries cached.
func (c *EntryCache) Bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

// entryOverhead is about what a cached entry costs besides its events:
// the map's slot, the list's element and the cachedEntry.
const entryOverhead = 200

// eventOverhead is about what a decoded event costs besides the bytes of
// its key, payload and headers: the Event itself, its headers' slice.
const eventOverhead = 80

// commandSize returns about how many bytes cmd holds in memory. Its
// payloads alias the entry's encoded data, which they keep alive, and
// whose size they make most of.
func commandSize(cmd shard.Command) int {
	n := entryOverhead
	for _, ev := range cmd.Events {
		n += eventOverhead + len(ev.Key) + len(ev.Payload)
		for _, h := range ev.Headers {
			n += 32 + len(h.Name) + len(h.Value)
		}
	}
	return n
}

// An entryReader reads the log entries of one read of a shard: through
// the node's EntryCache if the shard has one, and else, or for the
// entries a read does not cache, from the log. Every read goes in offset
// order, so the events of one entry come one after the other: the reader
// keeps the entry it read last, which spares those events a look in the
// cache (a lock, a map) or another read of the log.
type entryReader struct {
	g      Group
	shared *EntryCache // nil: none
	shard  *Leases
	// evict has the entries read pushed out others from shared, the
	// least recently used. A read far ahead of the fetches, such as the
	// index's scan of a backlog whose keys the shard did not record (see
	// Shard.pendingKeys), does not: it would push out the
	// entries the fetches are about to read again. It caches those it
	// reads while there is room, the oldest first, which the fetches
	// read first.
	evict bool
	// last is the command of the entry at lastIndex, if read is set.
	last      shard.Command
	lastIndex uint64
	read      bool
}

// entries returns a reader of s's log entries; evict says whether those
// it reads may push others out of the node's cache.
func (s Shard) entries(evict bool) *entryReader {
	r := &entryReader{g: s.Group, evict: evict}
	if s.Leases != nil && s.Leases.entries != nil {
		r.shared, r.shard = s.Leases.entries, s.Leases
	}
	return r
}

// command returns the command of the entry at l.index, which stays the
// reader's until it reads another entry.
func (r *entryReader) command(l location) (*shard.Command, error) {
	if !r.read || r.lastIndex != l.index {
		cmd, err := r.load(l)
		if err != nil {
			return nil, err
		}
		r.last, r.lastIndex, r.read = cmd, l.index, true
	}
	return &r.last, nil
}

// load returns the command of the entry at l.index from the cache, or
// else from the log, caching it.
func (r *entryReader) load(l location) (shard.Command, error) {
	k := entryKey{r.shard, l.index}
	if r.shared != nil {
		if cmd, ok := r.shared.get(k); ok {
			return cmd, nil
		}
	}
	cmd, err := r.g.Entry(l.offset, l.index)
	if err != nil {
		return shard.Command{}, err
	}
	if r.shared != nil {
		r.shared.put(k, cmd, r.evict)
	}
	return cmd, nil
}

// event returns the event at l and its publish time; ok is false if its
// entry has no such slot.
func (r *entryReader) event(l location) (_ shard.Event, _ time.Time, ok bool, _ error) {
	cmd, err := r.command(l)
	if err != nil {
		return shard.Event{}, time.Time{}, false, err
	}
	if l.slot >= len(cmd.Events) {
		return shard.Event{}, time.Time{}, false, nil
	}
	return cmd.Events[l.slot], time.Unix(0, cmd.Time), true, nil
}
