package log

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/internal/vfs"
)

const zeroedSegSize = 4096

func zeroedOpts(boot string) Options {
	return Options{SegmentSize: zeroedSegSize, Preallocate: true, BootID: boot}
}

// waitSpare waits until no spare is being zeroed, so that a test knows
// whether the next roll finds one.
func waitSpare(t *testing.T, l *Log) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.spare.mu.Lock()
		filling := l.spare.filling != nil
		l.spare.mu.Unlock()
		if !filling {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("spare still being zeroed after 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// buildZeroedLog appends records [1, n] one at a time, syncing each as a
// log synced on every commit does, waiting for each spare, and returns
// the open log: its segments after the first are zeroed.
func buildZeroedLog(t *testing.T, dir string, n uint64, boot string) *Log {
	t.Helper()
	l := mustOpen(t, dir, zeroedOpts(boot))
	for i := uint64(1); i <= n; i++ {
		waitSpare(t, l)
		mustAppend(t, l, []Record{mkrec(i, 1)})
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func segVersionOf(t *testing.T, path string) uint32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[4:8])
}

func TestPreallocatedLogWritesIntoZeroedSegments(t *testing.T) {
	dir := t.TempDir()
	l := buildZeroedLog(t, dir, 300, "this boot")
	if len(l.segs) < 3 {
		t.Fatalf("%d segments; the test needs several", len(l.segs))
	}
	zeroed := 0
	for _, s := range l.segs {
		if s.zeroed {
			zeroed++
			if v := segVersionOf(t, s.path); v != segVersionZeroed {
				t.Fatalf("zeroed segment %s has header version %d", s.path, v)
			}
			if size := fileSize(t, s.path); size < zeroedSegSize {
				t.Fatalf("zeroed segment %s is %d bytes, less than a segment", s.path, size)
			}
		}
	}
	if zeroed != len(l.segs)-1 || l.segs[0].zeroed {
		t.Fatalf("%d of %d segments zeroed; want all but the first, which was made before any spare", zeroed, len(l.segs))
	}
	mustClose(t, l)
	zeroedRecoversTo(t, dir, 300)
}

// zeroedRecoversTo checks that the zeroed log in dir opens holding records
// [1, last], takes more, and holds them all after a clean reopen.
func zeroedRecoversTo(t *testing.T, dir string, last uint64) {
	t.Helper()
	l := mustOpen(t, dir, zeroedOpts("this boot"))
	expect(t, l, 1, 0, mkrecs(1, last+1, 1))
	mustAppend(t, l, mkrecs(last+1, last+21, 2))
	mustClose(t, l)
	l = mustOpen(t, dir, zeroedOpts("this boot"))
	defer l.Close()
	expect(t, l, 1, 0, append(mkrecs(1, last+1, 1), mkrecs(last+1, last+21, 2)...))
}

// A process killed inside write(2) leaves a prefix of its write over the
// zeros; the record it did not finish is cut, whatever is left of it.
func TestZeroedSegmentTornWriteIsCut(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep func(n int) int // bytes of the record's encoding that reached the file
	}{
		{"inside frame", func(int) int { return 3 }},
		{"after frame", func(int) int { return frameSize + 1 }},
		{"half", func(n int) int { return n / 2 }},
		{"all but the last byte", func(n int) int { return n - 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := buildZeroedLog(t, dir, 300, "this boot")
			s := l.active()
			if !s.zeroed {
				t.Fatal("the active segment is not zeroed")
			}
			path, end := s.path, s.size
			abandon(l)
			rec := mkrec(301, 1)
			enc := appendRecord(nil, &rec)
			writeAt(t, path, enc[:tc.keep(len(enc))], end)
			zeroedRecoversTo(t, dir, 300)
		})
	}
}

// A fully written record keeps its nonzero last byte, so a flipped bit
// anywhere in it is damage, named, not a torn write: in the same boot
// the record may have been acknowledged.
func TestZeroedSegmentDamageIsNamed(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func(off, end int64) int64
	}{
		{"data", func(off, end int64) int64 { return (off + end) / 2 }},
		{"last byte", func(off, end int64) int64 { return end - 1 }},
		{"length", func(off, end int64) int64 { return off + 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := buildZeroedLog(t, dir, 300, "this boot")
			s := l.active()
			path, off, end := s.path, s.pos[len(s.pos)-1], s.size
			abandon(l)
			flipByte(t, path, tc.at(off, end))
			wantCorruptionOpening(t, dir, zeroedOpts("this boot"), path, off)
		})
	}
}

// Nonzero bytes after the zeros that follow the last record are not space
// never written: the log is damaged there.
func TestZeroedSegmentGarbageAfterZeros(t *testing.T) {
	dir := t.TempDir()
	l := buildZeroedLog(t, dir, 300, "this boot")
	s := l.active()
	path, end := s.path, s.size
	mustClose(t, l)
	writeAt(t, path, []byte{1}, end+100)
	wantCorruptionOpening(t, dir, zeroedOpts("this boot"), path, end)
}

func TestPreallocatedLogRefusesRecordsEndingInZero(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, zeroedOpts(""))
	defer l.Close()
	mustAppend(t, l, mkrecs(1, 3, 1))
	for _, r := range []Record{
		{Index: 4, Term: 1, Type: 1, Data: []byte{7, 0}},
		{Index: 4, Term: 1, Type: 0},
	} {
		err := l.Append([]Record{mkrec(3, 1), r})
		if err == nil || !strings.Contains(err.Error(), "ends with a zero byte") {
			t.Fatalf("Append of a record ending in a zero byte: %v; want it refused", err)
		}
	}
	expect(t, l, 1, 0, mkrecs(1, 3, 1))
}

// A log that syncs rarely, for many bytes each time, never zeroes a spare:
// the zeros would cost more than the cheaper fdatasyncs save.
func TestPreallocatedLogZeroesOnlyWhenSyncsAreFrequent(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentSize: 1 << 20, Preallocate: true})
	big := make([]byte, 200<<10)
	for i := range big {
		big[i] = 'x'
	}
	for i := uint64(1); i <= 12; i++ {
		mustAppend(t, l, []Record{{Index: i, Term: 1, Data: big}})
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		waitSpare(t, l)
	}
	for _, s := range l.segs {
		if s.zeroed {
			t.Fatalf("segment %s zeroed at 200 KiB per fdatasync", s.path)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, spareName)); !os.IsNotExist(err) {
		t.Fatalf("a spare was made at 200 KiB per fdatasync (%v)", err)
	}
	mustClose(t, l)
}

// A spare left by a process that stopped is removed at Open, not trusted.
func TestOpenRemovesLeftoverSpares(t *testing.T) {
	dir := t.TempDir()
	l := buildZeroedLog(t, dir, 50, "")
	mustClose(t, l)
	for _, name := range []string{spareName, spareTmpName, recycledName} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("left over"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l = mustOpen(t, dir, zeroedOpts(""))
	defer l.Close()
	expect(t, l, 1, 0, mkrecs(1, 51, 1))
	for _, name := range []string{spareName, spareTmpName, recycledName} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Fatalf("%s survived Open (%v)", name, err)
		}
	}
}

func writeAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestDeletedSegmentIsZeroedIntoTheNextSpare checks that a preallocated
// log keeps one segment DeletePrefix deletes, unlinks the others, zeroes
// the kept file into its next spare, and writes a later segment into it
// that reads back whole, after a reopen too, with nothing of the file's
// old records showing.
func TestDeletedSegmentIsZeroedIntoTheNextSpare(t *testing.T) {
	dir := t.TempDir()
	l := buildZeroedLog(t, dir, 300, "this boot")
	if len(l.segs) < 4 {
		t.Fatalf("%d segments; the test needs several", len(l.segs))
	}
	first, err := os.Stat(l.segs[0].path)
	if err != nil {
		t.Fatal(err)
	}
	second := l.segs[1].path
	third := l.segs[2].base
	if n, err := l.DeletePrefix(third); n != 2 || err != nil {
		t.Fatalf("DeletePrefix(%d) = %d, %v; want 2", third, n, err)
	}
	kept, err := os.Stat(filepath.Join(dir, recycledName))
	if err != nil || !os.SameFile(kept, first) {
		t.Fatalf("the first deleted segment's file was not kept as %s (%v)", recycledName, err)
	}
	if _, err := os.Stat(second); !os.IsNotExist(err) {
		t.Fatalf("the second deleted segment %s is still there (%v); only one is kept", second, err)
	}

	// Fill segments until one is written into the recycled file.
	last := uint64(300)
	var reused string
	for reused == "" {
		last++
		if last > 2000 {
			t.Fatal("no segment was written into the recycled file")
		}
		waitSpare(t, l)
		mustAppend(t, l, []Record{mkrec(last, 1)})
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		act := l.segs[len(l.segs)-1].path
		if fi, err := os.Stat(act); err == nil && os.SameFile(fi, kept) {
			reused = act
		}
	}
	if _, err := os.Stat(filepath.Join(dir, recycledName)); !os.IsNotExist(err) {
		// A later deletion may keep another file; this test made none.
		t.Fatalf("%s still there after its file was reused (%v)", recycledName, err)
	}
	// Records fill the reused file past its first record, so that an
	// old record left in it would be read after the new ones.
	for range 5 {
		last++
		mustAppend(t, l, []Record{mkrec(last, 1)})
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	l = mustOpen(t, dir, zeroedOpts("this boot"))
	defer l.Close()
	expect(t, l, third, 1, mkrecs(third, last+1, 1))
}

// TestSpareFillRestsBetweenChunks checks that a spare is zeroed a chunk at
// a time, each chunk synced before the next is written, and that the fill
// rests after each chunk at least as long as the chunk took: the log's
// own fdatasyncs queue behind one chunk at most, and find the disk idle
// half the time while a spare is filled.
func TestSpareFillRestsBetweenChunks(t *testing.T) {
	const syncTakes = 5 * time.Millisecond // each of the spare's syncs, at least
	rec := &spareRecorder{FS: vfs.OS, syncTakes: syncTakes}
	l := mustOpen(t, t.TempDir(), Options{SegmentSize: 4 * spareChunk, Preallocate: true, FS: rec})
	defer l.Close()
	// Records synced one at a time start a spare once the segment holds a
	// 64th of its size.
	for i := uint64(1); rec.count() == 0; i++ {
		if i > 1000 {
			t.Fatal("no spare was zeroed")
		}
		mustAppend(t, l, []Record{mkrec(i, 1)})
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	waitSpare(t, l)
	if !l.spare.ready() {
		t.Fatal("the spare is not ready after its fill")
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var zeroed int64
	for i, w := range rec.writes {
		zeroed += int64(w.n)
		if w.n > spareChunk {
			t.Errorf("write %d of the spare is %d bytes, more than a chunk (%d)", i, w.n, spareChunk)
		}
		if i == 0 {
			continue
		}
		last := rec.writes[i-1]
		if last.syncedAt.IsZero() {
			t.Fatalf("write %d of the spare came before write %d was synced", i, i-1)
		}
		if rest := w.at.Sub(last.syncedAt); rest < syncTakes {
			t.Errorf("the fill rested %v after chunk %d, which took at least %v", rest, i-1, syncTakes)
		}
	}
	if zeroed != 4*spareChunk {
		t.Errorf("the spare's writes zeroed %d bytes, want a segment's %d", zeroed, 4*spareChunk)
	}
}

// spareRecorder is a file system that records the writes made to a spare
// being zeroed and when each was synced, and makes each of those syncs
// take at least syncTakes.
type spareRecorder struct {
	vfs.FS
	syncTakes time.Duration

	mu     sync.Mutex
	writes []spareWrite
}

type spareWrite struct {
	n        int
	at       time.Time
	syncedAt time.Time // zero until a SyncData after the write returned
}

func (r *spareRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.writes)
}

func (r *spareRecorder) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := r.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != spareTmpName {
		return f, err
	}
	return &spareFile{File: f, r: r}, nil
}

type spareFile struct {
	vfs.File
	r *spareRecorder
}

func (f *spareFile) WriteAt(b []byte, off int64) (int, error) {
	f.r.mu.Lock()
	f.r.writes = append(f.r.writes, spareWrite{n: len(b), at: time.Now()})
	f.r.mu.Unlock()
	return f.File.WriteAt(b, off)
}

func (f *spareFile) SyncData() error {
	time.Sleep(f.r.syncTakes)
	err := f.File.SyncData()
	f.r.mu.Lock()
	if n := len(f.r.writes); n > 0 && f.r.writes[n-1].syncedAt.IsZero() {
		f.r.writes[n-1].syncedAt = time.Now()
	}
	f.r.mu.Unlock()
	return err
}
