package wal

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	hlog "herald/internal/log"
	"herald/internal/vfs"
)

type countingFlusher struct {
	mu      sync.Mutex
	flushes int
	err     error
}

func (f *countingFlusher) Flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushes++
	return f.err
}

func (f *countingFlusher) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushes
}

func recs(first uint64, data ...string) []hlog.Record {
	out := make([]hlog.Record, len(data))
	for i, d := range data {
		out[i] = hlog.Record{Index: first + uint64(i), Term: 3, Type: 1, Data: []byte(d)}
	}
	return out
}

func openMem(t *testing.T, fs vfs.FS, boot string) *WAL {
	t.Helper()
	w, err := Open("/wal", Options{FS: fs, BootID: boot, SegmentSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func describe(ops []Op) string {
	var b strings.Builder
	for _, op := range ops {
		if len(op.Entries) == 0 {
			fmt.Fprintf(&b, "[state %s]", op.State)
			continue
		}
		fmt.Fprintf(&b, "[%d:", op.Entries[0].Index)
		for _, e := range op.Entries {
			fmt.Fprintf(&b, " %s/%d", e.Data, e.Term)
		}
		b.WriteString("]")
	}
	return b.String()
}

// What a group appended and synced comes back to it, in order, after a
// power loss; each group gets its own, from after its last barrier.
func TestRecoveredOpsArePerGroupInOrderAfterTheLastBarrier(t *testing.T) {
	fs := vfs.NewMem()
	w := openMem(t, fs, "b1")
	f := &countingFlusher{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Append(7, recs(1, "a", "b"), f))
	must(w.Append(8, recs(5, "x"), f))
	must(w.Append(7, recs(2, "B", "c"), f)) // overwrites from index 2
	must(w.Append(9, recs(1, "old"), f))
	must(w.Barrier(9))
	must(w.Append(9, recs(40, "new"), f))
	must(w.Sync())
	w2 := openMem(t, fs.CrashClone(nil), "b2")
	defer w2.Close()
	for group, want := range map[uint64]string{
		7: "[1: a/3 b/3][2: B/3 c/3]",
		8: "[5: x/3]",
		9: "[40: new/3]",
	} {
		if got := describe(w2.Recovered(group)); got != want {
			t.Errorf("group %d recovered %s, want %s", group, got, want)
		}
	}
	if got := w2.Recovered(7); len(got) != 0 {
		t.Errorf("a second Recovered returned %s; it hands the operations out once", describe(got))
	}
}

// A checkpoint flushes the groups with entries only the WAL holds, then
// deletes the WAL files it covers and marks them flushed, so a restart
// replays nothing; before Booted it flushes but keeps everything.
func TestCheckpointFlushesThenDropsWhatItCovers(t *testing.T) {
	fs := vfs.NewMem()
	w := openMem(t, fs, "b1")
	f := &countingFlusher{}
	for i := range 100 {
		if err := w.Append(1, recs(uint64(i+1), strings.Repeat("e", 50)), f); err != nil {
			t.Fatal(err)
		}
	}
	// Appends are written by the next Sync.
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	files := w.Files()
	if files < 3 {
		t.Fatalf("%d WAL files after 100 appends; the test needs several", files)
	}
	if err := w.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// Filling files starts checkpoints of its own too: count at least one.
	if f.count() == 0 || w.Files() != files {
		t.Fatalf("before Booted: %d flushes, %d files (of %d); want a flush and no file deleted", f.count(), w.Files(), files)
	}
	w.Booted()
	if err := w.Append(1, recs(101, "last"), f); err != nil {
		t.Fatal(err)
	}
	if err := w.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if w.Files() != 1 {
		t.Fatalf("after Booted and a checkpoint: %d files; want only the active file", w.Files())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2 := openMem(t, fs, "b1")
	defer w2.Close()
	if ops := w2.Recovered(1); len(ops) != 0 {
		t.Fatalf("after a checkpoint and a clean close, the WAL still replays %s", describe(ops))
	}
}

// openTimed opens a booted WAL of 64 KiB files whose timed checkpoints
// come every millisecond.
func openTimed(t *testing.T) *WAL {
	t.Helper()
	w, err := Open("/wal", Options{FS: vfs.NewMem(), BootID: "b1", SegmentSize: 64 << 10, CheckpointInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	w.Booted()
	return w
}

// Timed checkpoints wait until a sixteenth of a WAL file was appended: a
// few records (a node's groups electing themselves at start) are not
// worth a sync of every group's log.
func TestTimedCheckpointWaitsForEnoughToCheckpoint(t *testing.T) {
	w := openTimed(t)
	f := &countingFlusher{}
	small := strings.Repeat("e", 100) // 4 KiB is a sixteenth of a file
	for i := range 30 {
		if err := w.Append(1, recs(uint64(i+1), small), f); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // a hundred intervals
	if n := f.count(); n != 0 {
		t.Fatalf("%d flushes after 3 KiB appended; a timed checkpoint waits for 4 KiB", n)
	}
	for i := range 20 {
		if err := w.Append(1, recs(uint64(31+i), small), f); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); f.count() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint within a minute of 5 KiB appended, with a 1 ms interval")
		}
	}
}

// A timed checkpoint that failed runs again at the next interval, with
// nothing appended since.
func TestFailedTimedCheckpointIsRetried(t *testing.T) {
	w := openTimed(t)
	f := &countingFlusher{err: errors.New("disk full")}
	for i := range 50 {
		if err := w.Append(1, recs(uint64(i+1), strings.Repeat("e", 100)), f); err != nil {
			t.Fatal(err)
		}
	}
	waitFlushes := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); f.count() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d flushes after a minute with a 1 ms interval, want %d", f.count(), n)
			}
		}
	}
	waitFlushes(1)
	f.mu.Lock()
	f.err = nil
	f.mu.Unlock()
	waitFlushes(2)
}

// A group that fails to flush keeps its entries in the WAL: the
// checkpoint reports it and deletes nothing.
func TestCheckpointKeepsEverythingWhenAFlushFails(t *testing.T) {
	fs := vfs.NewMem()
	w := openMem(t, fs, "b1")
	w.Booted()
	bad := &countingFlusher{err: errors.New("disk full")}
	for i := range 60 {
		if err := w.Append(1, recs(uint64(i+1), strings.Repeat("e", 50)), bad); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	files := w.Files()
	if err := w.Checkpoint(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("checkpoint with a failing flush = %v, want the failure", err)
	}
	if w.Files() != files {
		t.Fatalf("%d WAL files after a failed checkpoint, want all %d kept", w.Files(), files)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w2 := openMem(t, fs.CrashClone(nil), "b2")
	defer w2.Close()
	if ops := w2.Recovered(1); len(ops) != 60 {
		t.Fatalf("recovered %d operations, want all 60", len(ops))
	}
	w.Close()
}

// A flipped bit in a WAL record that was followed by others is damage:
// Open refuses, naming the file and offset, rather than cut acknowledged
// entries of every group.
func TestDamagedRecordIsNamed(t *testing.T) {
	fs := vfs.NewMem()
	w := openMem(t, fs, "b1")
	f := &countingFlusher{}
	for i := range 5 {
		if err := w.Append(1, recs(uint64(i+1), "payload"), f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	crashed := fs.Clone()
	files, err := crashed.Files("/wal")
	if err != nil {
		t.Fatal(err)
	}
	var seg string
	for name := range files {
		if strings.HasSuffix(name, ".seg") {
			seg = name
		}
	}
	if err := crashed.FlipBit(seg, 60*8); err != nil { // inside the first record
		t.Fatal(err)
	}
	_, err = Open("/wal", Options{FS: crashed, BootID: "b1", SegmentSize: 1024})
	var ce *hlog.CorruptionError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), seg) || !strings.Contains(err.Error(), "write-ahead log") {
		t.Fatalf("open over a flipped bit = %v; want a corruption error naming %s", err, seg)
	}
	w.Close()
}

// A group's states come back in order with its entries after a power
// loss, from after its last barrier (the state a barrier finds is kept
// after it); an empty state is refused and records nothing.
func TestStatesRecoveredInOrderWithEntries(t *testing.T) {
	fs := vfs.NewMem()
	w := openMem(t, fs, "b1")
	f := &countingFlusher{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.SetState(7, []byte("s1")))
	must(w.Append(7, recs(1, "a"), f))
	must(w.SetState(7, []byte("s2")))
	must(w.SetState(9, []byte("old")))
	must(w.Append(9, recs(1, "x"), f))
	must(w.Barrier(9))
	must(w.SetState(10, []byte("gone")))
	must(w.Barrier(10))
	w.Remove(10)
	if err := w.SetState(7, nil); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("SetState with an empty state: %v, want an error saying it is empty", err)
	}
	must(w.Sync())
	must(w.SetState(7, []byte("unsynced")))

	w2 := openMem(t, fs.CrashClone(nil), "b2")
	defer w2.Close()
	if got, want := describe(w2.Recovered(7)), "[state s1][1: a/3][state s2]"; got != want {
		t.Fatalf("group 7 recovered %s, want %s", got, want)
	}
	if got, want := describe(w2.Recovered(9)), "[state old]"; got != want {
		t.Fatalf("group 9 recovered %s, want %s", got, want)
	}
	if got, want := describe(w2.Recovered(10)), "[state gone]"; got != want {
		t.Fatalf("group 10 recovered %s, want %s", got, want)
	}
}

// The WAL keeps each group's latest state: a checkpoint that deletes the
// file holding it writes it again first, so it survives any number of
// checkpoints and power losses with no file of the group's own written;
// a removed group's state is dropped.
func TestStatesCarriedAcrossCheckpoints(t *testing.T) {
	fs := vfs.NewMem()
	w := openMem(t, fs, "b1")
	f := &countingFlusher{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	w.Booted()
	must(w.SetState(1, []byte("one")))
	must(w.SetState(2, []byte("two")))
	must(w.SetState(3, []byte("removed")))
	w.Remove(3)
	// Fill several WAL files with group 4's entries, checkpointing as we go.
	for i := uint64(1); i <= 200; i++ {
		must(w.Append(4, recs(i, strings.Repeat("x", 40)), f))
		if i%50 == 0 {
			must(w.Checkpoint())
		}
	}
	must(w.Sync())
	must(w.Checkpoint())
	if n := w.Files(); n > 2 {
		t.Fatalf("%d WAL files after checkpoints, want the old ones deleted", n)
	}
	w2 := openMem(t, fs.CrashClone(nil), "b2")
	defer w2.Close()
	for group, want := range map[uint64]string{1: "[state one]", 2: "[state two]", 3: ""} {
		if got := describe(w2.Recovered(group)); got != want {
			t.Fatalf("group %d recovered %q after checkpoints and a power loss, want %q", group, got, want)
		}
	}
}

// A WAL closed after every group flushed says no write can have been
// torn; one whose closing checkpoint could not flush a group does not,
// as after a crash: the groups' logs rely on it (log.Options.ElsewhereNoTear).
func TestNoTearOnlyAfterEveryGroupFlushed(t *testing.T) {
	for _, tc := range []struct {
		flushErr error
		noTear   bool
	}{{nil, true}, {errors.New("disk full"), false}} {
		fs := vfs.NewMem()
		w := openMem(t, fs, "b1")
		f := &countingFlusher{err: tc.flushErr}
		if err := w.Append(1, recs(1, "a"), f); err != nil {
			t.Fatal(err)
		}
		w.Booted()
		if err := w.Close(); (err != nil) != (tc.flushErr != nil) {
			t.Fatalf("Close with a flush failing with %v: %v", tc.flushErr, err)
		}
		w2 := openMem(t, fs, "b2")
		if got := w2.NoTear() != ""; got != tc.noTear {
			t.Fatalf("flush error %v: NoTear %q after reopening in another boot, want a reason: %v", tc.flushErr, w2.NoTear(), tc.noTear)
		}
		w2.Close()
	}
}

// Records written before the WAL marked their ends (kindMarked) are still
// read back: a node upgraded in place replays what its WAL held.
func TestRecordsWithoutEndMarkAreRead(t *testing.T) {
	fs := vfs.NewMem()
	l, err := hlog.Open("/wal", hlog.Options{FS: fs, BootID: "b1", SegmentSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	state := append([]byte{7, 0, 0, 0, 0, 0, 0, 0}, "term 3 vote 1"...)
	err = l.Append([]hlog.Record{
		{Index: 1, Term: walTerm, Type: kindEntries, Data: encodeEntries(nil, 7, recs(1, "a", "b"))},
		{Index: 2, Term: walTerm, Type: kindState, Data: state},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	w := openMem(t, fs, "b1")
	defer w.Close()
	if got, want := describe(w.Recovered(7)), "[1: a/3 b/3][state term 3 vote 1]"; got != want {
		t.Fatalf("recovered %s, want %s", got, want)
	}
	// And new records, marked, follow them.
	if err := w.Append(7, recs(3, "c"), &countingFlusher{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w2 := openMem(t, fs.CrashClone(nil), "b2")
	defer w2.Close()
	if got, want := describe(w2.Recovered(7)), "[1: a/3 b/3][state term 3 vote 1][3: c/3]"; got != want {
		t.Fatalf("after a power loss, recovered %s, want %s", got, want)
	}
}

// TestCheckpointWhoseOwnRecordsRollKeepsStates checks a checkpoint whose
// own records (a state carried, the flushed mark) fill the active WAL
// file and start the next: the file they left holds the latest state of
// a group, and must not be deleted with those before it. For each fill
// of the active file, a checkpoint runs with nothing appended after what
// it covers, and the states must survive a power loss.
func TestCheckpointWhoseOwnRecordsRollKeepsStates(t *testing.T) {
	for fill := range 40 {
		fs := vfs.NewMem()
		w := openMem(t, fs, "b1")
		f := &countingFlusher{}
		w.Booted()
		if err := w.SetState(1, []byte("one")); err != nil {
			t.Fatal(err)
		}
		// A first file filled and checkpointed, so that group 1's state
		// sits in the second file.
		i := uint64(1)
		for ; w.Files() < 2; i++ {
			if err := w.Append(2, recs(i, strings.Repeat("x", 40)), f); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		for range fill {
			if err := w.Append(2, recs(i, strings.Repeat("y", 20)), f); err != nil {
				t.Fatal(err)
			}
			i++
		}
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := w.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		w2 := openMem(t, fs.CrashClone(nil), "b2")
		got := describe(w2.Recovered(1))
		w2.Close()
		w.Close()
		if got != "[state one]" {
			t.Fatalf("after %d entries and a checkpoint, group 1 recovered %q, want its state", fill, got)
		}
	}
}

// Appends are queued and written by the next Sync, all in one write:
// groups that persist at the same moment share a write as well as an
// fdatasync. What the Sync covered survives a power loss.
func TestSyncWritesEveryQueuedAppendInOneWrite(t *testing.T) {
	fs := vfs.NewMem()
	w, err := Open("/wal", Options{FS: fs, BootID: "b1", SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	f := &countingFlusher{}
	// The first write creates the WAL's first file.
	if err := w.Append(99, recs(1, "first"), f); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	var writes, syncs atomic.Int64
	fs.SetInjector(func(op vfs.Op) error {
		switch {
		case !strings.Contains(op.Path, ".seg"):
		case op.Kind == vfs.OpWrite:
			writes.Add(1)
		case op.Kind == vfs.OpSync:
			syncs.Add(1)
		}
		return nil
	})
	for group := uint64(1); group <= 10; group++ {
		if err := w.Append(group, recs(1, fmt.Sprint("event of ", group)), f); err != nil {
			t.Fatal(err)
		}
		if err := w.SetState(group, []byte(fmt.Sprint("s", group))); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes.Load(); n != 0 {
		t.Fatalf("%d writes before Sync, want the appends queued", n)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if n, s := writes.Load(), syncs.Load(); n != 1 || s != 1 {
		t.Fatalf("Sync of 20 queued records made %d writes and %d fdatasyncs, want 1 and 1", n, s)
	}
	fs.SetInjector(nil)
	w2 := openMem(t, fs.CrashClone(nil), "b2")
	defer w2.Close()
	for group := uint64(1); group <= 10; group++ {
		want := fmt.Sprintf("[1: event of %d/3][state s%d]", group, group)
		if got := describe(w2.Recovered(group)); got != want {
			t.Errorf("group %d recovered %s after a power loss, want %s", group, got, want)
		}
	}
}

// A failed write of queued records fails the WAL: the records were
// several groups', so every Sync that needed them, and every later
// Append, reports the failure instead of acknowledging what no file holds.
func TestFailedWriteFailsTheWAL(t *testing.T) {
	fs := vfs.NewMem()
	w := openMem(t, fs, "b1")
	f := &countingFlusher{}
	if err := w.Append(1, recs(1, "a"), f); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(2, recs(2, "b"), f); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(3, recs(1, "c"), f); err != nil {
		t.Fatal(err)
	}
	fs.SetInjector(func(op vfs.Op) error {
		if op.Kind == vfs.OpWrite && strings.Contains(op.Path, ".seg") {
			return vfs.InjectedError(op, syscall.EIO)
		}
		return nil
	})
	for i := range 2 {
		if err := w.Sync(); err == nil || !errors.Is(err, vfs.ErrInjected) || !strings.Contains(err.Error(), "restart the node") {
			t.Fatalf("Sync %d after a failed write = %v, want the failure and that the node must restart", i+1, err)
		}
	}
	fs.SetInjector(nil)
	if err := w.Append(4, recs(1, "d"), f); err == nil || !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("Append after a failed write = %v, want the failure", err)
	}
	if err := w.Sync(); err == nil {
		t.Fatal("Sync after a failed write succeeded once the disk recovered; the WAL must stay failed until reopened")
	}
}

// A write that meets a full disk keeps its records queued, in order and
// with their indices, ahead of those appended after it: the next Sync
// once the disk has space writes them all, and they are recovered.
func TestWriteOnAFullDiskIsRetried(t *testing.T) {
	fs := vfs.NewMem()
	w := openMem(t, fs, "b1")
	f := &countingFlusher{}
	if err := w.Append(1, recs(1, "a"), f); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(2, recs(1, "b"), f); err != nil {
		t.Fatal(err)
	}
	if err := w.SetState(2, []byte("state-b")); err != nil {
		t.Fatal(err)
	}
	fs.SetInjector(func(op vfs.Op) error {
		if op.Kind == vfs.OpWrite && strings.Contains(op.Path, ".seg") {
			return vfs.InjectedError(op, syscall.ENOSPC)
		}
		return nil
	})
	for i := range 2 {
		if err := w.Sync(); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "stay queued") {
			t.Fatalf("Sync %d on a full disk = %v, want ENOSPC and that the records stay queued", i+1, err)
		}
	}
	if err := w.Append(1, recs(2, "c"), f); err != nil {
		t.Fatalf("Append on a full disk = %v; appends only queue", err)
	}
	fs.SetInjector(nil)
	if err := w.Sync(); err != nil {
		t.Fatalf("Sync once the disk has space: %v", err)
	}
	w.Close()

	w = openMem(t, fs, "b1")
	if got, want := describe(w.Recovered(1)), describe([]Op{{Entries: recs(1, "a")}, {Entries: recs(2, "c")}}); got != want {
		t.Errorf("group 1 recovered %s, want %s", got, want)
	}
	if got, want := describe(w.Recovered(2)), describe([]Op{{Entries: recs(1, "b")}, {State: []byte("state-b")}}); got != want {
		t.Errorf("group 2 recovered %s, want %s", got, want)
	}
}
