package log

import (
	"herald/internal/vfs"

	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// payload returns the data of record i in term t: distinct per index and
// term, and of varying length.
func payload(i, t uint64) []byte {
	b := fmt.Appendf(nil, "record %d term %d|", i, t)
	for j := uint64(0); j < i%97; j++ {
		b = append(b, byte('a'+(i+j)%26))
	}
	return b
}

func mkrec(i, t uint64) Record {
	return Record{Index: i, Term: t, Type: uint8(i % 7), Data: payload(i, t)}
}

func mkrecs(lo, hi, t uint64) []Record {
	var rs []Record
	for i := lo; i < hi; i++ {
		rs = append(rs, mkrec(i, t))
	}
	return rs
}

func mustOpen(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return l
}

func mustAppend(t testing.TB, l *Log, rs []Record) {
	t.Helper()
	if err := l.Append(rs); err != nil {
		t.Fatalf("Append [%d, %d]: %v", rs[0].Index, rs[len(rs)-1].Index, err)
	}
}

func mustClose(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func recEqual(a, b Record) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type && bytes.Equal(a.Data, b.Data)
}

// expect checks that l holds exactly want, which starts at first, and that
// Term(first-1) is prevTerm.
func expect(t testing.TB, l *Log, first, prevTerm uint64, want []Record) {
	t.Helper()
	last := first + uint64(len(want)) - 1
	if got := l.FirstIndex(); got != first {
		t.Fatalf("FirstIndex = %d, want %d", got, first)
	}
	if got := l.LastIndex(); got != last {
		t.Fatalf("LastIndex = %d, want %d", got, last)
	}
	got, err := l.Entries(first, last+1, 0)
	if err != nil {
		t.Fatalf("Entries(%d, %d): %v", first, last+1, err)
	}
	if len(got) != len(want) {
		t.Fatalf("Entries(%d, %d) returned %d records, want %d", first, last+1, len(got), len(want))
	}
	for i := range want {
		if !recEqual(got[i], want[i]) {
			t.Fatalf("record %d = %+v, want %+v", want[i].Index, got[i], want[i])
		}
		if term, err := l.Term(want[i].Index); err != nil || term != want[i].Term {
			t.Fatalf("Term(%d) = %d, %v; want %d", want[i].Index, term, err, want[i].Term)
		}
	}
	if term, err := l.Term(first - 1); err != nil || term != prevTerm {
		t.Fatalf("Term(%d) = %d, %v; want %d", first-1, term, err, prevTerm)
	}
}

// segFiles returns the names of the segment files in dir.
func segFiles(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.Name() != stateFile {
			names = append(names, e.Name())
		}
	}
	return names
}

func TestAppendReadBack(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	if l.FirstIndex() != 1 || l.LastIndex() != 0 {
		t.Fatalf("new log: FirstIndex %d, LastIndex %d; want 1, 0", l.FirstIndex(), l.LastIndex())
	}
	if got := segFiles(t, dir); !slices.Equal(got, []string{"0000000000000001.seg"}) {
		t.Fatalf("new log files = %v", got)
	}
	var want []Record
	for lo, term := uint64(1), uint64(1); lo <= 300; term++ {
		hi := lo + term*7
		rs := mkrecs(lo, hi, term)
		mustAppend(t, l, rs)
		want = append(want, rs...)
		lo = hi
	}
	want = append(want, Record{Index: uint64(len(want) + 1), Term: 99}) // empty data
	mustAppend(t, l, want[len(want)-1:])
	expect(t, l, 1, 0, want)

	// A sub-range.
	got, err := l.Entries(50, 60, 0)
	if err != nil || len(got) != 10 || !recEqual(got[0], want[49]) || !recEqual(got[9], want[58]) {
		t.Fatalf("Entries(50, 60) = %d records, %v", len(got), err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)

	l = mustOpen(t, dir, Options{})
	defer l.Close()
	expect(t, l, 1, 0, want)
	next := uint64(len(want) + 1)
	mustAppend(t, l, mkrecs(next, next+5, 100))
	want = append(want, mkrecs(next, next+5, 100)...)
	expect(t, l, 1, 0, want)
}

func TestEntriesDataNotShared(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	defer l.Close()
	mustAppend(t, l, mkrecs(1, 4, 1))
	got, err := l.Entries(1, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Appending to one record's Data must not clobber the next record.
	_ = append(got[0].Data, "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"...)
	if !recEqual(got[1], mkrec(2, 1)) {
		t.Fatalf("record 2 changed after appending to record 1's data: %+v", got[1])
	}
}

func TestTerm(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentSize: 4096})
	defer l.Close()
	if term, err := l.Term(0); term != 0 || err != nil {
		t.Fatalf("new log Term(0) = %d, %v", term, err)
	}
	if _, err := l.Term(1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("new log Term(1) error = %v, want ErrUnavailable", err)
	}
	// Terms 1..5 with 40 records each, over several segments.
	for term := uint64(1); term <= 5; term++ {
		lo := (term-1)*40 + 1
		mustAppend(t, l, mkrecs(lo, lo+40, term))
	}
	for i := uint64(1); i <= 200; i++ {
		if term, err := l.Term(i); err != nil || term != (i-1)/40+1 {
			t.Fatalf("Term(%d) = %d, %v; want %d", i, term, err, (i-1)/40+1)
		}
	}
	if _, err := l.Term(201); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Term(201) error = %v, want ErrUnavailable", err)
	}

	n, err := l.DeletePrefix(100)
	if err != nil || n == 0 {
		t.Fatalf("DeletePrefix(100) = %d, %v", n, err)
	}
	first := l.FirstIndex()
	if first <= 1 || first > 100 {
		t.Fatalf("FirstIndex after DeletePrefix(100) = %d", first)
	}
	// FirstIndex-1 was deleted, but its term is kept in the segment header.
	if term, err := l.Term(first - 1); err != nil || term != (first-2)/40+1 {
		t.Fatalf("Term(FirstIndex-1 = %d) = %d, %v; want %d", first-1, term, err, (first-2)/40+1)
	}
	if _, err := l.Term(first - 2); !errors.Is(err, ErrCompacted) {
		t.Fatalf("Term(FirstIndex-2) error = %v, want ErrCompacted", err)
	}
	if term, err := l.Term(0); term != 0 || err != nil {
		t.Fatalf("Term(0) = %d, %v", term, err)
	}
}

func TestEntriesMaxBytes(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentSize: 1024})
	defer l.Close()
	var rs []Record
	for i := uint64(1); i <= 40; i++ {
		rs = append(rs, Record{Index: i, Term: 1, Data: bytes.Repeat([]byte{byte(i)}, 100)})
	}
	mustAppend(t, l, rs)
	if l.Segments() < 3 {
		t.Fatalf("want records spread over several segments, have %d", l.Segments())
	}
	for _, tc := range []struct {
		lo, hi, max uint64
		want        int
	}{
		{1, 41, 0, 40},
		{1, 41, 250, 2},
		{1, 41, 300, 3},
		{1, 41, 299, 2},
		{1, 41, 1, 1}, // always at least one
		{5, 6, 1, 1},
		{5, 41, 1000, 10}, // crosses segment boundaries
		{38, 41, 100000, 3},
		{7, 7, 0, 0},
	} {
		got, err := l.Entries(tc.lo, tc.hi, tc.max)
		if err != nil {
			t.Fatalf("Entries(%d, %d, %d): %v", tc.lo, tc.hi, tc.max, err)
		}
		if len(got) != tc.want {
			t.Fatalf("Entries(%d, %d, %d) returned %d records, want %d", tc.lo, tc.hi, tc.max, len(got), tc.want)
		}
		for k, r := range got {
			if !recEqual(r, rs[tc.lo-1+uint64(k)]) {
				t.Fatalf("Entries(%d, %d, %d)[%d] = %+v", tc.lo, tc.hi, tc.max, k, r)
			}
		}
	}
	if _, err := l.Entries(1, 42, 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Entries past the end: error %v, want ErrUnavailable", err)
	}
	if err := l.Reset(30, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Entries(29, 30, 0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("Entries below FirstIndex: error %v, want ErrCompacted", err)
	}
}

func TestSegmentRolling(t *testing.T) {
	dir := t.TempDir()
	const segSize = 4096
	l := mustOpen(t, dir, Options{SegmentSize: segSize})
	var want []Record
	for i := uint64(1); i <= 1000; i += 10 {
		rs := mkrecs(i, i+10, 1+i/300)
		mustAppend(t, l, rs)
		want = append(want, rs...)
	}
	names := segFiles(t, dir)
	if len(names) != l.Segments() || len(names) < 10 {
		t.Fatalf("%d segment files, Segments() = %d; want them equal and >= 10", len(names), l.Segments())
	}
	var total int64
	maxRec := recordSize(len(payload(96, 1)) + 10)
	for i, name := range names {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
		if fi.Size() >= segSize+maxRec {
			t.Fatalf("segment %s is %d bytes, more than one record past %d", name, fi.Size(), segSize)
		}
		// Every segment but the last was rolled because it filled up.
		if i < len(names)-1 && fi.Size() < segSize {
			t.Fatalf("segment %s was rolled at %d bytes, before reaching %d", name, fi.Size(), segSize)
		}
		l.mu.RLock()
		s := l.segs[i]
		l.mu.RUnlock()
		if name != segName(s.base, segSuffix) {
			t.Fatalf("segment %d is named %s but starts at index %d", i, name, s.base)
		}
	}
	if got := l.SizeBytes(); got != total {
		t.Fatalf("SizeBytes = %d, files total %d", got, total)
	}
	expect(t, l, 1, 0, want)
	mustClose(t, l)

	l = mustOpen(t, dir, Options{SegmentSize: segSize})
	defer l.Close()
	expect(t, l, 1, 0, want)
	if got := l.Segments(); got != len(names) {
		t.Fatalf("after reopen Segments() = %d, want %d", got, len(names))
	}
}

// TestRollSyncsFullSegment checks that a segment is fdatasynced before the
// next one is created, so that a crash can leave a torn record only in the
// last segment, where recovery may cut it away.
func TestRollSyncsFullSegment(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentSize: 1024})
	defer l.Close()
	var synced []vfs.File
	l.fsyncFile = func(f vfs.File) error {
		synced = append(synced, f)
		return f.SyncData()
	}
	first := l.active()
	mustAppend(t, l, mkrecs(1, 40, 1))
	if l.Segments() < 2 {
		t.Fatal("the batch did not roll")
	}
	second := l.segs[1]
	i := slices.Index(synced, first.h.f)
	j := slices.Index(synced, second.h.f)
	if i < 0 || j < 0 || i > j {
		t.Fatalf("fdatasync order %v: want the full segment %p synced before the new one %p", synced, first.h.f, second.h.f)
	}
}

func TestOpenOptions(t *testing.T) {
	if _, err := Open(t.TempDir(), Options{SegmentSize: headerSize}); err == nil {
		t.Fatal("Open with a segment size no larger than the header succeeded")
	}
	dir := filepath.Join(t.TempDir(), "a", "b")
	l := mustOpen(t, dir, Options{})
	defer l.Close()
	if l.segSize != DefaultSegmentSize {
		t.Fatalf("segment size %d, want DefaultSegmentSize", l.segSize)
	}
	if _, err := os.Stat(filepath.Join(dir, "0000000000000001.seg")); err != nil {
		t.Fatal(err)
	}
}

func TestTruncateSuffix(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 2048}
	l := mustOpen(t, dir, opts)
	want := mkrecs(1, 201, 1)
	mustAppend(t, l, want)
	segs := l.Segments()
	if segs < 5 {
		t.Fatalf("want several segments, have %d", segs)
	}

	// Within the last segment.
	if err := l.TruncateSuffix(199); err != nil {
		t.Fatal(err)
	}
	want = want[:198]
	expect(t, l, 1, 0, want)

	// Across segment boundaries: from lies in the second segment.
	l.mu.RLock()
	from := l.segs[1].base + 2
	l.mu.RUnlock()
	if err := l.TruncateSuffix(from); err != nil {
		t.Fatal(err)
	}
	want = want[:from-1]
	expect(t, l, 1, 0, want)
	if got := l.Segments(); got != 2 || len(segFiles(t, dir)) != 2 {
		t.Fatalf("after truncating into segment 2: Segments() = %d, files %v", got, segFiles(t, dir))
	}
	if got, _ := l.Term(from - 1); got != 1 {
		t.Fatalf("Term(%d) = %d after truncation", from-1, got)
	}
	if _, err := l.Term(from); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Term(%d) after truncation: %v, want ErrUnavailable", from, err)
	}

	// Append a new term after the truncation, then beyond the next roll.
	more := mkrecs(from, from+100, 2)
	mustAppend(t, l, more)
	want = append(want, more...)
	expect(t, l, 1, 0, want)

	// Beyond the end is a no-op; below the start is an error.
	if err := l.TruncateSuffix(1000); err != nil {
		t.Fatal(err)
	}
	expect(t, l, 1, 0, want)
	mustClose(t, l)

	l = mustOpen(t, dir, opts)
	expect(t, l, 1, 0, want)

	// Truncating everything leaves an empty log that keeps its start.
	if err := l.TruncateSuffix(1); err != nil {
		t.Fatal(err)
	}
	expect(t, l, 1, 0, nil)
	if got := segFiles(t, dir); len(got) != 1 {
		t.Fatalf("files after truncating everything: %v", got)
	}
	mustAppend(t, l, mkrecs(1, 3, 5))
	expect(t, l, 1, 0, mkrecs(1, 3, 5))
	mustClose(t, l)
	l = mustOpen(t, dir, opts)
	defer l.Close()
	expect(t, l, 1, 0, mkrecs(1, 3, 5))

	if err := l.Reset(10, 3); err != nil {
		t.Fatal(err)
	}
	if err := l.TruncateSuffix(9); !errors.Is(err, ErrCompacted) {
		t.Fatalf("TruncateSuffix below FirstIndex: %v, want ErrCompacted", err)
	}
}

func TestAppendOverwrite(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 1024}
	l := mustOpen(t, dir, opts)
	mustAppend(t, l, mkrecs(1, 60, 1))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	// A new leader overwrites the tail from 20 on, spanning segments.
	mustAppend(t, l, mkrecs(20, 25, 2))
	want := append(mkrecs(1, 20, 1), mkrecs(20, 25, 2)...)
	expect(t, l, 1, 0, want)
	// Overwriting the very last record.
	mustAppend(t, l, mkrecs(24, 26, 3))
	want = append(want[:23], mkrecs(24, 26, 3)...)
	expect(t, l, 1, 0, want)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	l = mustOpen(t, dir, opts)
	defer l.Close()
	expect(t, l, 1, 0, want)
}

func TestAppendRejectsBadBatch(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentSize: 1024})
	defer l.Close()
	want := mkrecs(1, 30, 1)
	mustAppend(t, l, want)
	size, segs := l.SizeBytes(), l.Segments()

	bad := map[string][]Record{
		"gap":              mkrecs(32, 35, 1),
		"non-consecutive":  {mkrec(30, 1), mkrec(31, 1), mkrec(33, 1)},
		"repeated index":   {mkrec(30, 1), mkrec(30, 1)},
		"overlap then gap": {mkrec(10, 2), mkrec(12, 2)},
	}
	for name, rs := range bad {
		if err := l.Append(rs); err == nil {
			t.Fatalf("%s: Append succeeded", name)
		}
		expect(t, l, 1, 0, want)
		if l.SizeBytes() != size || l.Segments() != segs {
			t.Fatalf("%s: size %d segments %d changed from %d, %d", name, l.SizeBytes(), l.Segments(), size, segs)
		}
	}
	if err := l.Append(nil); err != nil {
		t.Fatalf("empty Append: %v", err)
	}

	if err := l.Reset(100, 4); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(mkrecs(99, 101, 4)); !errors.Is(err, ErrCompacted) {
		t.Fatalf("Append below FirstIndex: %v, want ErrCompacted", err)
	}
	expect(t, l, 100, 4, nil)
}

func TestDeletePrefix(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 2048}
	l := mustOpen(t, dir, opts)
	want := mkrecs(1, 301, 1)
	mustAppend(t, l, want)
	l.mu.RLock()
	var bases []uint64
	for _, s := range l.segs {
		bases = append(bases, s.base)
	}
	l.mu.RUnlock()
	if len(bases) < 6 {
		t.Fatalf("want at least 6 segments, have %d", len(bases))
	}

	// Below the end of the first segment: nothing to delete.
	if n, err := l.DeletePrefix(bases[1] - 1); n != 0 || err != nil {
		t.Fatalf("DeletePrefix(%d) = %d, %v; want 0", bases[1]-1, n, err)
	}
	// Exactly the start of segment 3: segments 0, 1 and 2 are wholly below.
	if n, err := l.DeletePrefix(bases[3]); n != 3 || err != nil {
		t.Fatalf("DeletePrefix(%d) = %d, %v; want 3", bases[3], n, err)
	}
	expect(t, l, bases[3], 1, want[bases[3]-1:])
	// One past the start of segment 4: segment 3 goes, 4 stays partially
	// below the bound.
	if n, err := l.DeletePrefix(bases[4] + 1); n != 1 || err != nil {
		t.Fatalf("DeletePrefix(%d) = %d, %v; want 1", bases[4]+1, n, err)
	}
	expect(t, l, bases[4], 1, want[bases[4]-1:])
	if got := len(segFiles(t, dir)); got != len(bases)-4 || got != l.Segments() {
		t.Fatalf("%d files, Segments() = %d, want %d", got, l.Segments(), len(bases)-4)
	}
	if _, err := l.Entries(bases[4]-1, bases[4]+1, 0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("Entries below FirstIndex: %v", err)
	}

	// Everything: the active segment survives.
	if n, err := l.DeletePrefix(1 << 40); n != len(bases)-5 || err != nil {
		t.Fatalf("DeletePrefix(huge) = %d, %v; want %d", n, err, len(bases)-5)
	}
	last := bases[len(bases)-1]
	expect(t, l, last, 1, want[last-1:])
	if n, err := l.DeletePrefix(1 << 40); n != 0 || err != nil {
		t.Fatalf("second DeletePrefix(huge) = %d, %v", n, err)
	}
	mustAppend(t, l, mkrecs(301, 305, 2))
	want = append(want, mkrecs(301, 305, 2)...)
	mustClose(t, l)

	l = mustOpen(t, dir, opts)
	defer l.Close()
	expect(t, l, last, 1, want[last-1:])
}

// TestKeepFrom checks the two questions tiering asks a log: up to where
// its segments are closed, and from where it keeps a number of bytes.
func TestKeepFrom(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentSize: 2048})
	defer l.Close()
	if got := l.ClosedThrough(); got != 0 {
		t.Fatalf("ClosedThrough of an empty log = %d, want 0", got)
	}
	mustAppend(t, l, mkrecs(1, 301, 1))
	l.mu.RLock()
	var bases []uint64
	var sizes []int64
	for _, s := range l.segs {
		bases, sizes = append(bases, s.base), append(sizes, s.size)
	}
	l.mu.RUnlock()
	n := len(bases)
	if n < 4 {
		t.Fatalf("want at least 4 segments, have %d", n)
	}
	if got := l.ClosedThrough(); got != bases[n-1]-1 {
		t.Fatalf("ClosedThrough = %d, want %d (the record before the active segment)", got, bases[n-1]-1)
	}
	if got := l.KeepFrom(1); got != bases[n-1] {
		t.Fatalf("KeepFrom(1) = %d, want the active segment's base %d", got, bases[n-1])
	}
	// Exactly the last two segments' bytes: both stay, no more.
	if got := l.KeepFrom(sizes[n-1] + sizes[n-2]); got != bases[n-2] {
		t.Fatalf("KeepFrom(last two) = %d, want %d", got, bases[n-2])
	}
	// One byte more needs a third segment.
	if got := l.KeepFrom(sizes[n-1] + sizes[n-2] + 1); got != bases[n-3] {
		t.Fatalf("KeepFrom(last two + 1) = %d, want %d", got, bases[n-3])
	}
	if got := l.KeepFrom(1 << 40); got != bases[0] {
		t.Fatalf("KeepFrom(more than the log) = %d, want the first base %d", got, bases[0])
	}
	// What KeepFrom answers is what DeletePrefix keeps.
	keep := sizes[n-1] + sizes[n-2] + 1
	if _, err := l.DeletePrefix(l.KeepFrom(keep)); err != nil {
		t.Fatal(err)
	}
	if l.SizeBytes() < keep || l.Segments() != 3 {
		t.Fatalf("after DeletePrefix(KeepFrom(%d)): %d bytes in %d segments", keep, l.SizeBytes(), l.Segments())
	}
}

func TestReset(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 1024}
	l := mustOpen(t, dir, opts)
	mustAppend(t, l, mkrecs(1, 100, 1))
	if err := l.Reset(500, 7); err != nil {
		t.Fatal(err)
	}
	expect(t, l, 500, 7, nil)
	if _, err := l.Term(498); !errors.Is(err, ErrCompacted) {
		t.Fatalf("Term(498) after Reset(500): %v", err)
	}
	if err := l.Append(mkrecs(501, 502, 7)); err == nil {
		t.Fatal("Append leaving a gap after Reset succeeded")
	}
	if got := segFiles(t, dir); !slices.Equal(got, []string{"00000000000001f4.seg"}) {
		t.Fatalf("files after Reset: %v", got)
	}
	mustAppend(t, l, mkrecs(500, 520, 8))
	mustClose(t, l)

	l = mustOpen(t, dir, opts)
	expect(t, l, 500, 7, mkrecs(500, 520, 8))

	// Reset to an index below the current log, reusing a segment name.
	if err := l.Reset(500, 2); err != nil {
		t.Fatal(err)
	}
	expect(t, l, 500, 2, nil)
	mustClose(t, l)
	l = mustOpen(t, dir, opts)
	defer l.Close()
	expect(t, l, 500, 2, nil)
	if err := l.Reset(0, 0); err == nil {
		t.Fatal("Reset(0, 0) succeeded")
	}
}

func TestOpenFinishesInterruptedReset(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentSize: 1024})
	mustAppend(t, l, mkrecs(1, 100, 1))
	mustClose(t, l)

	// A crash after Reset made its new segment durable but before it
	// deleted the old ones: Open must finish the reset.
	hdr := encodeHeader(segHeader{base: 300, prevTerm: 9})
	if err := os.WriteFile(filepath.Join(dir, segName(300, resetSuffix)), hdr, 0o644); err != nil {
		t.Fatal(err)
	}
	// And a roll that never got its segment renamed into place.
	tmp := filepath.Join(dir, segName(100, tmpSuffix))
	if err := os.WriteFile(tmp, hdr[:10], 0o644); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Options{SegmentSize: 1024})
	expect(t, l, 300, 9, nil)
	if got := segFiles(t, dir); !slices.Equal(got, []string{segName(300, segSuffix)}) {
		t.Fatalf("files after finishing the reset: %v", got)
	}
	mustAppend(t, l, mkrecs(300, 310, 9))
	mustClose(t, l)

	// A crash while the reset segment was still being written: Open must
	// discard it and keep the log.
	bad := encodeHeader(segHeader{base: 900, prevTerm: 9})
	bad[headerSize-1] ^= 1
	for _, partial := range [][]byte{bad[:20], bad} {
		if err := os.WriteFile(filepath.Join(dir, segName(900, resetSuffix)), partial, 0o644); err != nil {
			t.Fatal(err)
		}
		l = mustOpen(t, dir, Options{SegmentSize: 1024})
		expect(t, l, 300, 9, mkrecs(300, 310, 9))
		if got := segFiles(t, dir); !slices.Equal(got, []string{segName(300, segSuffix)}) {
			t.Fatalf("files after discarding the reset: %v", got)
		}
		mustClose(t, l)
	}
}

func TestClosed(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	mustAppend(t, l, mkrecs(1, 3, 1))
	mustClose(t, l)
	if err := l.Append(mkrecs(3, 4, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close: %v", err)
	}
	if _, err := l.Entries(1, 2, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Entries after Close: %v", err)
	}
	if _, err := l.Term(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Term after Close: %v", err)
	}
	if _, err := l.DeletePrefix(2); !errors.Is(err, ErrClosed) {
		t.Fatalf("DeletePrefix after Close: %v", err)
	}
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

// TestConcurrent runs a writer, readers, a compactor and syncers at once;
// it is meant for -race, and also checks every record read is intact.
func TestConcurrent(t *testing.T) {
	t.Run("direct", func(t *testing.T) { testConcurrent(t, Options{SegmentSize: 8 << 10}) })
	t.Run("behind", func(t *testing.T) {
		testConcurrent(t, Options{SegmentSize: 8 << 10, UnsyncedElsewhere: true, WriteBehind: 1 << 10})
	})
}

// testConcurrent runs a writer, readers, a compactor and a syncer on one
// log at once; the writer of a log writing behind also writes behind.
func testConcurrent(t *testing.T, opts Options) {
	l := mustOpen(t, t.TempDir(), opts)
	defer l.Close()
	const total = 3000
	all := mkrecs(0, total+20, 1) // all[i] is record i
	var done atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	report := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}

	wg.Add(1)
	go func() { // the writer, with an occasional overwrite of its own tail
		defer wg.Done()
		defer done.Store(true)
		for i := uint64(1); i <= total; {
			n := 1 + i%13
			if err := l.Append(all[i : i+n]); err != nil {
				report(err)
				return
			}
			if err := l.WriteBehind(); err != nil {
				report(err)
				return
			}
			if i%7 == 0 {
				// Rewrite the last record with identical content, which
				// truncates and re-appends it.
				if err := l.Append(all[i+n-1 : i+n]); err != nil {
					report(err)
					return
				}
				if err := l.Sync(); err != nil {
					report(err)
					return
				}
			}
			i += n
		}
	}()
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
				first, last := l.FirstIndex(), l.LastIndex()
				if last < first {
					continue
				}
				rs, err := l.Entries(first, last+1, 4096)
				if errors.Is(err, ErrCompacted) || errors.Is(err, ErrUnavailable) {
					continue // the log moved between the calls
				}
				if err != nil {
					report(err)
					return
				}
				for k, rec := range rs {
					if want := all[first+uint64(k)]; !recEqual(rec, want) {
						report(fmt.Errorf("read %+v, want %+v", rec, want))
						return
					}
				}
				runtime.Gosched() // leave the writer some CPU
				if term, err := l.Term(last); err == nil && term != 1 {
					report(fmt.Errorf("Term(%d) = %d", last, term))
					return
				}
			}
		}()
	}
	wg.Add(2)
	go func() { // the compactor
		defer wg.Done()
		for !done.Load() {
			if last := l.LastIndex(); last > 200 {
				if _, err := l.DeletePrefix(last - 200); err != nil {
					report(err)
					return
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	go func() { // a syncer
		defer wg.Done()
		for !done.Load() {
			if err := l.Sync(); err != nil {
				report(err)
				return
			}
		}
	}()
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if l.LastIndex() < total {
		t.Fatalf("LastIndex = %d, want >= %d", l.LastIndex(), total)
	}
	first := l.FirstIndex()
	if first == 1 {
		t.Fatal("DeletePrefix never deleted anything")
	}
	rs, err := l.Entries(first, l.LastIndex()+1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for k, rec := range rs {
		if !recEqual(rec, mkrec(first+uint64(k), 1)) {
			t.Fatalf("final read of %d: %+v", first+uint64(k), rec)
		}
	}
}

// TestGroupCommit checks that concurrent Syncs share fdatasyncs.
func TestGroupCommit(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	// Make each fdatasync slow enough that callers always pile up.
	l.fsyncFile = func(f vfs.File) error {
		time.Sleep(2 * time.Millisecond)
		return f.SyncData()
	}
	const workers, rounds = 64, 10
	var mu sync.Mutex // makes "next index, Append" atomic across workers
	var wg sync.WaitGroup
	var calls atomic.Uint64
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				mu.Lock()
				i := l.LastIndex() + 1
				err := l.Append([]Record{mkrec(i, 1)})
				mu.Unlock()
				if err == nil {
					err = l.Sync()
					calls.Add(1)
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	syncs := l.SyncCount()
	t.Logf("%d Sync calls, %d fdatasyncs", calls.Load(), syncs)
	if syncs >= calls.Load()/2 {
		t.Fatalf("%d fdatasyncs for %d Sync calls: group commit is not sharing them", syncs, calls.Load())
	}
	expect(t, l, 1, 0, mkrecs(1, workers*rounds+1, 1))
	mustClose(t, l)
}

// TestSyncLeaderFollower checks the group-commit protocol step by step: a
// Sync arriving during an in-flight fdatasync waits for it, and then one
// more fdatasync covers every waiter. Reads and Appends proceed meanwhile.
func TestSyncLeaderFollower(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	defer l.Close()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	var calls atomic.Int32
	l.fsyncFile = func(f vfs.File) error {
		if calls.Add(1) == 1 {
			started <- struct{}{}
			<-release
		}
		return f.SyncData()
	}
	base := l.SyncCount()
	mustAppend(t, l, mkrecs(1, 2, 1))
	leader := make(chan error, 1)
	go func() { leader <- l.Sync() }()
	select {
	case <-started:
	case err := <-leader:
		t.Fatalf("Sync after an Append returned (%v) without calling fdatasync", err)
	}

	// The leader is inside fdatasync: readers and the writer carry on.
	mustAppend(t, l, mkrecs(2, 5, 1))
	if rs, err := l.Entries(1, 5, 0); err != nil || len(rs) != 4 {
		t.Fatalf("Entries during a sync: %d records, %v", len(rs), err)
	}
	followers := make(chan error, 10)
	for range 10 {
		go func() { followers <- l.Sync() }()
	}
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-followers:
		t.Fatalf("a Sync returned (%v) before the in-flight fdatasync finished", err)
	default:
	}
	close(release)
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := <-followers; err != nil {
			t.Fatal(err)
		}
	}
	if got := l.SyncCount() - base; got != 2 {
		t.Fatalf("%d fdatasyncs, want 2: the leader's and one shared by all followers", got)
	}
	// Nothing new: no fdatasync at all.
	if err := l.Sync(); err != nil || l.SyncCount()-base != 2 {
		t.Fatalf("idle Sync: %v, %d fdatasyncs", err, l.SyncCount()-base)
	}
}

func TestSyncFailureIsSticky(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	mustAppend(t, l, mkrecs(1, 10, 1))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	eio := errors.New("injected EIO")
	l.fsyncFile = func(vfs.File) error { return eio }
	mustAppend(t, l, mkrecs(10, 12, 1))
	if err := l.Sync(); !errors.Is(err, eio) {
		t.Fatalf("Sync with failing fdatasync: %v", err)
	}
	l.fsyncFile = vfs.File.SyncData
	if err := l.Append(mkrecs(12, 13, 1)); !errors.Is(err, eio) || !strings.Contains(err.Error(), "reopen") {
		t.Fatalf("Append after a failed sync: %v", err)
	}
	if err := l.Sync(); !errors.Is(err, eio) {
		t.Fatalf("second Sync after a failed sync: %v", err)
	}
	// Reads still work.
	if rs, err := l.Entries(1, 12, 0); err != nil || len(rs) != 11 {
		t.Fatalf("Entries after a failed sync: %d, %v", len(rs), err)
	}
	if err := l.Close(); !errors.Is(err, eio) {
		t.Fatalf("Close of a failed log: %v", err)
	}
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	l = mustOpen(t, dir, Options{})
	defer l.Close()
	if l.LastIndex() < 9 {
		t.Fatalf("records synced before the failure are gone: LastIndex %d", l.LastIndex())
	}
	mustAppend(t, l, mkrecs(l.LastIndex()+1, l.LastIndex()+2, 1))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
}

// removeGate is a file system whose Remove of a segment waits until
// released, after saying it has begun.
type removeGate struct {
	vfs.FS
	begun   chan string
	release chan struct{}
}

func (g *removeGate) Remove(name string) error {
	if strings.HasSuffix(name, segSuffix) || strings.HasSuffix(name, deletingSuffix) {
		g.begun <- name
		<-g.release
	}
	return g.FS.Remove(name)
}

// TestDeletePrefixLetsAppendsGoOn checks that removing the files of
// deleted segments, which takes milliseconds per full segment on ext4,
// does not hold up appends, and that a Reset naming a segment being
// removed waits for the removal rather than lose its new segment to it.
func TestDeletePrefixLetsAppendsGoOn(t *testing.T) {
	dir := t.TempDir()
	gate := &removeGate{FS: vfs.OS, begun: make(chan string), release: make(chan struct{})}
	l := mustOpen(t, dir, Options{SegmentSize: 2048, FS: gate})
	mustAppend(t, l, mkrecs(1, 301, 1))
	second := l.segs[1].base

	deleted := make(chan error, 1)
	go func() {
		_, err := l.DeletePrefix(second + 1)
		deleted <- err
	}()
	<-gate.begun // removing the first segment's file
	appended := make(chan error, 1)
	go func() { appended <- l.Append(mkrecs(301, 311, 1)) }()
	select {
	case err := <-appended:
		if err != nil {
			t.Fatalf("append while a segment's file is removed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("append waited for DeletePrefix to remove its files")
	}
	reset := make(chan error, 1)
	go func() { reset <- l.Reset(second, 1) }() // the name of the segment to remove next
	close(gate.release)
	stop := make(chan struct{})
	var drain sync.WaitGroup
	drain.Go(func() { // the removals still to come
		for {
			select {
			case <-gate.begun:
			case <-stop:
				return
			}
		}
	})
	if err := <-deleted; err != nil {
		t.Fatalf("DeletePrefix: %v", err)
	}
	if err := <-reset; err != nil {
		t.Fatalf("Reset: %v", err)
	}
	close(stop)
	drain.Wait()
	mustAppend(t, l, mkrecs(second, second+5, 2))
	mustClose(t, l)
	l = mustOpen(t, dir, Options{SegmentSize: 2048})
	defer l.Close()
	expect(t, l, second, 1, mkrecs(second, second+5, 2))
}

// TestWritebackCoversWhatIsWritten checks that a log with WritebackEvery
// asks for the writeback of each segment's bytes, in order, without gaps
// or overlaps, once per WritebackEvery bytes or more, and that one
// without it never asks.
func TestWritebackCoversWhatIsWritten(t *testing.T) {
	for _, every := range []int64{0, 1000} {
		l := mustOpen(t, t.TempDir(), Options{SegmentSize: 8192, WritebackEvery: every})
		next := map[string]int64{} // per file, where the next range must start
		asked := 0
		l.startWriteback = func(f vfs.File, off, n int64) {
			// A segment is written under a temporary name until it is
			// renamed into place.
			name := strings.TrimSuffix(f.Name(), tmpSuffix)
			name = strings.TrimSuffix(name, segSuffix) + segSuffix
			if off != next[name] || n < every {
				t.Errorf("writeback of %s [%d, %d); want a range of at least %d from %d", name, off, off+n, every, next[name])
			}
			next[name] = off + n
			asked++
		}
		for i := uint64(1); i < 400; i += 10 {
			mustAppend(t, l, mkrecs(i, i+10, 1))
		}
		l.mu.RLock()
		for _, s := range l.segs {
			if every > 0 && s.size-next[s.path] >= every {
				t.Errorf("segment %s: %d bytes, written back up to %d", s.path, s.size, next[s.path])
			}
		}
		l.mu.RUnlock()
		if every == 0 && asked != 0 || every > 0 && asked < 10 {
			t.Errorf("WritebackEvery %d: %d writebacks asked", every, asked)
		}
		mustClose(t, l)
	}
}

// A deleted segment's file is renamed, the rename made durable, and only
// then emptied a step at a time and unlinked: on a disk mounted with
// discard, one unlink of a full segment would hold every fdatasync behind
// its discard. A failure or crash while it is emptied leaves a file that
// recovery removes, never a segment cut short under its own name (which
// recovery would find followed by a gap and call damage).
func TestDeletedSegmentsAreEmptiedInStepsSafely(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprint("fail=", fail), func(t *testing.T) {
			fs := vfs.NewMem()
			l := mustOpen(t, "/log", Options{SegmentSize: 2048, FS: fs})
			l.removeStep = 256
			mustAppend(t, l, mkrecs(1, 301, 1))
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			third := l.segs[2].base
			var truncates atomic.Int64
			fs.SetInjector(func(op vfs.Op) error {
				if op.Kind != vfs.OpTruncate {
					return nil
				}
				if !strings.HasSuffix(op.Path, deletingSuffix) {
					t.Errorf("truncate of %s: only a file renamed for deletion may be cut", op.Path)
				}
				if truncates.Add(1) == 2 && fail {
					return vfs.InjectedError(op, syscall.EIO)
				}
				return nil
			})
			_, err := l.DeletePrefix(third)
			fs.SetInjector(nil)
			if fail != (err != nil) {
				t.Fatalf("DeletePrefix with a failing cut: %v = %v", fail, err)
			}
			if n := truncates.Load(); n < 2 {
				t.Fatalf("%d cuts of the deleted files, want several steps", n)
			}
			names, err := fs.ReadDir("/log")
			if err != nil {
				t.Fatal(err)
			}
			left := slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, deletingSuffix) })
			if left != fail {
				t.Fatalf("files after DeletePrefix: %v", names)
			}

			l2 := mustOpen(t, "/log", Options{SegmentSize: 2048, FS: fs.CrashClone(nil)})
			defer l2.Close()
			expect(t, l2, third, 1, mkrecs(third, 301, 1))
			names, err = l2.fs.ReadDir("/log")
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, deletingSuffix) }) {
				t.Fatalf("recovery left a deleted segment's file: %v", names)
			}
			mustClose(t, l)
		})
	}
}
