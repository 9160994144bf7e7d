package shard

import (
	"encoding/binary"
	"math"
	"slices"
)

// snapshotVersion is the first byte of every snapshot.
const snapshotVersion = 1

// MarshalBinary returns a snapshot of the state. Equal states produce
// equal bytes, so replicas can compare snapshots to detect divergence.
//
// The snapshot holds only metadata: its size grows with the number of
// pending events (one varint each), runs and reservations. Quantities
// that follow from others, such as byte totals, are recomputed on load
// rather than stored.
func (s *State) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 64+len(s.pending)*2+len(s.runs)*8+len(s.reservations)*12)
	b = append(b, snapshotVersion)
	b = binary.AppendUvarint(b, s.applied)
	b = binary.AppendUvarint(b, s.nextOffset)
	b = binary.AppendUvarint(b, s.head)
	b = binary.AppendUvarint(b, s.lastReservation)

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
	for _, size := range s.pending {
		b = binary.AppendUvarint(b, uint64(size+1))
	}
	return b, nil
}

// UnmarshalBinary replaces the state with the snapshot in data, which
// must have been written by MarshalBinary. It checks the snapshot's
// internal consistency and rejects, with an error wrapping
// ErrInvalidSnapshot, anything that fails; s is then left unchanged.
func (s *State) UnmarshalBinary(data []byte) error {
	var t State
	d := decoder{buf: data, kind: ErrInvalidSnapshot}
	if v := d.u8("version"); d.err == nil && v != snapshotVersion {
		d.fail("unsupported version %d", v)
	}
	t.applied = d.uvarint("applied index")
	t.nextOffset = d.uvarint("next offset")
	t.head = d.uvarint("head")
	t.lastReservation = d.uvarint("last reservation")
	if d.err == nil && t.head > t.nextOffset {
		d.fail("head %d beyond next offset %d", t.head, t.nextOffset)
	}
	t.decodeReservations(&d)
	t.decodeRuns(&d)
	t.decodePending(&d)
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
	t.pending = make([]int64, n)
	for i := range t.pending {
		v := d.uvarint("event size")
		if d.err != nil {
			return
		}
		if v == 0 {
			if i == 0 {
				d.fail("event at head %d is acknowledged", t.head)
				return
			}
			t.pending[i] = acked
			continue
		}
		size := v - 1
		if size > uint64(math.MaxInt64-t.pendingBytes-t.reservedBytes) {
			d.fail("pending bytes overflow")
			return
		}
		t.pending[i] = int64(size)
		t.pendingBytes += int64(size)
		t.pendingEvents++
	}
}
