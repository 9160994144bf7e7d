package shard

import (
	"encoding/binary"
	"math"
	"slices"
)

// snapshotVersion is the first byte of every snapshot MarshalBinary
// writes. Version 3 added the de-duplication table at the end; snapshots
// of version 2, written before, are read as having an empty one.
const (
	snapshotVersion   = 3
	snapshotVersionV2 = 2
)

// MarshalBinary returns a snapshot of the state. Equal states produce
// equal bytes, so replicas can compare snapshots to detect divergence.
//
// The snapshot holds only metadata: its size grows with the number of
// pending events (one varint each), runs, reservations, attempt counts
// and dead letters (whose reasons and errors are bounded by
// MaxDeadLetterText). Quantities that follow from others, such as byte
// totals, are recomputed on load rather than stored.
func (s *State) MarshalBinary() ([]byte, error) {
	size := 64 + s.pending.len()*2 + len(s.runs)*8 + len(s.reservations)*12 + s.pending.natt*4
	for i := range s.dead {
		size += 24 + len(s.dead[i].Reason) + len(s.dead[i].LastError)
	}
	b := make([]byte, 0, size)
	b = append(b, snapshotVersion)
	b = binary.AppendUvarint(b, s.applied)
	b = binary.AppendUvarint(b, s.nextOffset)
	b = binary.AppendUvarint(b, s.head)
	b = binary.AppendUvarint(b, s.lastReservation)
	b = binary.AppendUvarint(b, s.deadLettered)
	b = binary.AppendUvarint(b, s.retried)

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

	// One entry per offset in [head, nextOffset): 0 if acknowledged, else
	// the event's size plus one.
	for ci := range s.pending.chunks {
		for _, size := range s.pending.segment(ci) {
			b = binary.AppendUvarint(b, uint64(size+1))
		}
	}

	b = s.appendAttempts(b)

	// Dead letters in offset order, offsets and indexes as gaps, times as
	// deltas.
	b = binary.AppendUvarint(b, uint64(len(s.dead)))
	prev := uint64(math.MaxUint64) // so that the first gap is the offset itself
	prevIndex, prevTime = 0, 0
	var prevPublish int64
	for i := range s.dead {
		d := &s.dead[i]
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
	return s.appendDedup(b), nil
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
func (s *State) appendAttempts(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(s.pending.natt))
	prev := s.head - 1
	s.pending.eachAttempt(func(i int, a uint32) {
		o := s.head + uint64(i)
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
func (s *State) SnapshotFunc() func() ([]byte, error) {
	return s.freeze().MarshalBinary
}

// freeze returns a shallow copy of s that s does not change from now on,
// and that must not be changed itself. It shares with s everything that
// grows with the queue: see the comments on State's fields.
func (s *State) freeze() *State {
	f := *s
	f.pending = s.pending.freeze()
	f.dedupIndex = nil // MarshalBinary reads only the table
	s.resShared = true
	s.deadShared = true
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
	if d.err == nil && v != snapshotVersion && v != snapshotVersionV2 {
		d.fail("unsupported version %d", v)
	}
	t.applied = d.uvarint("applied index")
	t.nextOffset = d.uvarint("next offset")
	t.head = d.uvarint("head")
	t.lastReservation = d.uvarint("last reservation")
	t.deadLettered = d.uvarint("dead-lettered count")
	t.retried = d.uvarint("retried count")
	if d.err == nil && t.head > t.nextOffset {
		d.fail("head %d beyond next offset %d", t.head, t.nextOffset)
	}
	t.decodeReservations(&d)
	t.decodeRuns(&d)
	t.decodePending(&d)
	t.decodeAttempts(&d)
	t.decodeDead(&d)
	if v == snapshotVersion {
		t.decodeDedup(&d)
	}
	// Every event is pending, acknowledged or dead-lettered, and each dead
	// letter held was dead-lettered once.
	if d.err == nil && (t.deadLettered < uint64(len(t.dead)) || t.deadLettered > t.nextOffset-uint64(t.pendingEvents)) {
		d.fail("%d events dead-lettered, with %d dead letters held and %d events done", t.deadLettered, len(t.dead), t.nextOffset-uint64(t.pendingEvents))
	}
	d.end("snapshot")
	if d.err != nil {
		return d.err
	}
	*s = t
	return nil
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
	if (n == 0) != (t.head == t.nextOffset) {
		d.fail("%d runs for %d pending offsets", n, t.nextOffset-t.head)
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
	// The runs must cover exactly the pending offsets, with the first
	// containing the head.
	if t.runs[0].first > t.head || t.runs[0].end() <= t.head || next != t.nextOffset {
		d.fail("runs do not cover offsets [%d, %d)", t.head, t.nextOffset)
	}
}

func (t *State) decodePending(d *decoder) {
	if d.err != nil {
		return
	}
	// Each entry takes at least a byte.
	if t.nextOffset-t.head > uint64(len(d.buf)) {
		d.fail("truncated pending events")
		return
	}
	n := int(t.nextOffset - t.head)
	if n == 0 {
		return
	}
	// Fill whole chunks, counting in locals: t.pending.push and t's
	// counters would do, only slower.
	l := &t.pending
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
					d.fail("event at head %d is acknowledged", t.head)
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
	t.pendingBytes, t.pendingEvents = bytes, events
}

func (t *State) decodeAttempts(d *decoder) {
	// An entry takes at least two bytes.
	n := d.count("attempt count", 2)
	if d.err != nil || n == 0 {
		return
	}
	prev := t.head - 1
	for range n {
		gap := d.uvarint("attempt offset")
		a := d.uvarint("attempts")
		if d.err != nil {
			return
		}
		// Attempts are kept only for pending events, and only non-zero.
		if gap >= t.nextOffset-prev-1 || !t.isPending(prev+gap+1) {
			d.fail("attempts for an offset that is not pending")
			return
		}
		if a == 0 || a > math.MaxUint32 {
			d.fail("attempt count %d out of range", a)
			return
		}
		prev += gap + 1
		t.pending.setAttempts(int(prev-t.head), uint32(a))
	}
}

func (t *State) decodeDead(d *decoder) {
	// A dead letter takes at least nine bytes.
	n := d.count("dead letter count", 9)
	if d.err != nil || n == 0 {
		return
	}
	t.dead = make([]deadLetter, n)
	prev := uint64(math.MaxUint64) // wraps to 0 for the first gap
	var prevIndex, prevStart uint64
	var prevTime, prevPublish int64
	for i := range t.dead {
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
			if index != r.index || start != r.first || publish != r.time || (o >= t.head && t.pending.size(int(o-t.head)) != acked) {
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
		if size > uint64(math.MaxInt64-t.pendingBytes-t.reservedBytes-t.deadBytes) {
			d.fail("dead letter bytes overflow")
			return
		}
		t.dead[i] = deadLetter{DeadLetter: DeadLetter{
			Offset: o, Index: index, Slot: slot,
			Reason: string(reason), LastError: string(lastErr),
			Attempts: uint32(attempts), Time: time, PublishTime: publish,
		}, size: int64(size)}
		t.deadBytes += int64(size)
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
