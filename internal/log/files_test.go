package log

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"herald/internal/vfs"
)

// openShared opens n logs in fs that share files.
func openShared(t *testing.T, fs vfs.FS, files *Files, n int) []*Log {
	t.Helper()
	logs := make([]*Log, n)
	for i := range logs {
		logs[i] = mustOpen(t, fmt.Sprintf("log%d", i), Options{FS: fs, Files: files, BootID: "boot"})
	}
	return logs
}

// A log whose segment file the bound closed reads and appends as before:
// the file is opened again on demand, and no more than the bound stay
// open.
func TestFilesBoundReopensForReadAndAppend(t *testing.T) {
	fs := vfs.NewMem()
	files := NewFiles(2)
	logs := openShared(t, fs, files, 5)
	for _, l := range logs {
		mustAppend(t, l, mkrecs(1, 20, 1))
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if got := files.Open(); got != 2 {
		t.Fatalf("%d segment files open, want the bound, 2", got)
	}
	if files.Closes() == 0 {
		t.Fatal("the bound closed no file")
	}
	for _, l := range logs {
		reopens := files.Reopens()
		expect(t, l, 1, 0, mkrecs(1, 20, 1)) // reads the closed file again
		if files.Reopens() == reopens && l != logs[len(logs)-1] {
			t.Fatalf("%s: read without opening its closed segment again", l.Dir())
		}
		mustAppend(t, l, mkrecs(20, 30, 2))
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		if got := files.Open(); got > 2 {
			t.Fatalf("%d segment files open, more than the bound, 2", got)
		}
	}
	for _, l := range logs {
		mustClose(t, l)
	}
	if got := files.Open(); got != 0 {
		t.Fatalf("%d segment files open after every log closed", got)
	}
	for i := range logs {
		l := mustOpen(t, fmt.Sprintf("log%d", i), Options{FS: fs, BootID: "boot"})
		expect(t, l, 1, 0, append(mkrecs(1, 20, 1), mkrecs(20, 30, 2)...))
		mustClose(t, l)
	}
}

// Closing a file with unsynced bytes to stay within the bound fdatasyncs
// it first: a power loss right after keeps everything, although the log
// itself never synced, and the log's next Sync has nothing left to do.
func TestFilesBoundSyncsBeforeClosing(t *testing.T) {
	fs := vfs.NewMem()
	files := NewFiles(1)
	a := mustOpen(t, "a", Options{FS: fs, Files: files, BootID: "boot"})
	mustAppend(t, a, mkrecs(1, 50, 1))
	syncs := a.SyncCount()
	b := mustOpen(t, "b", Options{FS: fs, Files: files, BootID: "boot"}) // closes a's file
	if files.Open() != 1 || a.SyncCount() != syncs+1 {
		t.Fatalf("after opening b: %d files open, a made %d fdatasyncs; want 1 open and a's segment synced once before it closed",
			files.Open(), a.SyncCount()-syncs)
	}
	crashed := fs.CrashClone(nil)
	l := mustOpen(t, "a", Options{FS: crashed, BootID: "another boot"})
	expect(t, l, 1, 0, mkrecs(1, 50, 1))
	mustClose(t, l)

	reopens := files.Reopens()
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	if files.Reopens() != reopens || a.SyncCount() != syncs+1 {
		t.Fatal("Sync opened or synced a file the bound had closed after syncing it")
	}
	mustClose(t, a)
	mustClose(t, b)
}

// A failed fdatasync before closing a file keeps it open and is the log's
// failure: its next Sync reports it and writes are refused until it is
// reopened, as after any failed sync; reads go on.
func TestFilesBoundSyncFailure(t *testing.T) {
	fs := vfs.NewMem()
	files := NewFiles(1)
	a := mustOpen(t, "a", Options{FS: fs, Files: files, BootID: "boot"})
	mustAppend(t, a, mkrecs(1, 10, 1))
	eio := errors.New("injected EIO")
	a.fsyncFile = func(vfs.File) error { return eio }
	b := mustOpen(t, "b", Options{FS: fs, Files: files, BootID: "boot"})
	if got := files.Open(); got != 2 {
		t.Fatalf("%d files open, want 2: a's failed to sync and stays open", got)
	}
	a.fsyncFile = vfs.File.SyncData
	if err := a.Sync(); !errors.Is(err, eio) || !strings.Contains(err.Error(), "reopen") {
		t.Fatalf("Sync after the bound failed to sync the file: %v", err)
	}
	if err := a.Append(mkrecs(10, 11, 1)); !errors.Is(err, eio) {
		t.Fatalf("Append after the failure: %v", err)
	}
	if rs, err := a.Entries(1, 10, 0); err != nil || len(rs) != 9 {
		t.Fatalf("Entries after the failure: %d records, %v", len(rs), err)
	}
	if err := a.Close(); !errors.Is(err, eio) {
		t.Fatalf("Close of the failed log: %v", err)
	}
	mustClose(t, b)
	if got := files.Open(); got != 0 {
		t.Fatalf("%d files open after both logs closed", got)
	}
}

// Segments that leave the log (a truncation, a compaction, a reset) while
// their files are closed by the bound, or in use, are neither opened
// again nor leaked.
func TestFilesBoundSegmentsLeaving(t *testing.T) {
	fs := vfs.NewMem()
	files := NewFiles(1)
	a := mustOpen(t, "a", Options{FS: fs, Files: files, SegmentSize: 512, BootID: "boot"})
	b := mustOpen(t, "b", Options{FS: fs, Files: files, BootID: "boot"})
	mustAppend(t, a, mkrecs(1, 60, 1))
	mustAppend(t, b, mkrecs(1, 2, 1))
	if a.Segments() < 4 {
		t.Fatalf("%d segments, want several", a.Segments())
	}
	if err := a.TruncateSuffix(50); err != nil {
		t.Fatal(err)
	}
	if _, err := a.DeletePrefix(20); err != nil {
		t.Fatal(err)
	}
	first := a.FirstIndex()
	expect(t, a, first, a.segs[0].prevTerm, mkrecs(first, 50, 1))
	mustAppend(t, b, mkrecs(2, 3, 1))
	if err := a.Reset(100, 3); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, b, mkrecs(3, 4, 1))
	mustAppend(t, a, mkrecs(100, 110, 3))
	mustClose(t, a)
	mustClose(t, b)
	if got := files.Open(); got != 0 {
		t.Fatalf("%d files open after both logs closed", got)
	}
	a = mustOpen(t, "a", Options{FS: fs, BootID: "boot"})
	expect(t, a, 100, 3, mkrecs(100, 110, 3))
	mustClose(t, a)
}

// Many logs used at once through a bound of one file: every append,
// sync and read is right, whoever closes whose file.
func TestFilesBoundConcurrent(t *testing.T) {
	fs := vfs.NewMem()
	files := NewFiles(1)
	logs := openShared(t, fs, files, 6)
	var wg sync.WaitGroup
	errs := make(chan error, len(logs))
	for _, l := range logs {
		wg.Go(func() {
			for i := uint64(1); i <= 200; i += 10 {
				if err := l.Append(mkrecs(i, i+10, 1)); err != nil {
					errs <- err
					return
				}
				if i%30 == 1 {
					if err := l.Sync(); err != nil {
						errs <- err
						return
					}
				}
				rs, err := l.Entries(1, i+10, 0)
				if err == nil && (len(rs) != int(i+9) || !recEqual(rs[i-1], mkrec(i, 1))) {
					err = fmt.Errorf("%s: read %d records back, want %d", l.Dir(), len(rs), i+9)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, l := range logs {
		mustClose(t, l)
	}
	crashed := fs.CrashClone(nil)
	for _, l := range logs {
		l := mustOpen(t, l.Dir(), Options{FS: crashed, BootID: "another boot"})
		expect(t, l, 1, 0, mkrecs(1, 201, 1))
		mustClose(t, l)
	}
}
