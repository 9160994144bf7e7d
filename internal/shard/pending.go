package shard

import "slices"

// Entries of a pendingList are kept in chunks of chunkLen. A shard with
// anything pending holds at least one chunk (4 KiB of sizes), and a node
// may hold tens of thousands of shards: small chunks keep a short queue
// small, while a queue of a million events is still only 2,000 chunks.
const (
	chunkShift = 9
	chunkLen   = 1 << chunkShift
	chunkMask  = chunkLen - 1
)

// A pendingList holds, for each offset from the head to the next offset,
// the event's Size (or acked) and its failed attempts. It is appended to
// at the back and consumed from the front, like a slice under dropFront,
// and its entries are also written in place: an event acknowledged or
// dead-lettered out of order, an attempt recorded.
//
// Its entries live in fixed-size chunks so that a snapshot can share them
// instead of copying them: freeze returns a read-only copy of the list
// that costs one chunk descriptor per chunkLen entries, and from then on
// the list copies a chunk before it first writes an existing entry of it
// (copy on write). Appends need no copy: they write entries past the end
// of every frozen copy, which none of them reads. Chunks dropped from the
// front are never written again.
type pendingList struct {
	chunks []pendingChunk
	start  int    // position of entry 0 in chunks[0]
	n      int    // number of entries
	natt   int    // entries with a non-zero attempt count
	gen    uint64 // bumped by freeze; chunks of an older generation are shared
	drops  int    // chunks dropped since chunks was last copied; see dropFront
}

// A pendingChunk describes chunkLen consecutive entries of a pendingList.
// The descriptor belongs to one list (a frozen copy has its own); the
// arrays it points to may be shared with frozen copies, which is the case
// unless gen is the list's current generation.
type pendingChunk struct {
	size *[chunkLen]int64  // each event's Size, or acked
	att  *[chunkLen]uint32 // each event's failed attempts; nil if none has any
	natt int               // non-zero entries of att
	gen  uint64            // the list's generation when size and att were made
}

// len returns the number of entries.
func (l *pendingList) len() int { return l.n }

// locate returns the chunk and the index in it of entry i.
func (l *pendingList) locate(i int) (*pendingChunk, int) {
	p := l.start + i
	return &l.chunks[p>>chunkShift], p & chunkMask
}

// size returns the size of entry i, which must be below len.
func (l *pendingList) size(i int) int64 {
	p := l.start + i
	return l.chunks[p>>chunkShift].size[p&chunkMask]
}

// ack marks entry i, which must be below len, acked, and returns its size
// before: acked if it was already.
func (l *pendingList) ack(i int) int64 {
	c, j := l.locate(i)
	size := c.size[j]
	if size != acked {
		if c.gen != l.gen {
			l.own(c)
		}
		c.size[j] = acked
	}
	return size
}

// own makes c's arrays private to the list, copying them if a frozen copy
// may be reading them. It is the slow path of writes, kept out of line so
// that their fast paths stay small.
//
//go:noinline
func (l *pendingList) own(c *pendingChunk) {
	size := new([chunkLen]int64)
	*size = *c.size
	c.size = size
	if c.att != nil {
		att := new([chunkLen]uint32)
		*att = *c.att
		c.att = att
	}
	c.gen = l.gen
}

// push appends an entry.
func (l *pendingList) push(size int64) {
	p := l.start + l.n
	k := p >> chunkShift
	if k == len(l.chunks) {
		l.chunks = append(l.chunks, pendingChunk{size: new([chunkLen]int64), gen: l.gen})
	}
	// No copy even if the chunk is shared: entry p is past the end of
	// every frozen copy.
	l.chunks[k].size[p&chunkMask] = size
	l.n++
}

// leadingAcked returns the number of acked entries at the front.
func (l *pendingList) leadingAcked() int {
	// Positions, rather than entries, make this loop the simplest.
	p, end := l.start, l.start+l.n
	for p < end {
		c := l.chunks[p>>chunkShift].size
		for stop := min(end, (p|chunkMask)+1); p < stop; p++ {
			if c[p&chunkMask] != acked {
				return p - l.start
			}
		}
	}
	return l.n
}

// dropFront drops the first k entries, which must have no attempts.
func (l *pendingList) dropFront(k int) {
	l.start += k
	l.n -= k
	if l.start >= chunkLen {
		l.dropChunks()
	}
}

// dropChunks drops the chunks before the one holding entry 0. It keeps a
// partly used last chunk even when the list is empty, so that a queue
// that keeps draining does not allocate a chunk per append. Like own, it
// is kept out of line for its caller's sake.
//
//go:noinline
func (l *pendingList) dropChunks() {
	d := l.start >> chunkShift
	clear(l.chunks[:d]) // let go of the arrays
	l.chunks = dropFront(l.chunks, &l.drops, d)
	l.start &= chunkMask
}

// segment returns the sizes of the entries in chunk ci.
func (l *pendingList) segment(ci int) []int64 {
	from, to := l.bounds(ci)
	return l.chunks[ci].size[from:to]
}

// bounds returns the range of positions in chunk ci that hold entries.
func (l *pendingList) bounds(ci int) (from, to int) {
	if ci == 0 {
		from = l.start
	}
	to = min(chunkLen, l.start+l.n-ci<<chunkShift)
	return from, max(from, to)
}

// attempts returns the failed attempts of entry i, which must be below len.
func (l *pendingList) attempts(i int) uint32 {
	c, j := l.locate(i)
	if c.att == nil {
		return 0
	}
	return c.att[j]
}

// setAttempts sets the failed attempts of entry i, which must be below len.
func (l *pendingList) setAttempts(i int, a uint32) {
	c, j := l.locate(i)
	var old uint32
	if c.att != nil {
		old = c.att[j]
	}
	switch {
	case old == a:
		return
	case a == 0 && c.natt == 1:
		// The chunk's last count goes: drop the array rather than copy it.
		c.att, c.natt = nil, 0
		l.natt--
		return
	}
	if c.gen != l.gen {
		l.own(c)
	}
	if c.att == nil {
		c.att = new([chunkLen]uint32)
	}
	c.att[j] = a
	switch {
	case old == 0:
		c.natt++
		l.natt++
	case a == 0:
		c.natt--
		l.natt--
	}
}

// eachAttempt calls f with the position, counted from the front, and
// count of every entry with failed attempts, in order.
func (l *pendingList) eachAttempt(f func(i int, a uint32)) {
	if l.natt == 0 {
		return
	}
	for ci := range l.chunks {
		c := &l.chunks[ci]
		if c.natt == 0 {
			continue
		}
		from, to := l.bounds(ci)
		base := ci<<chunkShift - l.start
		for j, a := range c.att[from:to] {
			if a != 0 {
				f(base+from+j, a)
			}
		}
	}
}

// freeze returns a copy of the list that shares its entries and stays as
// it is however the list changes; it must not be changed itself. Its cost
// is one chunk descriptor per chunkLen entries.
func (l *pendingList) freeze() pendingList {
	f := *l
	f.chunks = slices.Clone(l.chunks)
	l.gen++
	return f
}
