package shard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
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
	// Pending now: 1, 3, 5, 7. Fail some, give up on 3 and then 1, which
	// moves the head to 5 and leaves dead letters on both sides of it.
	h.ok(Command{Op: OpAttempt, Offsets: []uint64{1, 1, 7, 8, 3, 5}})
	h.ok(Command{Op: OpDeadLetter, Time: 1e18 + 20, Dead: []DeadInfo{{Offset: 3, Reason: "max_retries", LastError: "HTTP 500"}}})
	h.ok(Command{Op: OpDeadLetter, Time: 1e18 + 21, Dead: []DeadInfo{{Offset: 1, Reason: "time_to_live"}}})
	h.ok(Command{Op: OpPublish, Time: 1e18 + 22, Events: events(6, 7)}) // offsets 9-10
	h.ok(Command{Op: OpDeadLetter, Time: 1e18 + 23, Dead: []DeadInfo{{Offset: 10, LastError: "refused"}}})
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
	for o := uint64(0); o <= a.NextOffset()+1; o++ {
		ad, aok := a.DeadLetter(o)
		bd, bok := b.DeadLetter(o)
		if ad != bd || aok != bok || a.Attempts(o) != b.Attempts(o) {
			t.Errorf("offset %d: DeadLetter %+v,%v / %+v,%v, Attempts %d / %d", o, ad, aok, bd, bok, a.Attempts(o), b.Attempts(o))
		}
	}
	if ad, bd := a.DeadLetters(0, 0), b.DeadLetters(0, 0); !reflect.DeepEqual(ad, bd) {
		t.Errorf("DeadLetters = %+v / %+v", ad, bd)
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
				{Op: OpAttempt, Offsets: []uint64{12, 13, 13, 14}},
				{Op: OpDeadLetter, Time: 2e18 + 2, Dead: []DeadInfo{{Offset: 13, Reason: "r"}, {Offset: 12}}},
				{Op: OpReplayDead, Time: 2e18 + 3, Offsets: []uint64{3}, Events: []Event{{Key: "k1", Payload: []byte("hello"), Headers: []Header{{"h", "v"}}}}},
				{Op: OpPurgeDead, Offsets: []uint64{1, 12}},
				{Op: OpAck, Offsets: []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}},
				{Op: OpPurgeDead},
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
	// 200 pending events of 1 KiB: two bytes each and four of key hash,
	// plus about six per run.
	if n := len(snapshot(t, h.s)); n > 200*(2+4)+100*6+32 {
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
	check("old version", append([]byte{snapshotVersionV2 - 1}, good[1:]...))
	check("new version", append([]byte{snapshotVersion + 1}, good[1:]...))

	// Hand-built snapshots, each wrong in one way.
	valid := rawSnapshot{
		applied: 9, next: 4, head: 1, lastRes: 2,
		deadLettered: 2, retried: 5,
		res:      [][4]uint64{{2, 5, 0, 0}}, // id 2, 5 bytes, any count, time 0
		runs:     [][3]uint64{{4, 4, 0}},    // offsets 0-3 at index 4, time 0
		pending:  []uint64{4, 0, 11},        // offset 1: 3 bytes, 2: done, 3: 10 bytes
		attempts: [][2]uint64{{2, 3}},       // offset 3: 3 attempts
		dead: []rawDead{
			{gap: 0, index: 4, slot: 0, reason: "r", attempts: 1, time: 200, size: 7},    // offset 0, time 100
			{gap: 1, index: 0, slot: 2, lastErr: "boom", attempts: 0, time: 10, size: 2}, // offset 2, time 105
		},
	}
	var s State
	if err := s.UnmarshalBinary(valid.encode()); err != nil {
		t.Fatalf("hand-built snapshot: %v", err)
	}
	if st := s.Stats(); st != (Stats{Events: 2, Bytes: 13, ReservedBytes: 5, Reservations: 1, Published: 4, Acked: 0, NextOffset: 4, Head: 1,
		DeadLetters: 2, DeadLetterBytes: 9, DeadLettered: 2, Retried: 5}) {
		t.Fatalf("hand-built snapshot: stats %+v", st)
	}
	wantDead := []DeadLetter{
		{Offset: 0, Index: 4, Slot: 0, Reason: "r", Attempts: 1, Time: 100},
		{Offset: 2, Index: 4, Slot: 2, LastError: "boom", Time: 105},
	}
	if got := s.DeadLetters(0, 0); !reflect.DeepEqual(got, wantDead) || s.Attempts(3) != 3 || s.Attempts(1) != 0 {
		t.Fatalf("hand-built snapshot: dead letters %+v, attempts %d, %d", got, s.Attempts(1), s.Attempts(3))
	}
	checkInvariants(t, &s)
	// Dead letters before the first run's entry.
	below := valid.clone()
	below.runsFirst, below.runs[0] = 1, [3]uint64{3, 4, 0} // offsets 1-3 at index 4
	below.dead[0].index, below.dead[1].index, below.dead[1].slot = 3, 1, 1
	if err := s.UnmarshalBinary(below.encode()); err != nil {
		t.Fatalf("hand-built snapshot with a dead letter below the runs: %v", err)
	}
	if s.CompactIndex() != 3 {
		t.Fatalf("hand-built snapshot with a dead letter below the runs: CompactIndex = %d, want 3", s.CompactIndex())
	}
	checkInvariants(t, &s)
	check("dead letter below the runs, at the first run's index", func() []byte {
		r := below.clone()
		r.dead[0].index, r.dead[1].index = 4, 0
		return r.encode()
	}())
	// Two dead letters of one entry below the runs: their slots must be
	// as far apart as their offsets.
	entry := rawSnapshot{
		applied: 9, next: 4, head: 3, deadLettered: 2,
		runsFirst: 3, runs: [][3]uint64{{1, 8, 0}}, // offset 3 at index 8
		pending: []uint64{11},
		dead: []rawDead{
			{gap: 0, index: 4, slot: 0, size: 1}, // offset 0
			{gap: 1, index: 0, slot: 2, size: 1}, // offset 2
		},
	}
	if err := s.UnmarshalBinary(entry.encode()); err != nil {
		t.Fatalf("hand-built snapshot with dead letters of one entry: %v", err)
	}
	checkInvariants(t, &s)
	for name, mutate := range map[string]func(r *rawSnapshot){
		"slots disagree":         func(r *rawSnapshot) { r.dead[1].slot = 1 },
		"one start, two entries": func(r *rawSnapshot) { r.dead[1].index = 1 },
		"entries overlap": func(r *rawSnapshot) {
			r.dead[0].gap, r.dead[0].slot = 1, 1 // offset 1, entry from 0
			r.dead[1] = rawDead{gap: 0, index: 1, slot: 1}
		},
		"index at the run's": func(r *rawSnapshot) { r.dead[1].index, r.dead[1].slot = 4, 0 },
	} {
		r := entry.clone()
		mutate(&r)
		check("dead letters of one entry: "+name, r.encode())
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
		"dead-lettered too few":    func(r *rawSnapshot) { r.deadLettered = 1 },
		"dead-lettered too many":   func(r *rawSnapshot) { r.deadLettered = 3 },
		"attempts for a done":      func(r *rawSnapshot) { r.attempts[0][0] = 1 },
		"attempts beyond next":     func(r *rawSnapshot) { r.attempts[0][0] = 3 },
		"attempts past next":       func(r *rawSnapshot) { r.attempts = [][2]uint64{{0, 1}, {2, 1}} },
		"attempts huge gap":        func(r *rawSnapshot) { r.attempts[0][0] = math.MaxUint64 },
		"attempts zero":            func(r *rawSnapshot) { r.attempts[0][1] = 0 },
		"attempts too many":        func(r *rawSnapshot) { r.attempts[0][1] = math.MaxUint32 + 1 },
		"too many attempts":        func(r *rawSnapshot) { r.attemptCount = 1000 },
		"dead beyond next":         func(r *rawSnapshot) { r.dead[1].gap = 3 },
		"dead huge gap":            func(r *rawSnapshot) { r.dead[1].gap = math.MaxUint64 },
		"dead on a pending":        func(r *rawSnapshot) { r.dead[1].gap, r.dead[1].slot = 0, 1 },
		"dead index 0":             func(r *rawSnapshot) { r.dead[0].index = 0 },
		"dead index off its run":   func(r *rawSnapshot) { r.dead[0].index, r.dead[1].index = 3, 1 },
		"dead index past applied":  func(r *rawSnapshot) { r.dead[0].index = 10 },
		"dead index huge":          func(r *rawSnapshot) { r.dead[1].index = math.MaxUint64 },
		"dead slot off its run":    func(r *rawSnapshot) { r.dead[1].slot = 1 },
		"dead slot beyond offset":  func(r *rawSnapshot) { r.dead[0].slot = 1 },
		"dead slot huge":           func(r *rawSnapshot) { r.dead[0].slot = math.MaxUint64 },
		"dead publish time":        func(r *rawSnapshot) { r.dead[1].publish = 2 },
		"dead reason too long":     func(r *rawSnapshot) { r.dead[0].reason = strings.Repeat("r", MaxDeadLetterText+1) },
		"dead error too long":      func(r *rawSnapshot) { r.dead[1].lastErr = strings.Repeat("e", MaxDeadLetterText+1) },
		"dead attempts too many":   func(r *rawSnapshot) { r.dead[0].attempts = math.MaxUint32 + 1 },
		"dead size too big":        func(r *rawSnapshot) { r.dead[0].size = math.MaxUint64 },
		"dead bytes overflow":      func(r *rawSnapshot) { r.dead[0].size = math.MaxInt64 - 19 },
		"too many dead":            func(r *rawSnapshot) { r.deadCount = 1000 },
		"dead reason truncated":    func(r *rawSnapshot) { r.dead[1].size = 0; r.truncate = 3 },
		"counters truncated":       func(r *rawSnapshot) { r.truncateAll = true },
		"dead letters out of room": func(r *rawSnapshot) { r.dead = append(r.dead, rawDead{gap: 0, slot: 3}) },
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
	deadLettered, retried        uint64
	resCount                     uint64      // if non-zero, overrides len(res)
	res                          [][4]uint64 // id gap, bytes, count, zig-zag time
	runsFirst                    uint64
	runs                         [][3]uint64 // count, index gap, zig-zag time gap
	pending                      []uint64
	extra                        []byte      // after pending
	attemptCount                 uint64      // if non-zero, overrides len(attempts)
	attempts                     [][2]uint64 // offset gap less one (from head), count
	deadCount                    uint64      // if non-zero, overrides len(dead)
	dead                         []rawDead
	truncate                     int  // bytes to cut off the end
	truncateAll                  bool // stop after the header's first four fields
}

// rawDead is a dead letter as the snapshot lays it out.
type rawDead struct {
	gap, index, slot uint64 // offset gap less one, index gap
	reason, lastErr  string
	attempts         uint64
	time, publish    uint64 // zig-zag deltas
	size             uint64
}

func (r rawSnapshot) clone() rawSnapshot {
	r.res = append([][4]uint64(nil), r.res...)
	r.runs = append([][3]uint64(nil), r.runs...)
	r.pending = append([]uint64(nil), r.pending...)
	r.attempts = append([][2]uint64(nil), r.attempts...)
	r.dead = append([]rawDead(nil), r.dead...)
	return r
}

func (r *rawSnapshot) encode() []byte {
	// Hand-built snapshots are of version 2, which has no dedup table:
	// they check that snapshots written before it are still read.
	b := []byte{snapshotVersionV2}
	for _, x := range []uint64{r.applied, r.next, r.head, r.lastRes} {
		b = appendUvarint(b, x)
	}
	if r.truncateAll {
		return b
	}
	b = appendUvarint(b, r.deadLettered)
	b = appendUvarint(b, r.retried)
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
	b = append(b, r.extra...)
	n = uint64(len(r.attempts))
	if r.attemptCount != 0 {
		n = r.attemptCount
	}
	b = appendUvarint(b, n)
	for _, a := range r.attempts {
		b = appendUvarint(appendUvarint(b, a[0]), a[1])
	}
	n = uint64(len(r.dead))
	if r.deadCount != 0 {
		n = r.deadCount
	}
	b = appendUvarint(b, n)
	for _, d := range r.dead {
		for _, x := range []uint64{d.gap, d.index, d.slot, uint64(len(d.reason))} {
			b = appendUvarint(b, x)
		}
		b = append(b, d.reason...)
		b = appendUvarint(b, uint64(len(d.lastErr)))
		b = append(b, d.lastErr...)
		for _, x := range []uint64{d.attempts, d.time, d.publish, d.size} {
			b = appendUvarint(b, x)
		}
	}
	return b[:len(b)-r.truncate]
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
		want := data
		// Snapshots before version 7 are read with no key hashes.
		switch {
		case data[0] == snapshotVersionV2:
			// Read with an empty dedup table and the default subscription
			// alone: written as version 3.
			want = append(append([]byte{snapshotVersionV3}, data[1:]...), 0)
		case data[0] == snapshotVersionV4 && !s.beyondV3():
			// Nothing of version 4's but its four zero bytes: written as
			// version 3.
			want = append([]byte{snapshotVersionV3}, data[1:len(data)-4]...)
		case data[0] == snapshotVersionV4:
			// No replays, one count per cursor, no retention, nothing
			// tiered, and no key hashes.
			want = append(append([]byte{snapshotVersion}, data[1:]...), make([]byte, len(s.subs)+4)...)
		case data[0] == snapshotVersionV5 && !s.beyondV3():
			// Nothing but the zero bytes of versions 4 (four) and 5 (two,
			// with the default subscription alone): written as version 3.
			want = append([]byte{snapshotVersionV3}, data[1:len(data)-6]...)
		case data[0] == snapshotVersionV5:
			// Nothing tiered, and no key hashes.
			want = append(append([]byte{snapshotVersion}, data[1:]...), 0, 0)
		case data[0] == snapshotVersionV6 && !s.beyondV3():
			// Nothing but the zero bytes of versions 4 (four), 5 (two)
			// and 6 (one): written as version 3.
			want = append([]byte{snapshotVersionV3}, data[1:len(data)-7]...)
		case data[0] == snapshotVersionV6:
			// No key hashes.
			want = append(append([]byte{snapshotVersion}, data[1:]...), 0)
		case data[0] == snapshotVersion && !s.beyondV3():
			// Nothing but the zero bytes of versions 4 (four), 5 (two)
			// and 6 (one), and the key hashes: written as version 3,
			// without them.
			keys := len(binary.AppendUvarint(nil, uint64(s.keys.len()))) + 4*s.keys.len()
			want = append([]byte{snapshotVersionV3}, data[1:len(data)-7-keys]...)
		}
		if got := snapshot(t, &s); !bytes.Equal(got, want) {
			t.Fatalf("accepted snapshot re-marshals differently:\n%x\n%x", want, got)
		}
		checkInvariants(t, &s)
	})
}

// checkInvariants recomputes State's derived fields from scratch, for
// every cursor, and checks the dead letters and attempt counts against
// the pending events and the runs against the cursors' heads.
func checkInvariants(t *testing.T, s *State) {
	t.Helper()
	var reserved int64
	for _, r := range s.reservations {
		reserved += r.bytes
	}
	if s.reservedBytes != reserved {
		t.Fatalf("reserved bytes = %d, want %d", s.reservedBytes, reserved)
	}
	if s.detached && (s.def.head != s.nextOffset || s.def.excluded != s.nextOffset || s.def.pending.len() != 0 || len(s.def.dead) != 0) {
		t.Fatalf("deleted default subscription holds events from %d", s.def.head)
	}
	for i, c := range s.subs {
		if c.id == 0 || i > 0 && c.id <= s.subs[i-1].id {
			t.Fatalf("subscription %d of %d is out of place", i, len(s.subs))
		}
	}
	for c := range s.active {
		checkCursorInvariants(t, s, c)
		checkDeadInvariants(t, s, c)
	}
	checkRetention(t, s)
	h := s.logStart()
	next := h
	if len(s.runs) > 0 {
		next = s.runs[0].first
		if next > h || s.runs[0].end() <= h {
			t.Fatalf("first run %+v does not hold the lowest head %d", s.runs[0], h)
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
	checkKeyInvariants(t, s)
}

// checkKeyInvariants checks that the key hashes are those of the events
// from keysFrom, at least logStart, to the next offset, and that their
// chunks hold them and no more.
func checkKeyInvariants(t *testing.T, s *State) {
	t.Helper()
	l := &s.keys
	if s.keysFrom < s.logStart() || s.keysFrom+uint64(l.len()) != s.nextOffset {
		t.Fatalf("%d key hashes from offset %d, for the events of [%d, %d)", l.len(), s.keysFrom, s.logStart(), s.nextOffset)
	}
	if l.start >= chunkLen || l.start+l.n > len(l.chunks)*chunkLen || len(l.chunks) > (l.start+l.n+chunkMask)>>chunkShift+1 {
		t.Fatalf("%d key hashes from position %d in %d chunks", l.n, l.start, len(l.chunks))
	}
	n := 0
	for ci := range l.chunks {
		n += len(l.segment(ci))
	}
	if n != l.n {
		t.Fatalf("chunks hold %d key hashes, not %d", n, l.n)
	}
}

func checkCursorInvariants(t *testing.T, s *State, c *cursor) {
	t.Helper()
	var events, size int64
	for i := range c.pending.len() {
		p := c.pending.size(i)
		if p == acked {
			if i == 0 {
				t.Fatalf("subscription %d: event at the head is acked", c.id)
			}
			continue
		}
		events++
		size += p
	}
	got := [2]int64{c.pendingEvents, c.pendingBytes}
	if want := [2]int64{events, size}; got != want {
		t.Fatalf("subscription %d: pending events, pending bytes = %v, want %v", c.id, got, want)
	}
	if uint64(c.pending.len()) != s.nextOffset-c.head {
		t.Fatalf("subscription %d: %d pending entries for offsets [%d, %d)", c.id, c.pending.len(), c.head, s.nextOffset)
	}
	checkPendingList(t, &c.pending)
}

func checkDeadInvariants(t *testing.T, s *State, c *cursor) {
	t.Helper()
	var deadBytes int64
	for i, d := range c.dead {
		deadBytes += d.size
		if d.size < 0 || d.Offset >= s.nextOffset || (i > 0 && d.Offset <= c.dead[i-1].Offset) {
			t.Fatalf("dead letter %d of %+v is out of place", i, c.dead)
		}
		if d.Index == 0 || d.Index > s.applied || uint64(d.Slot) > d.Offset || len(d.Reason) > MaxDeadLetterText || len(d.LastError) > MaxDeadLetterText {
			t.Fatalf("dead letter %+v is malformed", d)
		}
		if d.Offset >= c.head && c.pending.size(int(d.Offset-c.head)) != acked {
			t.Fatalf("dead letter %d is still pending", d.Offset)
		}
		if len(s.runs) > 0 && d.Offset >= s.runs[0].first {
			r := s.runOf(d.Offset)
			if r.index != d.Index || d.Offset-r.first != uint64(d.Slot) || r.time != d.PublishTime {
				t.Fatalf("dead letter %+v disagrees with its run %+v", d, *r)
			}
		}
	}
	if deadBytes != c.deadBytes {
		t.Fatalf("dead bytes = %d, want %d", c.deadBytes, deadBytes)
	}
	done := s.nextOffset + c.replayed - uint64(c.pendingEvents)
	if c.deadLettered < uint64(len(c.dead)) || c.deadLettered+c.skipped+c.excluded > done {
		t.Fatalf("%d dead-lettered, %d skipped, %d excluded with %d held and %d done", c.deadLettered, c.skipped, c.excluded, len(c.dead), done)
	}
	c.pending.eachAttempt(func(i int, a uint32) {
		if o := c.head + uint64(i); a == 0 || !c.isPending(o, s.nextOffset) {
			t.Fatalf("%d attempts for offset %d, which is not pending", a, o)
		}
	})
}

// checkPendingList checks the bookkeeping of a pendingList's chunks.
func checkPendingList(t *testing.T, l *pendingList) {
	t.Helper()
	if l.n < 0 || l.start < 0 || l.start >= chunkLen && len(l.chunks) > 0 || l.start+l.n > len(l.chunks)*chunkLen {
		t.Fatalf("%d entries from position %d in %d chunks", l.n, l.start, len(l.chunks))
	}
	if n := (l.start + l.n + chunkMask) >> chunkShift; len(l.chunks) > max(n, 1) {
		t.Fatalf("%d chunks for %d entries from position %d", len(l.chunks), l.n, l.start)
	}
	natt := 0
	for ci, c := range l.chunks {
		if c.size == nil || c.gen > l.gen {
			t.Fatalf("chunk %d: size array %p, generation %d of %d", ci, c.size, c.gen, l.gen)
		}
		n := 0
		if c.att != nil {
			from, to := l.bounds(ci)
			for j, a := range c.att {
				if a != 0 {
					if j < from || j >= to {
						t.Fatalf("chunk %d: %d attempts at position %d, outside [%d, %d)", ci, a, j, from, to)
					}
					n++
				}
			}
		}
		if n != c.natt || (c.att != nil) != (n > 0) {
			t.Fatalf("chunk %d: %d attempts counted, %d held in %p", ci, c.natt, n, c.att)
		}
		natt += n
	}
	if natt != l.natt {
		t.Fatalf("%d attempts counted, %d held", l.natt, natt)
	}
}

// A state with nothing version 4 added (nor versions 5 and 6) is written
// as version 3, which the release before subscriptions reads, without its
// key hashes. Anything of a subscription's makes it version 7.
func TestSnapshotVersionFollowsSubscriptions(t *testing.T) {
	version := func(h *harness) byte { return snapshot(t, h.s)[0] }
	h := history(t)
	if v := version(h); v != snapshotVersionV3 {
		t.Fatalf("with key hashes and no subscription: version %d, want %d", v, snapshotVersionV3)
	}
	keyless(h.s)
	if v := version(h); v != snapshotVersionV3 {
		t.Fatalf("without subscriptions: version %d, want %d", v, snapshotVersionV3)
	}
	h.ok(Command{Op: OpSubscribe, Subscription: 3})
	if v := version(h); v != snapshotVersion {
		t.Fatalf("with a subscription: version %d, want %d", v, snapshotVersion)
	}
	h.ok(Command{Op: OpUnsubscribe, Subscription: 3})
	if v := version(h); v != snapshotVersionV3 {
		t.Fatalf("after its deletion: version %d, want %d", v, snapshotVersionV3)
	}
	h.ok(Command{Op: OpUnsubscribe})
	if v := version(h); v != snapshotVersion {
		t.Fatalf("with the default subscription detached: version %d, want %d", v, snapshotVersion)
	}
	if v := version(subscriptionHistory(t)); v != snapshotVersion {
		t.Fatalf("subscription history: version %d, want %d", v, snapshotVersion)
	}
}
