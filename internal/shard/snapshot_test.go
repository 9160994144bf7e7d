package shard

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// history builds a shard with a bit of everything: several runs, acks out
// of order, reservations of different ages, and rejected commands.
func history(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t)
	h.index = 41
	h.ok(Command{Op: OpPublish, Time: 1e18, Events: events(3, 4, 5)})
	a := h.ok(Command{Op: OpReserve, Time: 1e18 + 5, Bytes: 100, Count: 2}).ReservationID
	h.ok(Command{Op: OpReserve, Time: 1e18 + 6, Bytes: 7})
	h.ok(Command{Op: OpReserve, Time: 1e18 + 7, Bytes: 8, MaxQueueBytes: 1000})
	h.apply(Command{Op: OpPublish, Events: events(2000), MaxQueueBytes: 1000})
	h.index += 3 // entries that are not shard commands
	h.ok(Command{Op: OpCommit, Time: 1e18 + 9, ReservationID: a, Events: []Event{
		{Key: "k1", Payload: []byte("hello"), Headers: []Header{{"h", "v"}}},
		{Key: "k2"},
	}})
	h.ok(Command{Op: OpPublish, Time: 1e18 - 3, Events: events(1, 0, 1, 0)})
	h.ok(Command{Op: OpAck, Offsets: []uint64{0, 4, 6, 8, 2}})
	h.ok(Command{Op: OpAbort, ReservationID: 3})
	return h
}

// checkSame fails unless a and b agree on everything observable.
func checkSame(t *testing.T, a, b *State) {
	t.Helper()
	if !bytes.Equal(snapshot(t, a), snapshot(t, b)) {
		t.Error("snapshots differ")
	}
	if a.Applied() != b.Applied() || a.CompactIndex() != b.CompactIndex() || a.Stats() != b.Stats() {
		t.Errorf("applied %d/%d, compact index %d/%d, stats %+v / %+v",
			a.Applied(), b.Applied(), a.CompactIndex(), b.CompactIndex(), a.Stats(), b.Stats())
	}
	for o := uint64(0); o <= a.NextOffset()+1; o++ {
		ai, as, aok := a.Locate(o)
		bi, bs, bok := b.Locate(o)
		if ai != bi || as != bs || aok != bok || a.IsAcked(o) != b.IsAcked(o) {
			t.Errorf("offset %d: Locate %d,%d,%v / %d,%d,%v, IsAcked %v / %v", o, ai, as, aok, bi, bs, bok, a.IsAcked(o), b.IsAcked(o))
		}
	}
	for id := uint64(0); id <= a.lastReservation+1; id++ {
		ar, aok := a.Reservation(id)
		br, bok := b.Reservation(id)
		if ar != br || aok != bok {
			t.Errorf("Reservation(%d) = %+v,%v / %+v,%v", id, ar, aok, br, bok)
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, name := range []string{"empty", "history", "drained"} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			switch name {
			case "history":
				h = history(t)
			case "drained":
				h.ok(Command{Op: OpPublish, Time: 5, Events: events(1, 2)})
				h.ok(Command{Op: OpAck, Offsets: []uint64{1, 0}})
			}
			data := snapshot(t, h.s)
			restored := New()
			restored.Apply(1, &Command{Op: OpPublish, Events: events(1)}) // overwritten
			if err := restored.UnmarshalBinary(data); err != nil {
				t.Fatalf("UnmarshalBinary: %v", err)
			}
			checkSame(t, h.s, restored)

			// Both behave the same from here on.
			more := []Command{
				{Op: OpAck, Offsets: []uint64{1, 3}},
				{Op: OpReserve, Time: 2e18, Bytes: 10, Count: 1, MaxQueueBytes: 100},
				{Op: OpPublish, Time: 2e18 + 1, Events: events(9, 9)},
				{Op: OpCommit, ReservationID: 2, Events: events(1)},
				{Op: OpCommit, ReservationID: h.s.lastReservation + 1, Events: events(10)},
				{Op: OpExpire, OlderThan: 2e18},
				{Op: OpAck, Offsets: []uint64{5, 7, 9, 10, 11}},
				{Op: OpAck, Offsets: []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}},
			}
			index := h.s.Applied()
			for _, c := range more {
				index++
				ra, rb := h.s.Apply(index, &c), restored.Apply(index, &c)
				if ra.ReservationID != rb.ReservationID || ra.FirstOffset != rb.FirstOffset || ra.Count != rb.Count ||
					(ra.Err == nil) != (rb.Err == nil) {
					t.Errorf("%v: results differ: %+v / %+v", c.Op, ra, rb)
				}
				checkSame(t, h.s, restored)
			}
		})
	}
}

func TestSnapshotDeterminism(t *testing.T) {
	a, b := history(t), history(t)
	checkSame(t, a.s, b.s)
	// Reservations made and dropped in different orders leave no trace.
	for _, s := range []*harness{a, b} {
		for i := 0; i < 50; i++ {
			s.ok(Command{Op: OpReserve, Time: int64(i % 7), Bytes: int64(i)})
		}
	}
	for i := uint64(0); i < 50; i += 3 {
		a.ok(Command{Op: OpAbort, ReservationID: a.s.lastReservation - i})
		b.ok(Command{Op: OpAbort, ReservationID: b.s.lastReservation - i})
	}
	a.ok(Command{Op: OpExpire, OlderThan: 3})
	b.ok(Command{Op: OpExpire, OlderThan: 3})
	checkSame(t, a.s, b.s)
}

func TestSnapshotCompact(t *testing.T) {
	h := newHarness(t)
	payload := make([]byte, 1024)
	for i := 0; i < 100; i++ {
		h.ok(Command{Op: OpPublish, Time: 1.7e18 + int64(i)*1e6, Events: []Event{{Payload: payload}, {Payload: payload}}})
	}
	// 200 pending events of 1 KiB: two bytes each, plus about six per run.
	if n := len(snapshot(t, h.s)); n > 200*2+100*6+32 {
		t.Errorf("snapshot of 200 pending events takes %d bytes", n)
	}
}

func TestUnmarshalBinaryRejects(t *testing.T) {
	good := snapshot(t, history(t).s)
	h := history(t)
	before := snapshot(t, h.s)
	check := func(name string, data []byte) {
		t.Helper()
		err := h.s.UnmarshalBinary(data)
		if !errors.Is(err, ErrInvalidSnapshot) {
			t.Errorf("%s: got %v, want ErrInvalidSnapshot", name, err)
		}
		if !bytes.Equal(snapshot(t, h.s), before) {
			t.Fatalf("%s: rejected snapshot changed the state", name)
		}
	}
	for n := range len(good) {
		check("truncated", good[:n])
	}
	check("trailing byte", append(good[:len(good):len(good)], 0))
	check("version", append([]byte{2}, good[1:]...))

	// Hand-built snapshots, each wrong in one way.
	valid := rawSnapshot{
		applied: 9, next: 4, head: 1, lastRes: 2,
		res:     [][4]uint64{{2, 5, 0, 0}}, // id 2, 5 bytes, any count, time 0
		runs:    [][3]uint64{{4, 4, 0}},    // offsets 0-3 at index 4, time 0
		pending: []uint64{4, 0, 11},        // offset 1: 3 bytes, 2: acked, 3: 10 bytes
	}
	var s State
	if err := s.UnmarshalBinary(valid.encode()); err != nil {
		t.Fatalf("hand-built snapshot: %v", err)
	}
	if st := s.Stats(); st != (Stats{Events: 2, Bytes: 13, ReservedBytes: 5, Reservations: 1, Published: 4, Acked: 2, NextOffset: 4, Head: 1}) {
		t.Fatalf("hand-built snapshot: stats %+v", st)
	}
	bad := map[string]func(r *rawSnapshot){
		"head beyond next":      func(r *rawSnapshot) { r.head = 5 },
		"reservation id 0":      func(r *rawSnapshot) { r.res[0][0] = 0 },
		"reservation id > last": func(r *rawSnapshot) { r.res[0][0] = 3 },
		"reservation ids wrap":  func(r *rawSnapshot) { r.res = [][4]uint64{{2, 0, 0, 0}, {math.MaxUint64, 0, 0, 0}} },
		"reservation bytes":     func(r *rawSnapshot) { r.res[0][1] = math.MaxInt64 + 1 },
		"reservation count":     func(r *rawSnapshot) { r.res[0][2] = math.MaxUint64 },
		"reserved overflow": func(r *rawSnapshot) {
			r.res = [][4]uint64{{1, math.MaxInt64, 0, 0}, {1, 1, 0, 0}}
		},
		"too many reservations": func(r *rawSnapshot) { r.resCount = 1000 },
		"runs when empty":       func(r *rawSnapshot) { r.head, r.pending = 4, nil },
		"no runs when pending":  func(r *rawSnapshot) { r.runs = nil },
		"run of zero":           func(r *rawSnapshot) { r.runs = [][3]uint64{{0, 1, 0}, {4, 1, 0}} },
		"index beyond applied":  func(r *rawSnapshot) { r.runs[0][1] = 10 },
		"index not increasing":  func(r *rawSnapshot) { r.runs = [][3]uint64{{1, 4, 0}, {3, 0, 0}} },
		"runs short of next":    func(r *rawSnapshot) { r.runs[0][0] = 3 },
		"runs past next":        func(r *rawSnapshot) { r.runs[0][0] = 5 },
		"run after head":        func(r *rawSnapshot) { r.runsFirst = 2; r.runs[0][0] = 2 },
		"run before head":       func(r *rawSnapshot) { r.runs = [][3]uint64{{1, 1, 0}, {3, 1, 0}} },
		"run offsets overflow":  func(r *rawSnapshot) { r.runs = [][3]uint64{{1, 1, 0}, {math.MaxUint64, 1, 0}} },
		"head acked":            func(r *rawSnapshot) { r.pending = []uint64{0, 4, 11} },
		"size too big":          func(r *rawSnapshot) { r.pending[2] = math.MaxUint64 },
		"pending overflow":      func(r *rawSnapshot) { r.pending = []uint64{math.MaxInt64 - 4, 0, 2} },
		"pending short":         func(r *rawSnapshot) { r.pending = r.pending[:2] },
		"pending long":          func(r *rawSnapshot) { r.pending = append(r.pending, 1) },
		"huge pending count": func(r *rawSnapshot) {
			r.next = math.MaxUint64
			r.runs[0][0] = math.MaxUint64
		},
		"non-minimal varint": func(r *rawSnapshot) {
			r.pending = r.pending[:2]
			r.extra = []byte{0x8b, 0x00} // 11
		},
		"overlong varint": func(r *rawSnapshot) {
			r.pending = r.pending[:2]
			r.extra = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}
		},
	}
	for name, mutate := range bad {
		r := valid.clone()
		mutate(&r)
		check(name, r.encode())
	}
	check("empty", nil)
	check("unknown version", []byte{0})
}

// rawSnapshot lays out a snapshot field by field, to build bad ones.
type rawSnapshot struct {
	applied, next, head, lastRes uint64
	resCount                     uint64      // if non-zero, overrides len(res)
	res                          [][4]uint64 // id gap, bytes, count, zig-zag time
	runsFirst                    uint64
	runs                         [][3]uint64 // count, index gap, zig-zag time gap
	pending                      []uint64
	extra                        []byte
}

func (r rawSnapshot) clone() rawSnapshot {
	r.res = append([][4]uint64(nil), r.res...)
	r.runs = append([][3]uint64(nil), r.runs...)
	r.pending = append([]uint64(nil), r.pending...)
	return r
}

func (r *rawSnapshot) encode() []byte {
	b := []byte{snapshotVersion}
	for _, x := range []uint64{r.applied, r.next, r.head, r.lastRes} {
		b = appendUvarint(b, x)
	}
	n := uint64(len(r.res))
	if r.resCount != 0 {
		n = r.resCount
	}
	b = appendUvarint(b, n)
	for _, res := range r.res {
		for _, x := range res {
			b = appendUvarint(b, x)
		}
	}
	b = appendUvarint(b, uint64(len(r.runs)))
	if len(r.runs) > 0 {
		b = appendUvarint(b, r.runsFirst)
	}
	for _, run := range r.runs {
		for _, x := range run {
			b = appendUvarint(b, x)
		}
	}
	for _, x := range r.pending {
		b = appendUvarint(b, x)
	}
	return append(b, r.extra...)
}

func appendUvarint(b []byte, x uint64) []byte {
	for x >= 0x80 {
		b = append(b, byte(x)|0x80)
		x >>= 7
	}
	return append(b, byte(x))
}

// FuzzUnmarshalBinary checks that arbitrary input never panics, and that
// whatever is accepted is a consistent state that marshals back to the
// same bytes.
func FuzzUnmarshalBinary(f *testing.F) {
	// Seeds are in testdata/fuzz/FuzzUnmarshalBinary; see TestFuzzSeeds.
	f.Fuzz(func(t *testing.T, data []byte) {
		var s State
		if err := s.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrInvalidSnapshot) {
				t.Fatalf("error %v does not wrap ErrInvalidSnapshot", err)
			}
			return
		}
		if got := snapshot(t, &s); !bytes.Equal(got, data) {
			t.Fatalf("accepted snapshot re-marshals differently:\n%x\n%x", data, got)
		}
		checkInvariants(t, &s)
	})
}

// checkInvariants recomputes State's derived fields from scratch.
func checkInvariants(t *testing.T, s *State) {
	t.Helper()
	var reserved int64
	for _, r := range s.reservations {
		reserved += r.bytes
	}
	var events, size int64
	for i, p := range s.pending {
		if p == acked {
			if i == 0 {
				t.Fatal("event at the head is acked")
			}
			continue
		}
		events++
		size += p
	}
	got := [3]int64{s.reservedBytes, s.pendingEvents, s.pendingBytes}
	if want := [3]int64{reserved, events, size}; got != want {
		t.Fatalf("reserved bytes, pending events, pending bytes = %v, want %v", got, want)
	}
	if uint64(len(s.pending)) != s.nextOffset-s.head {
		t.Fatalf("%d pending entries for offsets [%d, %d)", len(s.pending), s.head, s.nextOffset)
	}
	next := s.head
	if len(s.runs) > 0 {
		next = s.runs[0].first
		if next > s.head || s.runs[0].end() <= s.head {
			t.Fatalf("first run %+v does not hold head %d", s.runs[0], s.head)
		}
	}
	for i, r := range s.runs {
		if r.first != next || r.count == 0 || r.index > s.applied || (i > 0 && r.index <= s.runs[i-1].index) {
			t.Fatalf("run %d of %+v is out of place", i, s.runs)
		}
		next = r.end()
	}
	if next != s.nextOffset {
		t.Fatalf("runs end at %d, next offset is %d", next, s.nextOffset)
	}
}
