package tier

import (
	"container/list"

	"go.etcd.io/raft/v3/raftpb"
)

// runKey names a run of an object. It is the whole reference, not just
// the byte range, so that a wrong reference to cached bytes is checked by
// DecodeRun like any other rather than served from the cache.
type runKey struct {
	object string
	run    Run
}

// lru holds decoded runs, bounded by the sum of the runs' Length (their
// size in the object, which tracks their decoded size). It is not safe
// for concurrent use.
type lru struct {
	max   int64
	size  int64
	order *list.List // of *lruItem, most recently used first
	items map[runKey]*list.Element
}

type lruItem struct {
	key     runKey
	entries []raftpb.Entry
}

func newLRU(max int64) *lru {
	return &lru{max: max, order: list.New(), items: make(map[runKey]*list.Element)}
}

// get returns the entries of key and marks them used.
func (c *lru) get(k runKey) ([]raftpb.Entry, bool) {
	e, ok := c.items[k]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*lruItem).entries, true
}

func (c *lru) has(k runKey) bool {
	_, ok := c.items[k]
	return ok
}

// fits reports whether a run of length bytes may be cached at all.
func (c *lru) fits(length int64) bool { return length <= c.max }

// add caches entries under k, evicting the least recently used runs to
// stay within max. A run larger than max is not cached.
func (c *lru) add(k runKey, entries []raftpb.Entry) {
	if !c.fits(k.run.Length) || c.has(k) {
		return
	}
	c.items[k] = c.order.PushFront(&lruItem{key: k, entries: entries})
	c.size += k.run.Length
	for c.size > c.max {
		last := c.order.Back()
		it := c.order.Remove(last).(*lruItem)
		delete(c.items, it.key)
		c.size -= it.key.run.Length
	}
}
