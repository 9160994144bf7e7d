package log

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"herald/internal/vfs"
)

// behindOptions are those of a log writing behind with a bound of bound
// bytes, in small segments so that writes roll them.
func behindOptions(bound int64) Options {
	return Options{SegmentSize: 2 << 10, UnsyncedElsewhere: true, WriteBehind: bound}
}

func dataBytes(rs []Record) int64 {
	var n int64
	for _, r := range rs {
		n += int64(len(r.Data))
	}
	return n
}

func TestWriteBehindNeedsAnotherLog(t *testing.T) {
	_, err := Open(t.TempDir(), Options{WriteBehind: 1 << 10})
	if err == nil || !strings.Contains(err.Error(), "UnsyncedElsewhere") {
		t.Fatalf("Open writing behind without another log holding the records: %v", err)
	}
}

// TestWriteBehindHoldsRecordsUntilItsBound checks when the records go to
// the segment files: not at Append, not at WriteBehind below the bound;
// at WriteBehind from the bound on, at Sync, at Close, and at Append past
// four times the bound.
func TestWriteBehindHoldsRecordsUntilItsBound(t *testing.T) {
	dir := t.TempDir()
	rs := mkrecs(1, 200, 1)
	bound := dataBytes(rs[:40])
	l := mustOpen(t, dir, behindOptions(bound))
	empty := l.SizeBytes()

	mustAppend(t, l, rs[:10])
	if err := l.WriteBehind(); err != nil {
		t.Fatal(err)
	}
	if l.SizeBytes() != empty {
		t.Fatalf("WriteBehind below its bound wrote: the segments hold %d bytes, %d before", l.SizeBytes(), empty)
	}
	expect(t, l, 1, 0, rs[:10]) // readable from memory

	mustAppend(t, l, rs[10:40])
	if err := l.WriteBehind(); err != nil {
		t.Fatal(err)
	}
	written := l.SizeBytes()
	if written <= empty+bound {
		t.Fatalf("WriteBehind at its bound did not write: the segments hold %d bytes", written)
	}
	expect(t, l, 1, 0, rs[:40])

	// Appends alone write once they hold more than four times the bound.
	i := 40
	for ; l.SizeBytes() == written; i++ {
		mustAppend(t, l, rs[i:i+1])
	}
	if held := dataBytes(rs[40:i]); held < 4*bound {
		t.Fatalf("Append wrote %d bytes held, below four times the bound (%d)", held, 4*bound)
	}
	expect(t, l, 1, 0, rs[:i])

	mustAppend(t, l, rs[i:i+3])
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	synced := l.SizeBytes()
	mustAppend(t, l, rs[i+3:i+5])
	mustClose(t, l)

	l = mustOpen(t, dir, behindOptions(bound))
	defer l.Close()
	expect(t, l, 1, 0, rs[:i+5])
	if l.SizeBytes() <= synced {
		t.Fatal("Close did not write the records held in memory")
	}
}

// behindModel is what a log must hold: records from first on, and the
// term of the record before first.
type behindModel struct {
	first, prevTerm uint64
	recs            []Record
}

func (m *behindModel) last() uint64 { return m.first + uint64(len(m.recs)) - 1 }

// TestWriteBehindAgainstAModel runs random appends (with overwrites of the
// memory tail, of the segments and of both), truncations, deletions of
// prefixes, resets, writes, syncs and reopenings on a log writing behind,
// and checks after each that it reads exactly what the model holds.
func TestWriteBehindAgainstAModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	dir := t.TempDir()
	opts := behindOptions(600)
	l := mustOpen(t, dir, opts)
	defer func() { l.Close() }()
	m := &behindModel{first: 1}
	term := uint64(1)
	for step := 0; step < 3000; step++ {
		switch op := rng.IntN(100); {
		case op < 60: // append, sometimes over the end of the log
			at := m.last() + 1
			if rng.IntN(4) == 0 && len(m.recs) > 0 {
				at = m.first + rng.Uint64N(uint64(len(m.recs)))
				term++
			}
			rs := mkrecs(at, at+1+rng.Uint64N(8), term)
			mustAppend(t, l, rs)
			m.recs = append(m.recs[:at-m.first], rs...)
		case op < 65:
			if len(m.recs) == 0 {
				continue
			}
			from := m.first + rng.Uint64N(uint64(len(m.recs)))
			if err := l.TruncateSuffix(from); err != nil {
				t.Fatalf("step %d: TruncateSuffix(%d): %v", step, from, err)
			}
			m.recs = m.recs[:from-m.first]
		case op < 80:
			if err := l.WriteBehind(); err != nil {
				t.Fatalf("step %d: WriteBehind: %v", step, err)
			}
		case op < 85:
			if err := l.Sync(); err != nil {
				t.Fatalf("step %d: Sync: %v", step, err)
			}
		case op < 92: // delete a prefix
			if len(m.recs) < 2 {
				continue
			}
			below := m.first + rng.Uint64N(uint64(len(m.recs)))
			if _, err := l.DeletePrefix(below); err != nil {
				t.Fatalf("step %d: DeletePrefix(%d): %v", step, below, err)
			}
			first := l.FirstIndex()
			if first < m.first || first > below {
				t.Fatalf("step %d: DeletePrefix(%d) left the log starting at %d, was %d", step, below, first, m.first)
			}
			if first > m.first {
				m.prevTerm = m.recs[first-1-m.first].Term
				m.recs = m.recs[first-m.first:]
				m.first = first
			}
		case op < 94:
			next := m.last() + 1 + rng.Uint64N(5)
			term++
			if err := l.Reset(next, term); err != nil {
				t.Fatalf("step %d: Reset(%d): %v", step, next, err)
			}
			m.first, m.prevTerm, m.recs = next, term, nil
		default:
			mustClose(t, l)
			l = mustOpen(t, dir, opts)
		}
		checkModel(t, step, l, m, rng)
	}
}

// checkModel checks that l reads as m, whole and from a random index with
// a random size bound.
func checkModel(t *testing.T, step int, l *Log, m *behindModel, rng *rand.Rand) {
	t.Helper()
	expect(t, l, m.first, m.prevTerm, m.recs)
	if len(m.recs) == 0 {
		return
	}
	lo := m.first + rng.Uint64N(uint64(len(m.recs)))
	maxBytes := 1 + rng.Uint64N(400)
	got, err := l.Entries(lo, m.last()+1, maxBytes)
	if err != nil {
		t.Fatalf("step %d: Entries(%d, %d, %d): %v", step, lo, m.last()+1, maxBytes, err)
	}
	want := m.recs[lo-m.first:]
	var total uint64
	n := 0
	for ; n < len(want); n++ {
		size := uint64(len(want[n].Data))
		if n > 0 && total+size > maxBytes {
			break
		}
		total += size
	}
	if len(got) != n {
		t.Fatalf("step %d: Entries(%d, %d, %d) returned %d records, want %d", step, lo, m.last()+1, maxBytes, len(got), n)
	}
	for k := range got {
		if !recEqual(got[k], want[k]) {
			t.Fatalf("step %d: Entries from %d: record %d = %+v, want %+v", step, lo, want[k].Index, got[k], want[k])
		}
	}
}

// TestWriteBehindKeepsWhatItCouldNotWrite checks that a failed write of
// the records held in memory (a full disk) keeps them, readable and
// written by a later Sync.
func TestWriteBehindKeepsWhatItCouldNotWrite(t *testing.T) {
	dir := t.TempDir()
	opts := behindOptions(1 << 20)
	l := mustOpen(t, dir, opts)
	rs := mkrecs(1, 60, 1)
	mustAppend(t, l, rs[:20])
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, rs[20:])
	full := errors.New("injected ENOSPC")
	l.writeAt = func(vfs.File, []byte, int64) (int, error) { return 0, full }
	if err := l.Sync(); !errors.Is(err, full) {
		t.Fatalf("Sync with a failing write: %v", err)
	}
	expect(t, l, 1, 0, rs)
	// An append that must write what is held first, and cannot, appends
	// nothing.
	big := Record{Index: 60, Term: 1, Data: bytes.Repeat([]byte("x"), 4<<20)}
	if err := l.Append([]Record{big}); !errors.Is(err, full) {
		t.Fatalf("Append past the bound with a failing write: %v", err)
	}
	expect(t, l, 1, 0, rs)
	l.writeAt = vfs.File.WriteAt
	if err := l.Sync(); err != nil {
		t.Fatalf("Sync once the disk has room: %v", err)
	}
	mustClose(t, l)
	l = mustOpen(t, dir, opts)
	defer l.Close()
	expect(t, l, 1, 0, rs)
}

// TestWriteBehindDataNotShared: records read from memory are the ones
// appended, so appending to one's Data must not reach the next, even when
// the caller's records share one array.
func TestWriteBehindDataNotShared(t *testing.T) {
	l := mustOpen(t, t.TempDir(), behindOptions(1<<20))
	defer l.Close()
	buf := []byte("onetwo")
	mustAppend(t, l, []Record{{Index: 1, Term: 1, Data: buf[:3]}, {Index: 2, Term: 1, Data: buf[3:]}})
	got, err := l.Entries(1, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(got[0].Data, "XXX"...)
	if string(buf) != "onetwo" {
		t.Fatalf("appending to record 1's data changed record 2: %q", buf)
	}
}

// WouldDelete counts only the records written to the segments;
// WouldDeleteWritten writes the tail first, and so answers for the log as
// DeletePrefix will see it.
func TestWouldDeleteWrittenCountsTheTail(t *testing.T) {
	rs := mkrecs(1, 100, 1)
	l := mustOpen(t, t.TempDir(), behindOptions(1<<30))
	mustAppend(t, l, rs)
	if l.WouldDelete(90) {
		t.Fatal("WouldDelete counted records held in memory")
	}
	frees, err := l.WouldDeleteWritten(90)
	if err != nil || !frees {
		t.Fatalf("WouldDeleteWritten(90) = %v, %v with %d records in 2 KiB segments; want true", frees, err, len(rs))
	}
	if !l.WouldDelete(90) {
		t.Fatal("WouldDeleteWritten did not write the tail")
	}
	if n, err := l.DeletePrefix(90); err != nil || n == 0 {
		t.Fatalf("DeletePrefix(90) deleted %d segments, %v", n, err)
	}
	mustClose(t, l)
}
