package log

import (
	"herald/internal/vfs"

	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

const corruptSegSize = 2048

// buildLog writes records [1, n] in term 1 into a new log in dir, closes
// it, and returns where each record lives.
func buildLog(t *testing.T, dir string, n uint64) map[uint64]recLoc {
	t.Helper()
	l := mustOpen(t, dir, Options{SegmentSize: corruptSegSize})
	mustAppend(t, l, mkrecs(1, n+1, 1))
	locs := make(map[uint64]recLoc)
	for k, s := range l.segs {
		for i := s.base; i < s.next(); i++ {
			locs[i] = recLoc{path: s.path, off: s.pos[i-s.base], end: s.end(i), seg: k, last: k == len(l.segs)-1}
		}
	}
	mustClose(t, l)
	return locs
}

// buildCrashedLog is buildLog for a log whose machine then lost power: it
// is written in another boot and never closed, so recovery may take a
// damaged final record for a torn write.
func buildCrashedLog(t *testing.T, dir string, n uint64) map[uint64]recLoc {
	t.Helper()
	l := mustOpen(t, dir, Options{SegmentSize: corruptSegSize, BootID: "an earlier boot"})
	mustAppend(t, l, mkrecs(1, n+1, 1))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	locs := make(map[uint64]recLoc)
	for k, s := range l.segs {
		for i := s.base; i < s.next(); i++ {
			locs[i] = recLoc{path: s.path, off: s.pos[i-s.base], end: s.end(i), seg: k, last: k == len(l.segs)-1}
		}
		s.h.close()
	}
	return locs
}

type recLoc struct {
	path     string
	off, end int64
	seg      int
	last     bool // in the last segment
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// wantCorruption checks that opening dir fails with a CorruptionError at
// path and off, with a message an operator can act on.
func wantCorruption(t *testing.T, dir, path string, off int64) {
	t.Helper()
	wantCorruptionOpening(t, dir, Options{SegmentSize: corruptSegSize}, path, off)
}

// wantCorruptionOpening is wantCorruption for a log opened with opts.
func wantCorruptionOpening(t *testing.T, dir string, opts Options, path string, off int64) {
	t.Helper()
	sizeBefore := fileSize(t, path)
	l, err := Open(dir, opts)
	if err == nil {
		l.Close()
		t.Fatalf("Open succeeded on a damaged log (%s at %d)", path, off)
	}
	var ce *CorruptionError
	if !errors.As(err, &ce) {
		t.Fatalf("Open error %v is not a *CorruptionError", err)
	}
	if ce.File != path || ce.Offset != off {
		t.Fatalf("CorruptionError names %s at %d, want %s at %d (%v)", ce.File, ce.Offset, path, off, err)
	}
	msg := err.Error()
	for _, s := range []string{path, "offset " + strconv.FormatInt(off, 10)} {
		if !strings.Contains(msg, s) {
			t.Fatalf("error %q does not mention %q", msg, s)
		}
	}
	if got := fileSize(t, path); got != sizeBefore {
		t.Fatalf("failed Open changed %s from %d to %d bytes", path, sizeBefore, got)
	}
}

func TestCorruptRecordInLastSegment(t *testing.T) {
	dir := t.TempDir()
	locs := buildLog(t, dir, 300)
	// A record in the middle of the last segment, with records after it.
	last := locs[300]
	var victim uint64
	for i := uint64(300); locs[i].seg == last.seg; i-- {
		victim = i
	}
	victim = (victim + 300) / 2
	loc := locs[victim]
	if !loc.last || victim == 300 {
		t.Fatalf("bad test setup: record %d in segment %d", victim, loc.seg)
	}
	flipByte(t, loc.path, (loc.off+loc.end)/2)
	wantCorruption(t, dir, loc.path, loc.off)
}

func TestCorruptRecordInMiddle(t *testing.T) {
	for _, field := range []struct {
		name  string
		delta int64 // from the record start
	}{
		{"length", 0}, {"crc", 5}, {"index", 9}, {"term", 17}, {"data", 30},
	} {
		t.Run(field.name, func(t *testing.T) {
			dir := t.TempDir()
			locs := buildLog(t, dir, 300)
			loc := locs[150]
			if loc.last {
				t.Fatal("bad test setup: record 150 in the last segment")
			}
			flipByte(t, loc.path, loc.off+field.delta)
			wantCorruption(t, dir, loc.path, loc.off)
		})
	}
}

func TestCorruptLastRecordOfNonLastSegment(t *testing.T) {
	dir := t.TempDir()
	locs := buildLog(t, dir, 300)
	// The last record of the first segment ends exactly at its EOF, which
	// in the last segment would pass for a torn write; here it must not.
	var i uint64 = 1
	for locs[i+1].seg == 0 {
		i++
	}
	loc := locs[i]
	flipByte(t, loc.path, loc.end-1)
	wantCorruption(t, dir, loc.path, loc.off)
}

func TestTornRecordInNonLastSegment(t *testing.T) {
	dir := t.TempDir()
	locs := buildLog(t, dir, 300)
	loc := locs[1]
	var i uint64 = 1
	for locs[i+1].seg == 0 {
		i++
	}
	cut := locs[i]
	if err := os.Truncate(loc.path, cut.off+(cut.end-cut.off)/2); err != nil {
		t.Fatal(err)
	}
	wantCorruption(t, dir, cut.path, cut.off)
}

func TestCorruptSegmentHeader(t *testing.T) {
	for _, delta := range []int64{0, 5, 9, 17, 29} {
		dir := t.TempDir()
		locs := buildLog(t, dir, 300)
		path := locs[300].path // even the last segment's header must be intact
		flipByte(t, path, delta)
		l, err := Open(dir, Options{SegmentSize: corruptSegSize})
		var ce *CorruptionError
		if err == nil || !errors.As(err, &ce) || ce.File != path {
			if l != nil {
				l.Close()
			}
			t.Fatalf("header byte %d flipped: Open error %v, want a CorruptionError for %s", delta, err, path)
		}
	}
}

func TestMissingSegment(t *testing.T) {
	dir := t.TempDir()
	locs := buildLog(t, dir, 300)
	if err := os.Remove(locs[1+0].path); err != nil {
		t.Fatal(err)
	}
	// Removing the first segment is just compaction; removing one in the
	// middle is a hole.
	l := mustOpen(t, dir, Options{SegmentSize: corruptSegSize})
	mustClose(t, l)
	var mid uint64 = 150
	if err := os.Remove(locs[mid].path); err != nil {
		t.Fatal(err)
	}
	var next uint64 = mid
	for locs[next].seg == locs[mid].seg {
		next++
	}
	wantCorruption(t, dir, locs[next].path, 8)
}

func TestSegmentPrevTermMismatch(t *testing.T) {
	dir := t.TempDir()
	locs := buildLog(t, dir, 300)
	path := locs[150].path
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	h.prevTerm = 99 // well formed, but the previous segment ends in term 1
	copy(b, encodeHeader(h))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	wantCorruption(t, dir, path, 16)
}

func TestRecordOutOfSequence(t *testing.T) {
	dir := t.TempDir()
	locs := buildLog(t, dir, 300)
	loc := locs[150]
	// A well-formed record with a valid checksum, but the wrong index.
	r := mkrec(150, 1)
	r.Index = 1150
	f, err := os.OpenFile(loc.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(appendRecord(nil, &r), loc.off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wantCorruption(t, dir, loc.path, loc.off)
}

func TestSegmentRenamed(t *testing.T) {
	dir := t.TempDir()
	locs := buildLog(t, dir, 300)
	path := locs[300].path
	renamed := dir + "/" + segName(9999, segSuffix)
	if err := os.Rename(path, renamed); err != nil {
		t.Fatal(err)
	}
	wantCorruption(t, dir, renamed, 8)
}

// recoversTo opens dir, expects records [1, last] intact, and checks that
// appending continues and survives a reopen.
func recoversTo(t *testing.T, dir string, last uint64) {
	t.Helper()
	l := mustOpen(t, dir, Options{SegmentSize: corruptSegSize})
	expect(t, l, 1, 0, mkrecs(1, last+1, 1))
	mustAppend(t, l, mkrecs(last+1, last+20, 2))
	mustClose(t, l)
	l = mustOpen(t, dir, Options{SegmentSize: corruptSegSize})
	defer l.Close()
	expect(t, l, 1, 0, append(mkrecs(1, last+1, 1), mkrecs(last+1, last+20, 2)...))
}

func TestTornLastRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(loc recLoc) int64
	}{
		{"half", func(loc recLoc) int64 { return (loc.off + loc.end) / 2 }},
		{"inside frame", func(loc recLoc) int64 { return loc.off + 3 }},
		{"after frame", func(loc recLoc) int64 { return loc.off + frameSize + 1 }},
		{"one byte short", func(loc recLoc) int64 { return loc.end - 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			locs := buildLog(t, dir, 300)
			loc := locs[300]
			if err := os.Truncate(loc.path, tc.cut(loc)); err != nil {
				t.Fatal(err)
			}
			recoversTo(t, dir, 299)
		})
	}
}

// A damaged last record that ends exactly at the end of the file may have
// been synced and acknowledged; it is cut only after a power loss.
func TestBadChecksumAtEOF(t *testing.T) {
	t.Run("after a power loss", func(t *testing.T) {
		dir := t.TempDir()
		loc := buildCrashedLog(t, dir, 300)[300]
		flipByte(t, loc.path, loc.end-1)
		recoversTo(t, dir, 299)
	})
	t.Run("after a clean close", func(t *testing.T) {
		dir := t.TempDir()
		loc := buildLog(t, dir, 300)[300]
		flipByte(t, loc.path, loc.end-1)
		wantCorruption(t, dir, loc.path, loc.off)
	})
	t.Run("after a process crash", func(t *testing.T) {
		dir := t.TempDir()
		l := mustOpen(t, dir, Options{SegmentSize: corruptSegSize, BootID: "this boot"})
		mustAppend(t, l, mkrecs(1, 301, 1))
		s := l.active()
		path, off, end := s.path, s.pos[len(s.pos)-1], s.size
		abandon(l)
		flipByte(t, path, end-1)
		_, err := Open(dir, Options{SegmentSize: corruptSegSize, BootID: "this boot"})
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.File != path || ce.Offset != off || !strings.Contains(err.Error(), "has not restarted") {
			t.Fatalf("Open after a process crash and a flipped bit: %v; want corruption of %s at %d", err, path, off)
		}
	})
}

// abandon drops l as a killed process would: nothing synced, nothing
// marked clean.
func abandon(l *Log) {
	l.spare.close() // a killed process zeroes nothing more
	for _, s := range l.segs {
		s.h.close()
	}
}

// A length field that points past the end of the file, in the middle of
// the last segment, is damage: the records after it are intact.
func TestLengthPastEOFInMiddleOfLastSegment(t *testing.T) {
	dir := t.TempDir()
	locs := buildCrashedLog(t, dir, 300)
	last := locs[300]
	victim := uint64(300)
	for locs[victim-1].seg == last.seg {
		victim--
	}
	victim += 2
	loc := locs[victim]
	flipByte(t, loc.path, loc.off+1) // length += 16 KiB: past the 2 KiB segment's end
	wantCorruption(t, dir, loc.path, loc.off)
}

// A flipped length in the last record, pointing past the end of the file,
// is told from a torn write because the data checks out.
func TestLastRecordLengthFlip(t *testing.T) {
	dir := t.TempDir()
	loc := buildCrashedLog(t, dir, 300)[300]
	flipByte(t, loc.path, loc.off+1)
	wantCorruption(t, dir, loc.path, loc.off)
}

func TestZeroFilledTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		// zero returns the range to zero and the new file size.
		zero func(loc recLoc) (from, to int64)
	}{
		{"appended zeros", func(loc recLoc) (int64, int64) { return loc.end, loc.end + 4096 }},
		{"last record zeroed", func(loc recLoc) (int64, int64) { return loc.off, loc.end + 100 }},
		{"last record body zeroed", func(loc recLoc) (int64, int64) { return loc.off + frameSize + 2, loc.end + 3000 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			locs := buildCrashedLog(t, dir, 300)
			loc := locs[300]
			from, to := tc.zero(loc)
			f, err := os.OpenFile(loc.path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(make([]byte, to-from), from); err != nil {
				t.Fatal(err)
			}
			f.Close()
			want := uint64(300)
			if from < loc.end {
				want = 299
			}
			recoversTo(t, dir, want)
		})
	}
}

func TestGarbageAfterZeros(t *testing.T) {
	// Zeros followed by data are not a torn write.
	dir := t.TempDir()
	locs := buildLog(t, dir, 300)
	loc := locs[300]
	f, err := os.OpenFile(loc.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(append(make([]byte, 100), 1), loc.end); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wantCorruption(t, dir, loc.path, loc.end)
}

func TestEntriesDetectsCorruption(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentSize: corruptSegSize})
	defer l.Close()
	mustAppend(t, l, mkrecs(1, 100, 1))
	l.mu.RLock()
	s := l.segs[0]
	path, off := s.path, s.pos[5]
	l.mu.RUnlock()
	flipByte(t, path, off+frameSize+20)
	_, err := l.Entries(1, 50, 0)
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != path || ce.Offset != off {
		t.Fatalf("Entries over a damaged record: %v", err)
	}
	// The records before it are still served.
	if rs, err := l.Entries(1, 6, 0); err != nil || len(rs) != 5 {
		t.Fatalf("Entries before the damage: %d, %v", len(rs), err)
	}
}

// failingWriter returns a writeAt hook that, on the nth call from now,
// writes only half of the buffer and reports ENOSPC.
func failingWriter(n int) func(f vfs.File, b []byte, off int64) (int, error) {
	calls := 0
	return func(f vfs.File, b []byte, off int64) (int, error) {
		calls++
		if calls != n {
			return f.WriteAt(b, off)
		}
		m, err := f.WriteAt(b[:len(b)/2], off)
		if err != nil {
			return m, err
		}
		return m, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
}

func TestDiskFull(t *testing.T) {
	for _, tc := range []struct {
		name  string
		batch uint64 // records in the failing batch
		nth   int    // which write of the batch fails
	}{
		{"single segment", 5, 1},
		{"first write of a rolling batch", 40, 1},
		{"new segment header", 40, 2},
		{"records in new segment", 40, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentSize: corruptSegSize})
			want := mkrecs(1, 11, 1)
			mustAppend(t, l, want)
			size, files := l.SizeBytes(), segFiles(t, dir)
			activePath := l.active().path
			activeSize := fileSize(t, activePath)

			l.writeAt = failingWriter(tc.nth)
			err := l.Append(mkrecs(11, 11+tc.batch, 1))
			if err == nil {
				t.Fatal("Append succeeded with a failing disk")
			}
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "disk may be full") ||
				!strings.Contains(err.Error(), "nothing from this batch was written") {
				t.Fatalf("error %q does not explain the failure", err)
			}
			expect(t, l, 1, 0, want)
			if l.SizeBytes() != size || !equalStrings(segFiles(t, dir), files) || fileSize(t, activePath) != activeSize {
				t.Fatalf("failed Append left size %d, files %v, active %d bytes; want %d, %v, %d",
					l.SizeBytes(), segFiles(t, dir), fileSize(t, activePath), size, files, activeSize)
			}

			// Space is available again.
			l.writeAt = vfs.File.WriteAt
			more := mkrecs(11, 11+tc.batch, 1)
			mustAppend(t, l, more)
			want = append(want, more...)
			expect(t, l, 1, 0, want)
			mustClose(t, l)
			l = mustOpen(t, dir, Options{SegmentSize: corruptSegSize})
			defer l.Close()
			expect(t, l, 1, 0, want)
		})
	}
}

func equalStrings(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00")
}

// Zeros after the last record of a cleanly closed log are damage: a clean
// close leaves no unfinished write behind.
func TestZerosAfterCleanClose(t *testing.T) {
	dir := t.TempDir()
	loc := buildLog(t, dir, 300)[300]
	f, err := os.OpenFile(loc.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 4096), loc.end); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wantCorruption(t, dir, loc.path, loc.end)
}
