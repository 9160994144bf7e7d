package shard

// KeyHash returns the hash of an event's key that the shard records for
// each event it holds (see State.KeyHashOf), so that a reader that only
// needs to tell keys apart, such as a pull consumer's index of its keys'
// queues, need not read the event from the log.
//
// Hashes of different keys may be equal. A reader may use them only
// where taking two keys for one is safe: two keys' events serialized as
// if they were one key's keep each key's order. With 32 bits, a shard
// holding the events of a million distinct keys has about a hundred
// pairs of them hashed alike; one holding a thousand keys, almost surely
// none.
//
// It is FNV-1a of the key, whose 64 bits are then mixed (the finalizer
// of MurmurHash3) before the upper half is kept. The mixing matters: the
// keys of one shard all have the same FNV-1a hash modulo the topic's
// number of shards (see topic.ShardFor), which with a power of two fixes
// that hash's low bits for every key of the shard. The hash is part of
// the snapshot format: it must not change.
func KeyHash(key string) uint32 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return uint32(h >> 32)
}

// A keyList holds the KeyHash of each event from some offset on, in
// offset order. Like a pendingList it is appended to at the back and
// consumed from the front, in chunks of chunkLen entries, but its entries
// are never written in place: a frozen copy shares every chunk with the
// list and needs no copy on write.
type keyList struct {
	chunks []*[chunkLen]uint32
	start  int // position of entry 0 in chunks[0]
	n      int // number of entries
	drops  int // chunks dropped since chunks was last copied; see dropFront
}

// len returns the number of entries.
func (l *keyList) len() int { return l.n }

// at returns entry i, which must be below len.
func (l *keyList) at(i int) uint32 {
	p := l.start + i
	return l.chunks[p>>chunkShift][p&chunkMask]
}

// push appends an entry. Entry p is past the end of every frozen copy,
// so it is written in place even in a chunk they share.
func (l *keyList) push(h uint32) {
	p := l.start + l.n
	k := p >> chunkShift
	if k == len(l.chunks) {
		l.chunks = append(l.chunks, new([chunkLen]uint32))
	}
	l.chunks[k][p&chunkMask] = h
	l.n++
}

// dropFront drops the first k entries, which must be at most len. Like
// pendingList's, it keeps a partly used last chunk even when the list is
// empty, so that a queue that keeps draining does not allocate a chunk
// per append.
func (l *keyList) dropFront(k int) {
	l.start += k
	l.n -= k
	if d := l.start >> chunkShift; d > 0 {
		clear(l.chunks[:d]) // let go of the arrays
		l.chunks = dropFront(l.chunks, &l.drops, d)
		l.start &= chunkMask
	}
}

// segment returns the entries in chunk ci.
func (l *keyList) segment(ci int) []uint32 {
	from := 0
	if ci == 0 {
		from = l.start
	}
	to := min(chunkLen, l.start+l.n-ci<<chunkShift)
	return l.chunks[ci][from:max(from, to)]
}

// freeze returns a copy of the list that stays as it is however the list
// changes; it must not be changed itself.
func (l *keyList) freeze() keyList {
	f := *l
	f.chunks = append([]*[chunkLen]uint32(nil), l.chunks...)
	return f
}

// KeyHashOf returns the KeyHash of the key of the event at offset, if the
// shard recorded it: for every offset from Earliest on that has been
// assigned, except, in a state restored from a snapshot written before
// keys were recorded (version 6 or earlier), the offsets that snapshot
// held. Their keys are in the log.
func (s *State) KeyHashOf(offset uint64) (uint32, bool) {
	if offset < s.keysFrom || offset >= s.nextOffset {
		return 0, false
	}
	return s.keys.at(int(offset - s.keysFrom)), true
}

// pushKeys records the key hashes of events appended at the next offsets.
func (s *State) pushKeys(events []Event) {
	for i := range events {
		s.keys.push(KeyHash(events[i].Key))
	}
}

// dropKeys drops the key hashes of the events below start, the shard's
// logStart: it holds those events no more.
func (s *State) dropKeys(start uint64) {
	if start <= s.keysFrom {
		return
	}
	k := min(start, s.nextOffset) - s.keysFrom
	s.keys.dropFront(int(k))
	s.keysFrom += k
}
