package log

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"herald/internal/vfs"
)

// DefaultSegmentSize is the segment size used when Options.SegmentSize is 0.
const DefaultSegmentSize = 64 << 20

// MaxRetainedBuf bounds a write buffer kept from one batch of appends for
// the next (the log's, and the node WAL's queue of records), so that one
// huge batch does not pin its memory for the life of the log.
const MaxRetainedBuf = 4 << 20

// removeStep is how much of a deleted segment's file is cut at a time
// before it is unlinked (vfs.RemoveInSteps).
const removeStep = 4 << 20

// Record is one entry of the log.
type Record struct {
	Index uint64
	Term  uint64
	Type  uint8 // opaque to the log
	Data  []byte
}

// Options configures a Log.
type Options struct {
	// SegmentSize is the size at which the active segment is closed and a
	// new one started; 0 means DefaultSegmentSize. A segment may exceed it
	// by up to one record.
	SegmentSize int64

	// FS holds the log's files; nil means vfs.OS.
	FS vfs.FS

	// BootID identifies the current boot of the machine; "" means the
	// kernel's (vfs.BootID). Recovery compares it with the boot that last
	// wrote the log to know whether a power loss can have torn a write.
	BootID string

	// Files bounds the segment files open at once across the logs that
	// share it; nil means the log keeps its segment files open until it
	// closes.
	Files *Files

	// UnsyncedElsewhere says that every record not yet synced here is also
	// held, synced, by another log that replays it (the node's WAL). Then
	// a power loss may leave any part of the unsynced tail, not only its
	// end: recovery cuts the last segment at its first bad record even
	// when valid records follow, and CutFrom says where, for the caller
	// to check that the other log holds everything from there on.
	UnsyncedElsewhere bool

	// ElsewhereNoTear, for a log with UnsyncedElsewhere, is the other
	// log's NoTear as it opened: why none of its writes (and so none of
	// this log's, which it holds too) can have been torn, "" if one can.
	// Such a log records nothing in its state file before its first
	// change after it was opened, only at Close: a node with thousands of
	// such logs would otherwise rewrite thousands of state files at each
	// start after a clean stop. Recovery then finds a tear possible if
	// either this log's state file or the other log says so.
	ElsewhereNoTear string

	// Preallocate writes segments into files filled with zeros
	// beforehand (prealloc.go), which makes each Sync cost about half as
	// much; for a log synced on every commit. Every record appended must
	// then end with a nonzero byte (the last byte of its Data, or its
	// Type when it has none), which Append checks: recovery tells a
	// record whose end never reached the disk by the zeros it ends in.
	Preallocate bool

	// WritebackEvery, if positive, starts the disk writing each segment's
	// new bytes back whenever that many have been written since the last
	// start (vfs.StartWriteback), for a log synced seldom (one whose
	// records a WAL holds): the fdatasync of a full segment before the
	// next is made, or of a checkpoint, then waits for the last few
	// writes only, not for the whole segment, and the disk is not flooded
	// with one segment's worth of data that the WAL's fdatasyncs would
	// queue behind.
	WritebackEvery int64

	// WriteBehind, if positive, keeps appended records in memory and
	// writes them to the segment files later, many appends in one write
	// (behind.go): once WriteBehind is called with at least this many
	// bytes held, before every Sync, and by Append itself before it would
	// hold four times this many. Only for a log with UnsyncedElsewhere: a
	// record held in memory is lost if the process dies.
	WriteBehind int64
}

// Log is the record log of one shard.
//
// One goroutine at a time writes (Append, Sync, TruncateSuffix, Reset;
// concurrent calls are serialized), while any number of goroutines read
// (Entries, Term, FirstIndex, LastIndex, ...) and a background goroutine may
// call DeletePrefix.
type Log struct {
	fs        vfs.FS
	dir       string
	files     *Files
	segSize   int64
	bootID    string
	state     logState // as last written to the state file; guarded by wmu
	stateOK   bool     // state was read or written
	noTear    string   // why recovery found no write can have been torn; "" if one can
	covered   bool     // Options.UnsyncedElsewhere
	cutFrom   uint64   // index of the first record recovery cut; 0 if none
	spare     *spare   // the zeroed file the next segment is written into; nil without Options.Preallocate
	writeback int64    // Options.WritebackEvery
	behind    int64    // Options.WriteBehind

	// Test hooks, set before the log is shared.
	writeAt        func(f vfs.File, b []byte, off int64) (int, error)
	fsyncFile      func(f vfs.File) error
	startWriteback func(f vfs.File, off, n int64)
	removeStep     int64 // bytes a deleted segment's file is cut by at a time

	syncs atomic.Uint64 // fdatasync calls made
	// nsegs is len(segs), for Segments without mu: a Raft group asks on
	// every turn whether its log has a segment to let go.
	nsegs atomic.Int64

	// Lock order: wmu, then rmu, then smu, then mu.

	// wmu serializes the operations that change the log. Holding it makes
	// segs and every segment's pos, runs and size stable.
	wmu  sync.Mutex
	wbuf []byte  // encoding buffer reused by Append
	pend []chunk // per-segment results of the Append in progress
	// tail holds the records appended but not yet written, after the
	// segments' last one (behind.go); changed under wmu and mu both.
	tail      []Record
	tailBytes int64 // their data's size

	// rmu is held while DeletePrefix removes the files of the segments it
	// detached, which it does without wmu: unlinking a full segment takes
	// milliseconds that Append would otherwise wait. Reset, which may
	// name a new segment as one being removed, takes it too.
	rmu sync.Mutex

	// smu guards group-commit state.
	smu     sync.Mutex
	scond   sync.Cond  // signalled when a Sync leader finishes
	syncing bool       // a Sync leader is fdatasyncing
	synced  uint64     // value of written covered by the last good sync
	batch   []*segment // segments the current leader is syncing

	// mu guards what readers see. Readers hold it shared for the whole
	// read, pread included, so a file can be neither truncated nor closed
	// under them.
	mu      sync.RWMutex
	segs    []*segment // in index order; the last one is active; set with setSegs
	dirty   []*segment // segments with bytes no Sync has covered
	written uint64     // number of appends published
	closed  bool
	broken  error // sticky failure that makes further writes unsafe
}

// chunk is the part of an Append that goes to one segment.
type chunk struct {
	seg     *segment
	created bool // seg was created by this Append
	pos     []int64
	runs    []termRun
	size    int64
}

// Open opens the log in dir, creating the directory and an empty log if
// needed, and recovers existing segments. See the package documentation
// for what recovery repairs and what it reports as corruption.
func Open(dir string, opts Options) (*Log, error) {
	segSize := opts.SegmentSize
	if segSize == 0 {
		segSize = DefaultSegmentSize
	}
	if segSize <= headerSize {
		return nil, fmt.Errorf("open log %s: segment size %d is too small", dir, segSize)
	}
	if opts.WriteBehind > 0 && !opts.UnsyncedElsewhere {
		return nil, fmt.Errorf("open log %s: writing behind needs another log holding the records (Options.UnsyncedElsewhere)", dir)
	}
	fsys := opts.FS
	if fsys == nil {
		fsys = vfs.OS
	}
	bootID := opts.BootID
	if bootID == "" {
		bootID = vfs.BootID()
	}
	if err := vfs.MkdirDurable(fsys, dir); err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	files := opts.Files
	if files == nil {
		files = NewFiles(0)
	}
	l := &Log{
		fs:        fsys,
		dir:       dir,
		files:     files,
		segSize:   segSize,
		bootID:    bootID,
		covered:   opts.UnsyncedElsewhere,
		writeback: opts.WritebackEvery,
		behind:    opts.WriteBehind,
		writeAt:   vfs.File.WriteAt,
		fsyncFile: vfs.File.SyncData,

		startWriteback: vfs.StartWriteback,
		removeStep:     removeStep,
	}
	l.scond.L = &l.smu
	if opts.Preallocate {
		l.spare = newSpare(l)
	}
	st, ok, noTear, err := l.readState()
	if err != nil {
		return nil, err
	}
	if opts.UnsyncedElsewhere && opts.ElsewhereNoTear == "" {
		// Written, maybe, since its state file said otherwise: see
		// markWriting.
		noTear = ""
	}
	l.state, l.stateOK, l.noTear = st, ok, noTear
	if err := l.recover(); err != nil {
		for _, s := range l.segs {
			s.h.close()
		}
		return nil, err
	}
	return l, nil
}

// recover loads the segments in l.dir into l.segs.
func (l *Log) recover() error {
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("open log %s: %w", l.dir, err)
	}
	var bases []uint64
	var resets []string
	for _, name := range names {
		switch {
		case strings.HasSuffix(name, deletingSuffix):
			// A detached segment that a crash left partly emptied.
			if err := l.fs.Remove(l.path(name)); err != nil {
				return fmt.Errorf("open log %s: remove deleted segment: %w", l.dir, err)
			}
		case strings.HasSuffix(name, tmpSuffix):
			// A roll that crashed before renaming its new segment into
			// place; the segment never received a record.
			if err := l.fs.Remove(l.path(name)); err != nil {
				return fmt.Errorf("open log %s: remove unfinished segment: %w", l.dir, err)
			}
		case strings.HasSuffix(name, resetSuffix):
			resets = append(resets, name)
		case isSpareName(name):
			// Zeroed for a segment that was never made: made again
			// when needed, rather than trusted.
			if err := l.fs.Remove(l.path(name)); err != nil {
				return fmt.Errorf("open log %s: remove spare file: %w", l.dir, err)
			}
		default:
			if base, ok := parseSegName(name, segSuffix); ok {
				bases = append(bases, base)
			}
		}
	}
	slices.Sort(bases)

	if len(resets) > 1 {
		return corruptf(l.path(resets[1]), 0, "more than one unfinished reset (%s)", strings.Join(resets, ", "))
	}
	if len(resets) == 1 {
		base, done, err := l.finishReset(resets[0], bases)
		if err != nil {
			return err
		}
		if done {
			bases = []uint64{base}
		}
	}

	if len(bases) == 0 {
		s, err := l.createSegment(1, 0)
		if err != nil {
			return fmt.Errorf("open log %s: %w", l.dir, err)
		}
		l.setSegs([]*segment{s})
		return nil
	}

	torn := int64(-1)
	for i, base := range bases {
		path := l.path(segName(base, segSuffix))
		f, err := l.fs.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("open segment %s: %w", path, err)
		}
		s, t, err := scanSegment(f, path, base, i == len(bases)-1, l.noTear, l.covered)
		if err != nil {
			f.Close()
			return err
		}
		s.h = l.adopt(path, f, false)
		l.setSegs(append(l.segs, s))
		torn = t
		if i == 0 {
			continue
		}
		prev := l.segs[i-1]
		if s.base != prev.next() {
			return corruptf(path, 8, "segment starts at index %d but the previous segment %s ends at index %d",
				s.base, prev.path, prev.next()-1)
		}
		if s.prevTerm != prev.lastTerm() {
			return corruptf(path, 16, "segment header says the previous term is %d but %s ends with term %d",
				s.prevTerm, prev.path, prev.lastTerm())
		}
	}

	// Only now that everything checked out, cut away a torn tail.
	if torn >= 0 {
		s := l.segs[len(l.segs)-1]
		l.cutFrom = s.next()
		err := l.withFile(s, func(f vfs.File) error {
			if err := f.Truncate(torn); err != nil {
				return fmt.Errorf("truncate torn tail at offset %d: %w", torn, err)
			}
			return l.fsync(f)
		})
		if err != nil {
			return fmt.Errorf("open segment %s: %w", s.path, err)
		}
	}
	return nil
}

// finishReset completes or abandons a Reset that was interrupted by a
// crash. Reset makes its new segment durable before it deletes anything,
// so a valid header means the reset was committed and must be finished; an
// invalid one means nothing else was touched yet.
func (l *Log) finishReset(name string, bases []uint64) (base uint64, done bool, err error) {
	path := l.path(name)
	base, ok := parseSegName(name, resetSuffix)
	if !ok {
		return 0, false, nil // not ours
	}
	b, err := vfs.ReadFile(l.fs, path)
	if err != nil {
		return 0, false, fmt.Errorf("open log %s: read unfinished reset: %w", l.dir, err)
	}
	if h, herr := decodeHeader(b); herr != nil || h.base != base || len(b) != headerSize {
		if err := l.fs.Remove(path); err != nil {
			return 0, false, fmt.Errorf("open log %s: remove unfinished reset: %w", l.dir, err)
		}
		return 0, false, nil
	}
	for _, old := range bases {
		if err := l.fs.Remove(l.path(segName(old, segSuffix))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, false, fmt.Errorf("open log %s: finish reset: %w", l.dir, err)
		}
	}
	if err := l.fs.Rename(path, l.path(segName(base, segSuffix))); err != nil {
		return 0, false, fmt.Errorf("open log %s: finish reset: %w", l.dir, err)
	}
	if err := l.syncDir(); err != nil {
		return 0, false, fmt.Errorf("open log %s: finish reset: %w", l.dir, err)
	}
	return base, true, nil
}

func (l *Log) path(name string) string { return filepath.Join(l.dir, name) }

// adopt puts f, open on path, under the log's bound of open files; a
// pinned file stays open until its handle's put.
func (l *Log) adopt(path string, f vfs.File, pinned bool) *handle {
	return l.files.newHandle(l.fs, path, f, l.fsync, pinned)
}

// withFile runs fn on s's file, which fn changes and makes durable itself
// (a truncation, say).
func (l *Log) withFile(s *segment, fn func(f vfs.File) error) error {
	f, err := s.h.get(true)
	if err != nil {
		return err
	}
	defer s.h.put(false)
	return fn(f)
}

// fsync makes f's data durable, counting the call.
func (l *Log) fsync(f vfs.File) error {
	l.syncs.Add(1)
	return l.fsyncFile(f)
}

// syncDir makes the directory's entries durable. The directory is opened
// for it, not held: entries change only when segments are created,
// renamed or removed, and a node with thousands of logs would otherwise
// keep a file open for each of them.
func (l *Log) syncDir() error {
	return vfs.SyncDir(l.fs, l.dir)
}

// writeSegmentFile creates path holding just a segment header and makes
// its contents durable.
func (l *Log) writeSegmentFile(path string, h segHeader) (vfs.File, error) {
	return l.writeHeader(path, h, os.O_CREATE|os.O_TRUNC)
}

// writeSegmentHeader writes a segment header over the start of the
// existing file path (a spare of zeros) and makes it durable.
func (l *Log) writeSegmentHeader(path string, h segHeader) (vfs.File, error) {
	return l.writeHeader(path, h, 0)
}

func (l *Log) writeHeader(path string, h segHeader, flag int) (vfs.File, error) {
	f, err := l.fs.OpenFile(path, os.O_RDWR|flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create segment %s: %w", path, err)
	}
	if _, err = l.writeAt(f, encodeHeader(h), 0); err != nil {
		err = fmt.Errorf("create segment %s: write header: %w", path, err)
	} else if err = l.fsync(f); err != nil {
		err = fmt.Errorf("create segment %s: %w", path, err)
	}
	if err != nil {
		f.Close()
		l.fs.Remove(path)
		return nil, err
	}
	return f, nil
}

// createSegment creates a durable, empty segment. It is written under a
// temporary name and renamed into place, so that a crash never leaves a
// segment file with a partial header.
func (l *Log) createSegment(base, prevTerm uint64) (*segment, error) {
	path := l.path(segName(base, segSuffix))
	tmp := l.path(segName(base, tmpSuffix))
	h := segHeader{base: base, prevTerm: prevTerm}
	var f vfs.File
	var err error
	if l.spare.take(tmp) {
		h.zeroed = true
		f, err = l.writeSegmentHeader(tmp, h)
	} else {
		f, err = l.writeSegmentFile(tmp, h)
	}
	if err != nil {
		return nil, err
	}
	if err := l.fs.Rename(tmp, path); err != nil {
		f.Close()
		l.fs.Remove(tmp)
		return nil, fmt.Errorf("create segment %s: %w", path, err)
	}
	if err := l.syncDir(); err != nil {
		// Whether the new name is durable is unknown, so the directory
		// can no longer be trusted to match memory.
		f.Close()
		l.fs.Remove(path)
		err = fmt.Errorf("create segment %s: %w", path, err)
		l.fail(err)
		return nil, err
	}
	return &segment{path: path, h: l.adopt(path, f, false), base: base, prevTerm: prevTerm, size: headerSize,
		zeroed: h.zeroed, syncsBefore: l.syncs.Load()}, nil
}

// active returns the segment being appended to. The caller holds wmu or mu.
func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

// find returns the position in segs of the segment that holds index i, or
// would hold it if i is one past the end. The caller holds wmu or mu and
// has checked that i is not below the first segment.
func (l *Log) find(i uint64) int {
	return sort.Search(len(l.segs), func(k int) bool { return l.segs[k].base > i }) - 1
}

// fail records a failure after which writing could leave the log
// inconsistent on disk; every later write reports it. The caller must not
// hold mu.
func (l *Log) fail(err error) {
	l.mu.Lock()
	if l.broken == nil {
		l.broken = err
	}
	l.mu.Unlock()
}

// writable reports why the log cannot be written, if it cannot. The caller
// holds wmu.
func (l *Log) writable() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	if l.broken != nil {
		return fmt.Errorf("log %s failed earlier and must be reopened: %w", l.dir, l.broken)
	}
	return nil
}

// detach marks removed segments as no longer part of the log and drops
// them from the dirty list. The caller holds mu, and retires their
// handles once it has released it: a Sync leader still syncing one of
// them keeps its file open until it is done.
func (l *Log) detach(removed []*segment) {
	for _, s := range removed {
		s.removed = true
	}
	l.dirty = slices.DeleteFunc(l.dirty, func(s *segment) bool { return s.removed })
}

// retire lets the files of removed segments close.
func retire(removed []*segment) {
	for _, s := range removed {
		s.h.close()
	}
}

// Append appends recs, which must have consecutive indices. If recs[0]
// overlaps the log, the conflicting tail from recs[0].Index on is truncated
// first, as Raft requires. The records are readable at once and durable
// after the next Sync. A log writing behind (Options.WriteBehind) keeps
// recs, whose Data must then not be changed.
//
// An invalid batch changes nothing. If writing fails, for example because
// the disk is full, the log is rolled back to its state before the write
// and a later Append may succeed; a truncation that the batch required
// stays in effect.
func (l *Log) Append(recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	for i := range recs {
		if i > 0 && recs[i].Index != recs[i-1].Index+1 {
			return fmt.Errorf("append: record %d has index %d after index %d; indices must be consecutive",
				i, recs[i].Index, recs[i-1].Index)
		}
		if int64(len(recs[i].Data)) > maxDataSize {
			return fmt.Errorf("append: record %d has %d bytes of data, more than the limit of %d",
				recs[i].Index, len(recs[i].Data), maxDataSize)
		}
		if l.spare != nil && lastByte(&recs[i]) == 0 {
			return fmt.Errorf("append: record %d ends with a zero byte, which a preallocated log cannot tell from space never written",
				recs[i].Index)
		}
	}
	first, last := l.segs[0].base, l.lastIndex()
	at := recs[0].Index
	switch {
	case at > last+1:
		return fmt.Errorf("append at index %d: the log ends at index %d and must not have gaps", at, last)
	case at < first:
		return fmt.Errorf("append at index %d: the log starts at index %d: %w", at, first, ErrCompacted)
	}
	if err := l.markWriting(); err != nil {
		return fmt.Errorf("append at index %d: %w", at, err)
	}
	if at <= last {
		if err := l.cut(at); err != nil {
			return err
		}
	}
	if l.behind > 0 {
		return l.addToTail(recs)
	}
	return l.write(recs, false)
}

// cut removes every record from index from on, from the tail and, if it
// starts there, from the segments. The caller holds wmu and has checked
// that from is within the log.
func (l *Log) cut(from uint64) error {
	l.cutTail(from)
	if from < l.active().next() {
		return l.truncate(from)
	}
	return nil
}

// write appends recs at the end of the log, rolling segments as they fill.
// It issues one write call per segment touched. Nothing is visible to
// readers until every write has succeeded, and then recs are in the
// segments and, if they were the tail (fromTail), no longer in it. The
// caller holds wmu.
func (l *Log) write(recs []Record, fromTail bool) error {
	act := l.active()
	c := chunk{seg: act, pos: act.pos, runs: act.runs, size: act.size}
	done := l.pend[:0]
	buf := l.wbuf[:0]
	defer func() {
		clear(done)
		l.pend = done[:0]
		if cap(buf) <= MaxRetainedBuf {
			l.wbuf = buf[:0]
		} else {
			l.wbuf = nil
		}
	}()

	var err error
	// A segment in a file of its own growing rolls to a zeroed one as
	// soon as there is one (see Options.Preallocate).
	rollEarly := !act.zeroed && l.spare.ready()
	for i := range recs {
		r := &recs[i]
		if len(c.pos) > 0 && (rollEarly || c.size+int64(len(buf)) >= l.segSize) {
			rollEarly = false
			if err = l.flush(&c, buf); err != nil {
				break
			}
			buf = buf[:0]
			done = append(done, c)
			// The full segment must be durable before a later one exists:
			// recovery forgives a torn record only in the last segment.
			if err = c.seg.h.sync(); err != nil {
				err = fmt.Errorf("sync segment %s before rolling: %w", c.seg.path, err)
				l.fail(err)
				c = chunk{}
				break
			}
			var s *segment
			if s, err = l.createSegment(r.Index, c.runs[len(c.runs)-1].term); err != nil {
				c = chunk{}
				break
			}
			c = chunk{seg: s, created: true, size: headerSize}
		}
		c.pos = append(c.pos, c.size+int64(len(buf)))
		if n := len(c.runs); n == 0 || c.runs[n-1].term != r.Term {
			c.runs = append(c.runs, termRun{first: r.Index, term: r.Term})
		}
		buf = appendRecord(buf, r)
	}
	if err == nil {
		err = l.flush(&c, buf)
	}
	if c.seg != nil {
		done = append(done, c)
	}
	if err != nil {
		return l.rollback(done, act.size, recs, err)
	}

	l.mu.Lock()
	for i := range done {
		c := &done[i]
		s := c.seg
		if c.created {
			l.setSegs(append(l.segs, s))
		}
		if !c.created && c.size == s.size {
			continue // rolled away from without writing to it
		}
		s.pos, s.runs, s.size = c.pos, c.runs, c.size
		if !s.dirty {
			s.dirty = true
			l.dirty = append(l.dirty, s)
		}
	}
	if fromTail {
		l.takeTail()
	}
	l.written++
	l.mu.Unlock()
	l.spare.prepareFor(l.active())
	return nil
}

// flush writes buf at the end of c's segment.
func (l *Log) flush(c *chunk, buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	f, err := c.seg.h.get(true)
	if err != nil {
		return fmt.Errorf("write %d bytes to %s: %w", len(buf), c.seg.path, err)
	}
	_, err = l.writeAt(f, buf, c.size)
	if err == nil {
		c.size += int64(len(buf))
		if l.writeback > 0 && c.size-c.seg.writtenBack >= l.writeback {
			l.startWriteback(f, c.seg.writtenBack, c.size-c.seg.writtenBack)
			c.seg.writtenBack = c.size
		}
	}
	c.seg.h.put(true)
	if err != nil {
		return fmt.Errorf("write %d bytes to %s at offset %d: %w", len(buf), c.seg.path, c.size, err)
	}
	return nil
}

// rollback undoes the file changes of a failed write: segments it created
// are removed and the previously active one is cut back to size, its
// length before the write. In-memory state was never changed.
func (l *Log) rollback(done []chunk, size int64, recs []Record, cause error) error {
	err := fmt.Errorf("append %d records from index %d: %w; the disk may be full; "+
		"nothing from this batch was written", len(recs), recs[0].Index, cause)
	removed := false
	for _, c := range done {
		if c.created {
			c.seg.h.close()
			l.fs.Remove(c.seg.path)
			removed = true
		}
	}
	// Make the removal durable: if a removed segment came back after a
	// crash, it would not line up with what gets appended next.
	if removed {
		if serr := l.syncDir(); serr != nil {
			serr = fmt.Errorf("roll back failed append: %w", serr)
			l.fail(serr)
			return errors.Join(err, serr)
		}
	}
	act := l.active()
	ferr := l.withFile(act, func(f vfs.File) error {
		if terr := f.Truncate(size); terr != nil {
			// The file may now hold part of the batch after the last
			// good record; appending after it could mix stale and new
			// records.
			return fmt.Errorf("truncate %s to %d bytes: %w", act.path, size, terr)
		}
		// The cut must be durable: a batch that spanned segments was
		// synced into this one before the roll, and must not come back
		// after a crash as if the failed append had succeeded.
		return l.fsync(f)
	})
	if ferr != nil {
		ferr = fmt.Errorf("roll back failed append: %w", ferr)
		l.fail(ferr)
		return errors.Join(err, ferr)
	}
	return err
}

// TruncateSuffix removes every record with index >= from. It is durable
// when it returns: removed segment files are unlinked and the directory
// synced, then the segment holding from is truncated and fdatasynced. A
// from beyond LastIndex is a no-op.
func (l *Log) TruncateSuffix(from uint64) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if first := l.segs[0].base; from < first {
		return fmt.Errorf("truncate suffix from index %d: the log starts at index %d: %w", from, first, ErrCompacted)
	}
	if from > l.lastIndex() {
		return nil
	}
	if err := l.markWriting(); err != nil {
		return fmt.Errorf("truncate suffix from index %d: %w", from, err)
	}
	return l.cut(from)
}

// truncate implements TruncateSuffix for a from within the log. The caller
// holds wmu.
func (l *Log) truncate(from uint64) error {
	k := l.find(from)
	s := l.segs[k]
	keep := int(from - s.base) // < len(s.pos): from is in s
	size := s.pos[keep]
	runs := s.runs[:sort.Search(len(s.runs), func(j int) bool { return s.runs[j].first >= from })]
	removed := slices.Clone(l.segs[k+1:])

	l.mu.Lock()
	clear(l.segs[k+1:])
	l.setSegs(l.segs[:k+1])
	s.pos, s.runs, s.size = s.pos[:keep], runs, size
	l.detach(removed)
	l.mu.Unlock()
	retire(removed)
	// Remove later segments newest first, and make that durable before
	// touching s: a crash in between must leave a prefix of the old log,
	// never a shortened segment followed by the stale ones.
	var err error
	for i := len(removed) - 1; i >= 0 && err == nil; i-- {
		if rerr := l.fs.Remove(removed[i].path); rerr != nil {
			err = fmt.Errorf("truncate suffix from index %d: %w", from, rerr)
		}
	}
	if err == nil && len(removed) > 0 {
		err = l.syncDir()
	}
	if err == nil {
		err = l.withFile(s, func(f vfs.File) error {
			if terr := f.Truncate(size); terr != nil {
				return fmt.Errorf("truncate suffix from index %d: truncate %s: %w", from, s.path, terr)
			}
			if serr := l.fsync(f); serr != nil {
				return fmt.Errorf("truncate suffix from index %d: %w", from, serr)
			}
			return nil
		})
	}
	if err != nil {
		// Memory no longer matches the disk.
		l.fail(err)
	}
	return err
}

// DeletePrefix deletes the segment files all of whose records have
// indices below below, oldest first, and returns how many it deleted. It
// never deletes the active segment or part of a segment, so FirstIndex may
// stay below below.
//
// The deletion is made durable in the directory before DeletePrefix
// returns, so space the caller counts as freed stays freed after a crash
// (a file whose final unlink a crash undid is under a name that recovery
// removes).
// A preallocated log keeps one deleted file to zero into its next spare
// (prealloc.go, Recycling) instead of unlinking it. A log writing behind
// first writes what it holds in memory, so that the records below below
// can be in segments that are not the active one.
func (l *Log) DeletePrefix(below uint64) (deletedSegments int, err error) {
	l.wmu.Lock()
	if err := l.writeTail(); err != nil {
		l.wmu.Unlock()
		return 0, fmt.Errorf("delete prefix below index %d: %w", below, err)
	}
	l.rmu.Lock()
	defer l.rmu.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.wmu.Unlock()
		return 0, ErrClosed
	}
	n := l.prefixSegments(below)
	removed := slices.Clone(l.segs[:n])
	l.setSegs(slices.Delete(l.segs, 0, n))
	l.detach(removed)
	l.mu.Unlock()
	// The segments are gone from memory, and the names of segments
	// appended later are above theirs: appends may go on while the files
	// are removed.
	l.wmu.Unlock()
	retire(removed)
	if err := l.removeSegmentFiles(removed); err != nil {
		return n, fmt.Errorf("delete prefix below index %d: %w", below, err)
	}
	return n, nil
}

// removeSegmentFiles removes the files of segments detached from the log
// (but for one a preallocated log recycles), durably. Each is renamed to a
// name recovery removes, and one sync of the directory makes the renames
// (and the recycling) durable; only then is each emptied in steps and
// unlinked (vfs.RemoveInSteps), which needs no sync of its own: a crash
// meanwhile must not leave a segment cut short under its own name, which
// recovery would find followed by a gap and call damage.
func (l *Log) removeSegmentFiles(removed []*segment) error {
	if len(removed) == 0 {
		return nil
	}
	var errs []error
	var renamed []string
	for _, s := range removed {
		if l.spare.recycle(s.path) {
			continue
		}
		doomed := l.path(segName(s.base, deletingSuffix))
		if err := l.fs.Rename(s.path, doomed); err != nil {
			// Removed at once, as a whole.
			if err := l.fs.Remove(s.path); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		renamed = append(renamed, doomed)
	}
	if err := l.syncDir(); err != nil {
		// The segments' own names may come back after a crash: they are
		// unlinked whole, never cut.
		errs = append(errs, err)
		for _, doomed := range renamed {
			if err := l.fs.Remove(doomed); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, doomed := range renamed {
		if err := vfs.RemoveInSteps(l.fs, doomed, l.removeStep); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PrefixEnd returns the index of the first record DeletePrefix(below)
// would keep: the records below it are in the segments it would delete.
func (l *Log) PrefixEnd(below uint64) uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0
	}
	return l.segs[l.prefixSegments(below)].base
}

// WouldDelete reports whether DeletePrefix(below) would delete a segment:
// whether compacting the log to below frees disk space. Records not yet
// written to the segments (Options.WriteBehind) do not count, so it may
// say no where DeletePrefix, which writes them first, would delete one;
// WouldDeleteWritten does not.
func (l *Log) WouldDelete(below uint64) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.prefixSegments(below) > 0
}

// WouldDeleteWritten writes the records not yet written, as DeletePrefix
// does, and then reports whether DeletePrefix(below) would delete a
// segment. Only further appends can change the answer.
func (l *Log) WouldDeleteWritten(below uint64) (bool, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writeTail(); err != nil {
		return false, fmt.Errorf("write the log's tail: %w", err)
	}
	return l.WouldDelete(below), nil
}

// prefixSegments returns how many segments, oldest first, hold only
// records below below: never the active one. The caller holds mu.
func (l *Log) prefixSegments(below uint64) int {
	n := 0
	for n+1 < len(l.segs) && l.segs[n+1].base <= below {
		n++
	}
	return n
}

// Reset drops every record. The next Append must start at index next, and
// Term(next-1) answers prevTerm; this is how a Raft snapshot replaces the
// log. Reset is durable when it returns, and atomic across a crash: the
// new, empty segment is made durable under a temporary name before any old
// segment is deleted, and Open finishes an interrupted Reset.
func (l *Log) Reset(next, prevTerm uint64) error {
	if next == 0 {
		return errors.New("reset: the next index must be at least 1")
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.rmu.Lock()
	defer l.rmu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if err := l.markWriting(); err != nil {
		return fmt.Errorf("reset to index %d: %w", next, err)
	}

	path := l.path(segName(next, segSuffix))
	tmp := l.path(segName(next, resetSuffix))
	f, err := l.writeSegmentFile(tmp, segHeader{base: next, prevTerm: prevTerm})
	if err != nil {
		return fmt.Errorf("reset to index %d: %w", next, err)
	}
	if err := l.syncDir(); err != nil {
		f.Close()
		l.fs.Remove(tmp)
		err = fmt.Errorf("reset to index %d: %w", next, err)
		l.fail(err)
		return err
	}

	// The reset is committed; switch readers over to the new segment.
	// Its file stays open (pinned) until it is renamed to the path it
	// would be opened again by.
	s := &segment{path: path, h: l.adopt(path, f, true), base: next, prevTerm: prevTerm, size: headerSize}
	defer s.h.put(false)
	l.mu.Lock()
	old := l.segs
	l.setSegs([]*segment{s})
	l.detach(old)
	l.takeTail()
	l.mu.Unlock()
	retire(old)
	var errs []error
	for _, o := range old {
		if err := l.fs.Remove(o.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := l.fs.Rename(tmp, path); err != nil {
			errs = append(errs, err)
		} else if err := l.syncDir(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// Open would finish the reset; until then the files do not match
		// memory.
		err := fmt.Errorf("reset to index %d: %w", next, errors.Join(errs...))
		l.fail(err)
		return err
	}
	return nil
}

// FirstIndex returns the index of the first record held, or LastIndex()+1
// if the log is empty. It returns 0 once the log is closed.
func (l *Log) FirstIndex() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0
	}
	return l.segs[0].base
}

// LastIndex returns the index of the last record, 0 for a new log, or
// FirstIndex()-1 if the log is empty. It returns 0 once the log is closed.
func (l *Log) LastIndex() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0
	}
	return l.lastIndex()
}

// Term returns the term of the record at index, for FirstIndex()-1 <=
// index <= LastIndex(). The term of FirstIndex()-1 comes from the first
// segment's header, and the term of index 0 is 0. It does not read the
// disk.
func (l *Log) Term(index uint64) (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, ErrClosed
	}
	if index == 0 {
		return 0, nil
	}
	first, last := l.segs[0].base, l.lastIndex()
	switch {
	case index < first-1:
		return 0, fmt.Errorf("term of index %d: the log starts at index %d: %w", index, first, ErrCompacted)
	case index > last:
		return 0, fmt.Errorf("term of index %d: the log ends at index %d: %w", index, last, ErrUnavailable)
	case index == first-1:
		return l.segs[0].prevTerm, nil
	}
	if k, ok := l.tailFrom(index); ok {
		return l.tail[k].Term, nil
	}
	return l.segs[l.find(index)].term(index), nil
}

// Entries returns the records with indices in [lo, hi). If maxBytes is not
// 0 it stops before the total size of the records' Data would exceed
// maxBytes, but it always returns at least one record if lo < hi. The
// Data of the returned records may share backing arrays with each other
// and must not be modified.
func (l *Log) Entries(lo, hi, maxBytes uint64) ([]Record, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, ErrClosed
	}
	first, last := l.segs[0].base, l.lastIndex()
	switch {
	case lo < first:
		return nil, fmt.Errorf("entries from index %d: the log starts at index %d: %w", lo, first, ErrCompacted)
	case hi > last+1:
		return nil, fmt.Errorf("entries up to index %d: the log ends at index %d: %w", hi, last, ErrUnavailable)
	case lo > hi:
		return nil, fmt.Errorf("entries [%d, %d): invalid range", lo, hi)
	case lo == hi:
		return nil, nil
	}

	var out []Record
	var total uint64
	full := false
	i, onDisk := lo, min(hi, l.active().next())
	for k := l.find(lo); i < onDisk && !full; k++ {
		s := l.segs[k]
		end := min(hi, s.next())
		// Decide from the positions alone how many records fit, then read
		// them all with one pread.
		j := i
		for ; j < end; j++ {
			n := uint64(s.end(j)-s.pos[j-s.base]) - recordOverhead
			if maxBytes > 0 && j > lo && total+n > maxBytes {
				full = true
				break
			}
			total += n
		}
		if j > i {
			out = slices.Grow(out, int(j-i))
			var err error
			if out, err = s.read(out, i, j); err != nil {
				return nil, err
			}
		}
		i = j
	}
	if !full && i < hi {
		out = l.tailEntries(out, i, hi, maxBytes, total, i == lo)
	}
	return out, nil
}

// SizeBytes returns the total size of the segment files.
func (l *Log) SizeBytes() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segs {
		n += s.size
	}
	return n
}

// ClosedThrough returns the index of the last record in a segment the
// log no longer writes (any but the active one), 0 if it has none. Such
// records change only by TruncateSuffix, which Raft does only above its
// commit index: a reader of committed records below it reads settled
// files.
func (l *Log) ClosedThrough() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed || len(l.segs) < 2 {
		return 0
	}
	return l.segs[len(l.segs)-1].base - 1
}

// KeepFrom returns the index of the first record of the oldest segment
// that must stay for the log to keep at least keep bytes of its newest
// segments: DeletePrefix(KeepFrom(keep)) leaves keep bytes or more (all
// of the log if it holds less).
func (l *Log) KeepFrom(keep int64) uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0
	}
	var held int64
	for i := len(l.segs) - 1; i > 0; i-- {
		held += l.segs[i].size
		if held >= keep {
			return l.segs[i].base
		}
	}
	return l.segs[0].base
}

// Segments returns the number of segment files.
func (l *Log) Segments() int { return int(l.nsegs.Load()) }

// setSegs replaces the segments; the caller holds mu, or has the log to
// itself.
func (l *Log) setSegs(segs []*segment) {
	l.segs = segs
	l.nsegs.Store(int64(len(segs)))
}

// NoTear says why recovery found that no write of the log can have been
// torn by a power loss (it was closed cleanly, or written in this boot),
// "" if one can.
func (l *Log) NoTear() string { return l.noTear }

// CutFrom returns the index of the first record that recovery cut from
// the end of the log as a torn write, and whether it cut any.
func (l *Log) CutFrom() (uint64, bool) { return l.cutFrom, l.cutFrom != 0 }

// SyncCount returns the number of fdatasync calls the log has made on
// segment files. Directory fsyncs are not counted.
func (l *Log) SyncCount() uint64 { return l.syncs.Load() }

// Dir returns the directory holding the log.
func (l *Log) Dir() string { return l.dir }

// Close syncs the log and releases its files. If the log failed earlier it
// is not synced and Close reports the failure. Using the log afterwards
// returns ErrClosed.
func (l *Log) Close() error { return l.close(true) }

// CloseUnclean is Close, but leaves the log marked as written in this
// boot, as a crash would: for a log whose NoTear others rely on
// (Options.ElsewhereNoTear) when one of them could not be synced.
func (l *Log) CloseUnclean() error { return l.close(false) }

func (l *Log) close(clean bool) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	// The tail goes out while a segment may still roll into the spare.
	tailErr := l.writeTail()
	l.spare.close()
	l.mu.RLock()
	closed, broken := l.closed, l.broken
	l.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	var errs []error
	if broken != nil {
		errs = append(errs, fmt.Errorf("close log %s: not synced, it failed earlier: %w", l.dir, broken))
	} else if tailErr != nil {
		errs = append(errs, fmt.Errorf("close log %s: %w", l.dir, tailErr))
	} else if err := l.syncWritten(); err != nil {
		errs = append(errs, err)
	} else if !clean {
		if err := l.setState(logState{bootID: l.bootID}); err != nil {
			errs = append(errs, fmt.Errorf("close log %s: record that it was not closed cleanly: %w", l.dir, err))
		}
	} else if err := l.markClean(); err != nil {
		errs = append(errs, fmt.Errorf("close log %s: %w", l.dir, err))
	}

	l.smu.Lock()
	for l.syncing {
		l.scond.Wait()
	}
	l.mu.Lock()
	l.closed = true
	segs := l.segs
	l.segs, l.dirty = nil, nil
	l.mu.Unlock()
	l.smu.Unlock()

	for _, s := range segs {
		if err := s.h.close(); err != nil {
			errs = append(errs, fmt.Errorf("close segment %s: %w", s.path, err))
		}
	}
	return errors.Join(errs...)
}
