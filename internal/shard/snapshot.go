package shard

import (
	"encoding/binary"
	"math"
	"runtime"
	"slices"
)

// snapshotVersion is the first byte of the snapshots MarshalBinary
// writes. Version 7 added the key hashes of the events held (see
// KeyHashOf) at the end; version 6 snapshots are read as having recorded
// none, and their readers read the keys of the events they hold from the
// log. Version 6 added the LRO (see tier.go) at the end; version 5
// snapshots are read as having nothing tiered. Version 5 added the
// cursors' replay counts and the retained events at the end; version 4
// snapshots are read as having no replays and no retention. Version 4
// added the subscriptions' cursors at the end; version 3 snapshots are
// read as having the default subscription alone. Version 3 added the
// de-duplication table; version 2 snapshots are read as having an empty
// one.
//
// A state that holds nothing versions 4 to 6 added (the default
// subscription alone, attached, with nothing skipped, excluded or
// replayed, no retention and nothing tiered) is written as version 3,
// without the key hashes version 7 added: the release before
// subscriptions can read it, so that until the first subscription (or
// retention, or tiering) a node of that release can still follow an
// upgraded leader, or the node be downgraded (docs/operations.md,
// Upgrading). The hashes are a cache of what the log holds: a state
// restored from such a snapshot reads the keys of the events it held from
// the log, as one restored from version 6 does. Any other state is
// written as version 7; versions 4 to 6 are only read.
const (
	snapshotVersion   = 7
	snapshotVersionV6 = 6
	snapshotVersionV5 = 5
	snapshotVersionV4 = 4
	snapshotVersionV3 = 3
	snapshotVersionV2 = 2
)

// MarshalBinary returns a snapshot of the state. Equal states produce
// equal bytes, so replicas can compare snapshots to detect divergence.
//
// The snapshot holds only metadata: its size grows with the number of
// pending events (one varint each per subscription, and a key hash of four
// bytes), runs, reservations, attempt counts
// and dead letters (whose reasons and errors are bounded by
// MaxDeadLetterText). Quantities that follow from others, such as byte
// totals, are recomputed on load rather than stored.
func (s *State) MarshalBinary() ([]byte, error) {
	size := 64 + len(s.runs)*8 + len(s.reservations)*12 + s.retained.len()*2 + s.keys.len()*4
	for c := range s.active {
		size += 32 + c.pending.len()*2 + c.pending.natt*4
		for i := range c.dead {
			size += 24 + len(c.dead[i].Reason) + len(c.dead[i].LastError)
		}
	}
	b := make([]byte, 0, size)
	v := byte(snapshotVersion)
	if !s.beyondV3() {
		v = snapshotVersionV3
	}
	b = append(b, v)
	b = binary.AppendUvarint(b, s.applied)
	b = binary.AppendUvarint(b, s.nextOffset)
	b = binary.AppendUvarint(b, s.def.head)
	b = binary.AppendUvarint(b, s.lastReservation)
	b = binary.AppendUvarint(b, s.def.deadLettered)
	b = binary.AppendUvarint(b, s.def.retried)

	// Reservations in id order, each id as the gap from the previous one.
	ids := make([]uint64, 0, len(s.reservations))
	for id := range s.reservations {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	var prevID uint64
	for _, id := range ids {
		r := s.reservations[id]
		b = binary.AppendUvarint(b, id-prevID)
		b = binary.AppendUvarint(b, uint64(r.bytes))
		b = binary.AppendUvarint(b, uint64(r.count))
		b = binary.AppendVarint(b, r.time)
		prevID = id
	}

	// Runs are contiguous, so only the first one's offset is stored.
	// Indexes and times are stored as deltas, which are small.
	b = binary.AppendUvarint(b, uint64(len(s.runs)))
	if len(s.runs) > 0 {
		b = binary.AppendUvarint(b, s.runs[0].first)
	}
	var prevIndex uint64
	var prevTime int64
	for _, r := range s.runs {
		b = binary.AppendUvarint(b, r.count)
		b = binary.AppendUvarint(b, r.index-prevIndex)
		b = binary.AppendVarint(b, int64(uint64(r.time)-uint64(prevTime)))
		prevIndex, prevTime = r.index, r.time
	}

	b = s.appendCursor(b, &s.def)
	b = s.appendDedup(b)
	if v == snapshotVersionV3 {
		return b, nil
	}
	b = s.appendSubscriptions(b)
	b = s.appendRetention(b)
	// Version 6: the LRO.
	b = binary.AppendUvarint(b, s.lro)
	return s.appendKeys(b), nil
}

// appendKeys appends what version 7 added: the number of key hashes, those
// of the events from the next offset less that number on, and each hash
// in four bytes, little-endian (they do not compress).
func (s *State) appendKeys(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(s.keys.len()))
	for ci := range s.keys.chunks {
		s.yieldBlock()
		for _, h := range s.keys.segment(ci) {
			b = binary.LittleEndian.AppendUint32(b, h)
		}
	}
	return b
}

// appendRetention appends what version 5 added: each cursor's replay
// count, the default subscription's first, then whether the shard
// retains, and if it does the first retained offset and one entry per
// offset from there to the next offset, as appendCursor writes them.
// The sizes of events cursors hold are written twice, in their cursors
// and here: only a shard with retention pays for it.
func (s *State) appendRetention(b []byte) []byte {
	b = binary.AppendUvarint(b, s.def.replayed)
	for _, c := range s.subs {
		b = binary.AppendUvarint(b, c.replayed)
	}
	if !s.retaining {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, s.retainFrom)
	for ci := range s.retained.chunks {
		s.yieldBlock()
		for _, size := range s.retained.segment(ci) {
			b = binary.AppendUvarint(b, uint64(size+1))
		}
	}
	return b
}

// beyondV3 reports whether the state holds anything a version 3 snapshot
// cannot: a subscription besides the default one, a detached default
// subscription, events the default one skipped, excluded or replayed,
// retention, or a tiered log.
func (s *State) beyondV3() bool {
	return len(s.subs) > 0 || s.detached || s.def.skipped != 0 || s.def.excluded != 0 || s.def.replayed != 0 || s.retaining ||
		s.lro != 0
}

// appendCursor appends what a cursor holds from its head on: its pending
// entries, their attempt counts and its dead letters.
func (s *State) appendCursor(b []byte, c *cursor) []byte {
	// One entry per offset in [head, nextOffset): 0 if done, else the
	// event's size plus one.
	for ci := range c.pending.chunks {
		s.yieldBlock()
		for _, size := range c.pending.segment(ci) {
			b = binary.AppendUvarint(b, uint64(size+1))
		}
	}
	b = c.appendAttempts(b)

	// Dead letters in offset order, offsets and indexes as gaps, times as
	// deltas.
	b = binary.AppendUvarint(b, uint64(len(c.dead)))
	prev := uint64(math.MaxUint64) // so that the first gap is the offset itself
	var prevIndex uint64
	var prevTime, prevPublish int64
	for i := range c.dead {
		d := &c.dead[i]
		b = binary.AppendUvarint(b, d.Offset-prev-1)
		b = binary.AppendUvarint(b, d.Index-prevIndex)
		b = binary.AppendUvarint(b, uint64(d.Slot))
		b = appendString(b, d.Reason)
		b = appendString(b, d.LastError)
		b = binary.AppendUvarint(b, uint64(d.Attempts))
		b = binary.AppendVarint(b, int64(uint64(d.Time)-uint64(prevTime)))
		b = binary.AppendVarint(b, int64(uint64(d.PublishTime)-uint64(prevPublish)))
		b = binary.AppendUvarint(b, uint64(d.size))
		prev, prevIndex, prevTime, prevPublish = d.Offset, d.Index, d.Time, d.PublishTime
	}
	return b
}

// appendSubscriptions appends what version 4 added: whether the default
// subscription was deleted, its counters that version 3 lacked, and the
// other subscriptions' cursors in id order, ids as gaps.
func (s *State) appendSubscriptions(b []byte) []byte {
	var detached byte
	if s.detached {
		detached = 1
	}
	b = append(b, detached)
	b = binary.AppendUvarint(b, s.def.skipped)
	b = binary.AppendUvarint(b, s.def.excluded)
	b = binary.AppendUvarint(b, uint64(len(s.subs)))
	var prevID uint64
	for _, c := range s.subs {
		b = binary.AppendUvarint(b, c.id-prevID)
		b = binary.AppendUvarint(b, c.head)
		b = binary.AppendUvarint(b, c.deadLettered)
		b = binary.AppendUvarint(b, c.retried)
		b = binary.AppendUvarint(b, c.skipped)
		b = binary.AppendUvarint(b, c.excluded)
		b = s.appendCursor(b, c)
		prevID = c.id
	}
	return b
}

// appendDedup appends the de-duplication table in the order it was
// recorded, which is offset order: each id, its offset as the gap from the
// previous one less one, and its time as a delta.
func (s *State) appendDedup(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s.dedup)))
	prev := uint64(math.MaxUint64)
	var prevTime int64
	for _, e := range s.dedup {
		b = appendString(b, e.id)
		b = binary.AppendUvarint(b, e.offset-prev-1)
		b = binary.AppendVarint(b, int64(uint64(e.time)-uint64(prevTime)))
		prev, prevTime = e.offset, e.time
	}
	return b
}

// appendAttempts appends the attempt counts in offset order: the first
// offset as the distance from the head, the others as the gap from the
// previous one, less one. (It is a function of its own so that the closure
// does not capture MarshalBinary's buffer, which would slow all of it.)
func (c *cursor) appendAttempts(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(c.pending.natt))
	prev := c.head - 1
	c.pending.eachAttempt(func(i int, a uint32) {
		o := c.head + uint64(i)
		b = binary.AppendUvarint(b, o-prev-1)
		b = binary.AppendUvarint(b, uint64(a))
		prev = o
	})
	return b
}

// SnapshotFunc captures the state as it is now, and returns a function
// that returns what MarshalBinary returns now: the same bytes however
// the state changes in the meantime. The function may run later, on
// another goroutine, concurrently with further use of s, and more than
// once.
//
// This lets a host capture a snapshot exactly at an applied index, on the
// goroutine that applies commands, without stopping to encode it: the
// capture costs one small descriptor per 4096 pending events, and after
// it the state copies memory it still shares with the capture (in blocks
// of 4096 events) as it first changes it. The capture holds on to memory
// the state has since dropped or replaced until the function is released.
//
// The function yields the processor between blocks of the lists that grow
// with the queue: encoding the state of a million pending events takes a
// few milliseconds, and on a machine of two processors a goroutine that
// holds one that long halves, meanwhile, the CPU of the goroutines that
// answer publishes (the Go scheduler preempts it only after 10 ms).
func (s *State) SnapshotFunc() func() ([]byte, error) {
	f := s.freeze()
	f.yield = runtime.Gosched
	return f.MarshalBinary
}

// yieldBlock calls s.yield, if set; the lists call it before each block
// of 4096 entries they encode.
func (s *State) yieldBlock() {
	if s.yield != nil {
		s.yield()
	}
}

// freeze returns a shallow copy of s that s does not change from now on,
// and that must not be changed itself. It shares with s everything that
// grows with the queue: see the comments on State's fields.
func (s *State) freeze() *State {
	f := *s
	f.def = s.def.freeze()
	f.subs = make([]*cursor, len(s.subs))
	for i, c := range s.subs {
		fc := c.freeze()
		f.subs[i] = &fc
	}
	f.dedupIndex = nil // MarshalBinary reads only the table
	f.retained = s.retained.freeze()
	f.keys = s.keys.freeze()
	s.resShared = true
	return &f
}

// UnmarshalBinary replaces the state with the snapshot in data, which
// must have been written by MarshalBinary. It checks the snapshot's
// internal consistency and rejects, with an error wrapping
// ErrInvalidSnapshot, anything that fails; s is then left unchanged.
func (s *State) UnmarshalBinary(data []byte) error {
	var t State
	d := decoder{buf: data, kind: ErrInvalidSnapshot}
	v := d.u8("version")
	if d.err == nil && (v < snapshotVersionV2 || v > snapshotVersion) {
		d.fail("unsupported version %d", v)
	}
	t.applied = d.uvarint("applied index")
	t.nextOffset = d.uvarint("next offset")
	t.def.head = d.uvarint("head")
	t.lastReservation = d.uvarint("last reservation")
	t.def.deadLettered = d.uvarint("dead-lettered count")
	t.def.retried = d.uvarint("retried count")
	if d.err == nil && t.def.head > t.nextOffset {
		d.fail("head %d beyond next offset %d", t.def.head, t.nextOffset)
	}
	t.decodeReservations(&d)
	t.decodeRuns(&d)
	t.decodeCursor(&d, &t.def)
	if v >= snapshotVersionV3 {
		t.decodeDedup(&d)
	}
	if v >= snapshotVersionV4 {
		t.decodeSubscriptions(&d)
	}
	if v >= snapshotVersionV5 {
		t.decodeRetention(&d)
	}
	if v >= snapshotVersionV6 {
		t.lro = d.uvarint("last reconciled log index")
		// An advance never goes beyond its own entry, so never beyond
		// what was applied.
		if d.err == nil && t.lro > t.applied {
			d.fail("last reconciled log index %d beyond applied index %d", t.lro, t.applied)
		}
	}
	for c := range t.active {
		t.checkCursor(&d, c)
	}
	t.checkRuns(&d)
	t.keysFrom = t.nextOffset // none recorded, unless version 7 says
	if v >= snapshotVersion {
		t.decodeKeys(&d)
	}
	d.end("snapshot")
	if d.err != nil {
		return d.err
	}
	*s = t
	return nil
}

// decodeCursor decodes what appendCursor appends, into c whose head is
// set.
func (t *State) decodeCursor(d *decoder, c *cursor) {
	t.decodePending(d, c)
	t.decodeAttempts(d, c)
	t.decodeDead(d, c)
}

// checkCursor checks a decoded cursor's counters against its entries:
// every offset is pending, acknowledged, skipped, dead-lettered or not
// the cursor's, and each dead letter held was dead-lettered once.
func (t *State) checkCursor(d *decoder, c *cursor) {
	if d.err != nil {
		return
	}
	if c.replayed > math.MaxUint64-t.nextOffset {
		d.fail("subscription %d: replay count %d out of range", c.id, c.replayed)
		return
	}
	done := t.nextOffset + c.replayed - uint64(c.pendingEvents)
	if c.deadLettered < uint64(len(c.dead)) || c.deadLettered > done || c.skipped > done-c.deadLettered || c.excluded > done-c.deadLettered-c.skipped {
		d.fail("subscription %d: %d events dead-lettered, %d skipped and %d excluded, with %d dead letters held and %d events done",
			c.id, c.deadLettered, c.skipped, c.excluded, len(c.dead), done)
	}
}

// decodeSubscriptions decodes what appendSubscriptions appends.
func (t *State) decodeSubscriptions(d *decoder) {
	detached := d.u8("default subscription state")
	t.def.skipped = d.uvarint("skipped count")
	t.def.excluded = d.uvarint("excluded count")
	if d.err == nil && detached > 1 {
		d.fail("default subscription state %d", detached)
	}
	t.detached = detached == 1
	if d.err == nil && t.detached && (t.def.head != t.nextOffset || t.def.excluded != t.nextOffset || len(t.def.dead) > 0 ||
		t.def.skipped != 0 || t.def.deadLettered != 0 || t.def.retried != 0) {
		d.fail("deleted default subscription holds events")
	}
	// A cursor takes at least eight bytes: six numbers and the counts of
	// its attempts and dead letters.
	n := d.count("subscription count", 8)
	if d.err != nil || n == 0 {
		return
	}
	t.subs = make([]*cursor, n)
	var id uint64
	for i := range t.subs {
		gap := d.uvarint("subscription id")
		c := &cursor{
			head:         d.uvarint("subscription head"),
			deadLettered: d.uvarint("subscription dead-lettered count"),
			retried:      d.uvarint("subscription retried count"),
			skipped:      d.uvarint("subscription skipped count"),
			excluded:     d.uvarint("subscription excluded count"),
		}
		if d.err != nil {
			return
		}
		if gap == 0 || gap > math.MaxUint64-id {
			d.fail("subscription ids out of order")
			return
		}
		id += gap
		c.id = id
		if c.head > t.nextOffset {
			d.fail("subscription %d: head %d beyond next offset %d", id, c.head, t.nextOffset)
			return
		}
		t.decodeCursor(d, c)
		t.subs[i] = c
	}
}

// decodeRetention decodes what appendRetention appends, once the
// cursors are known.
func (t *State) decodeRetention(d *decoder) {
	if d.err != nil {
		return // the cursors may be incomplete
	}
	t.def.replayed = d.uvarint("replay count")
	for _, c := range t.subs {
		c.replayed = d.uvarint("subscription replay count")
	}
	retaining := d.u8("retention state")
	if d.err != nil || retaining == 0 {
		return
	}
	if retaining > 1 {
		d.fail("retention state %d", retaining)
		return
	}
	t.retaining = true
	t.retainFrom = d.uvarint("first retained offset")
	if d.err != nil {
		return
	}
	if h := t.minHead(); t.retainFrom > h {
		d.fail("first retained offset %d beyond the lowest head %d", t.retainFrom, h)
		return
	}
	// Each entry takes at least a byte.
	if t.nextOffset-t.retainFrom > uint64(len(d.buf)) {
		d.fail("truncated retained events")
		return
	}
	for o := t.retainFrom; o < t.nextOffset; o++ {
		v := d.uvarint("retained event size")
		if d.err != nil {
			return
		}
		size := int64(acked)
		if v > 0 {
			if v-1 > math.MaxInt64 {
				d.fail("retained event size out of range")
				return
			}
			size = int64(v - 1)
		}
		t.retained.push(size)
	}
	// A cursor's pending event is retained with the same size, unless it
	// is a replayed dead letter's copy, which is not retained. Each cursor
	// is checked over its own pending entries, which were just decoded.
	for c := range t.active {
		for o := max(c.head, t.retainFrom); o < t.nextOffset; o++ {
			size := t.retained.size(int(o - t.retainFrom))
			if p := c.pending.size(int(o - c.head)); size != acked && p != acked && p != size {
				d.fail("retained event %d disagrees with subscription %d", o, c.id)
				return
			}
		}
	}
}

// decodeKeys decodes what appendKeys appends, once the cursors and the
// retention are known: the hashes may be those of the events from
// logStart on, or of fewer.
func (t *State) decodeKeys(d *decoder) {
	n := d.uvarint("key hash count")
	if d.err != nil {
		return
	}
	if n > t.nextOffset-t.logStart() {
		d.fail("%d key hashes for %d events held", n, t.nextOffset-t.logStart())
		return
	}
	if n > uint64(len(d.buf)/4) {
		d.fail("truncated key hashes")
		return
	}
	t.keysFrom = t.nextOffset - n
	for range n {
		t.keys.push(binary.LittleEndian.Uint32(d.buf))
		d.buf = d.buf[4:]
	}
}

// checkRuns checks that the runs cover exactly the offsets the shard
// holds, the first containing the first of them.
func (t *State) checkRuns(d *decoder) {
	if d.err != nil {
		return
	}
	h := t.logStart()
	if (len(t.runs) == 0) != (h == t.nextOffset) {
		d.fail("%d runs for %d pending offsets", len(t.runs), t.nextOffset-h)
		return
	}
	if len(t.runs) > 0 && (t.runs[0].first > h || t.runs[0].end() <= h) {
		d.fail("runs do not cover offsets [%d, %d)", h, t.nextOffset)
	}
}

func (t *State) decodeReservations(d *decoder) {
	// A reservation takes at least four bytes.
	n := d.count("reservation count", 4)
	if d.err != nil {
		return
	}
	t.reservations = make(map[uint64]reservation, n)
	var id uint64
	for range n {
		gap := d.uvarint("reservation id")
		r := reservation{
			bytes: d.int64("reservation bytes"),
			count: d.intValue("reservation event count"),
			time:  d.varint("reservation time"),
		}
		if d.err != nil {
			return
		}
		if gap == 0 || gap > t.lastReservation-id {
			d.fail("reservation id out of order or beyond %d", t.lastReservation)
			return
		}
		if r.bytes > math.MaxInt64-t.reservedBytes {
			d.fail("reserved bytes overflow")
			return
		}
		id += gap
		t.reservations[id] = r
		t.reservedBytes += r.bytes
	}
}

// intValue reads a non-negative int written with binary.AppendUvarint.
func (d *decoder) intValue(what string) int {
	x := d.uvarint(what)
	if x > math.MaxInt {
		d.fail("%s out of range", what)
		return 0
	}
	return int(x)
}

func (t *State) decodeRuns(d *decoder) {
	// A run takes at least three bytes.
	n := d.count("run count", 3)
	if d.err != nil {
		return
	}
	if n == 0 {
		return
	}
	t.runs = make([]run, n)
	next := d.uvarint("first offset")
	var index uint64
	var time int64
	for i := range t.runs {
		count := d.uvarint("run length")
		indexGap := d.uvarint("run index")
		time += d.varint("run time") // wraps, like the encoder's subtraction
		if d.err != nil {
			return
		}
		// Entries are applied in index order, at most up to applied.
		if count == 0 || count > math.MaxUint64-next || indexGap == 0 || indexGap > t.applied-index {
			d.fail("malformed run %d", i)
			return
		}
		index += indexGap
		t.runs[i] = run{first: next, count: count, index: index, time: time}
		next += count
	}
	// The runs must end at the next offset; checkRuns checks their
	// start once the cursors are known.
	if next != t.nextOffset {
		d.fail("runs end at offset %d, not at the next offset %d", next, t.nextOffset)
	}
}

func (t *State) decodePending(d *decoder, c *cursor) {
	if d.err != nil {
		return
	}
	// Each entry takes at least a byte.
	if t.nextOffset-c.head > uint64(len(d.buf)) {
		d.fail("truncated pending events")
		return
	}
	n := int(t.nextOffset - c.head)
	if n == 0 {
		return
	}
	// Fill whole chunks, counting in locals: t.pending.push and t's
	// counters would do, only slower.
	l := &c.pending
	l.chunks = make([]pendingChunk, 0, (n+chunkMask)>>chunkShift)
	limit := math.MaxInt64 - t.reservedBytes // pending bytes may not exceed
	var bytes, events int64
	for i := 0; i < n; i += chunkLen {
		sizes := new([chunkLen]int64)
		l.chunks = append(l.chunks, pendingChunk{size: sizes})
		for j := range sizes[:min(chunkLen, n-i)] {
			v := d.uvarint("event size")
			if d.err != nil {
				return
			}
			if v == 0 {
				if i+j == 0 {
					d.fail("event at head %d is acknowledged", c.head)
					return
				}
				sizes[j] = acked
				continue
			}
			size := v - 1
			if size > uint64(limit-bytes) {
				d.fail("pending bytes overflow")
				return
			}
			sizes[j] = int64(size)
			bytes += int64(size)
			events++
		}
	}
	l.n = n
	c.pendingBytes, c.pendingEvents = bytes, events
}

func (t *State) decodeAttempts(d *decoder, c *cursor) {
	// An entry takes at least two bytes.
	n := d.count("attempt count", 2)
	if d.err != nil || n == 0 {
		return
	}
	prev := c.head - 1
	for range n {
		gap := d.uvarint("attempt offset")
		a := d.uvarint("attempts")
		if d.err != nil {
			return
		}
		// Attempts are kept only for pending events, and only non-zero.
		if gap >= t.nextOffset-prev-1 || !c.isPending(prev+gap+1, t.nextOffset) {
			d.fail("attempts for an offset that is not pending")
			return
		}
		if a == 0 || a > math.MaxUint32 {
			d.fail("attempt count %d out of range", a)
			return
		}
		prev += gap + 1
		c.pending.setAttempts(int(prev-c.head), uint32(a))
	}
}

func (t *State) decodeDead(d *decoder, c *cursor) {
	// A dead letter takes at least nine bytes.
	n := d.count("dead letter count", 9)
	if d.err != nil || n == 0 {
		return
	}
	c.dead = make([]deadLetter, n)
	prev := uint64(math.MaxUint64) // wraps to 0 for the first gap
	var prevIndex, prevStart uint64
	var prevTime, prevPublish int64
	for i := range c.dead {
		gap := d.uvarint("dead letter offset")
		indexGap := d.uvarint("dead letter index")
		slot := d.intValue("dead letter slot")
		reason := d.bytes("dead letter reason")
		lastErr := d.bytes("dead letter error")
		attempts := d.uvarint("dead letter attempts")
		time := prevTime + d.varint("dead letter time") // wraps, like the encoder's subtraction
		publish := prevPublish + d.varint("dead letter publish time")
		size := d.uvarint("dead letter size")
		if d.err != nil {
			return
		}
		if gap >= t.nextOffset-prev-1 {
			d.fail("dead letter offsets out of order or beyond next offset %d", t.nextOffset)
			return
		}
		o := prev + gap + 1
		if indexGap > t.applied-prevIndex || prevIndex+indexGap == 0 {
			d.fail("dead letter %d: log index out of order or beyond applied index %d", o, t.applied)
			return
		}
		index := prevIndex + indexGap
		// The event's entry starts at offset o-slot: the same one as the
		// previous dead letter's if the index is the same, a later one
		// otherwise.
		if uint64(slot) > o {
			d.fail("dead letter %d: slot %d beyond its offset", o, slot)
			return
		}
		start := o - uint64(slot)
		if i > 0 && (index == prevIndex) != (start == prevStart) || i > 0 && index != prevIndex && start <= prev {
			d.fail("dead letter %d: entry %d, slot %d overlaps the previous one's", o, index, slot)
			return
		}
		// Where the runs still cover it, it must agree with them.
		if len(t.runs) > 0 && o >= t.runs[0].first {
			r := t.runOf(o)
			if index != r.index || start != r.first || publish != r.time || (o >= c.head && c.pending.size(int(o-c.head)) != acked) {
				d.fail("dead letter %d disagrees with the pending events", o)
				return
			}
		} else if len(t.runs) > 0 && index >= t.runs[0].index {
			d.fail("dead letter %d: log index %d not before the pending events'", o, index)
			return
		}
		if len(reason) > MaxDeadLetterText || len(lastErr) > MaxDeadLetterText {
			d.fail("dead letter %d: reason or error longer than %d bytes", o, MaxDeadLetterText)
			return
		}
		if attempts > math.MaxUint32 {
			d.fail("dead letter %d: attempt count out of range", o)
			return
		}
		if size > uint64(math.MaxInt64-c.pendingBytes-t.reservedBytes-c.deadBytes) {
			d.fail("dead letter bytes overflow")
			return
		}
		c.dead[i] = deadLetter{DeadLetter: DeadLetter{
			Offset: o, Index: index, Slot: slot,
			Reason: string(reason), LastError: string(lastErr),
			Attempts: uint32(attempts), Time: time, PublishTime: publish,
		}, size: int64(size)}
		c.deadBytes += int64(size)
		prev, prevIndex, prevStart, prevTime, prevPublish = o, index, start, time, publish
	}
}

func (t *State) decodeDedup(d *decoder) {
	// An entry takes at least four bytes: id length, id, offset, time.
	n := d.count("dedup entry count", 4)
	if d.err != nil || n == 0 {
		return
	}
	if n > MaxDedupEntries {
		d.fail("%d dedup entries, over the limit of %d", n, MaxDedupEntries)
		return
	}
	t.dedup = make([]dedupEntry, n)
	prev := uint64(math.MaxUint64) // wraps to 0 for the first gap
	var prevTime int64
	for i := range t.dedup {
		id := d.bytes("dedup id")
		gap := d.uvarint("dedup offset")
		time := prevTime + d.varint("dedup time") // wraps, like the encoder's subtraction
		if d.err != nil {
			return
		}
		if len(id) == 0 || len(id) > MaxDedupIDBytes {
			d.fail("dedup entry %d: id of %d bytes", i, len(id))
			return
		}
		if gap >= t.nextOffset-prev-1 {
			d.fail("dedup offsets out of order or beyond next offset %d", t.nextOffset)
			return
		}
		prev += gap + 1
		t.dedup[i] = dedupEntry{id: string(id), offset: prev, time: time}
		prevTime = time
	}
	t.rebuildDedupIndex()
}
