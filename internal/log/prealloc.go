package log

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"herald/internal/vfs"
)

// Preallocation (Options.Preallocate).
//
// On ext4, as on most journaling file systems, an fdatasync after a write
// that grew the file must also commit the journal, since the file's size
// changed; one after a write over blocks already allocated and written
// flushes the data alone. On the machine herald is measured on, a 4 KiB
// write and fdatasync took 160-230 µs (90-130 µs of CPU) appending,
// 100-125 µs (55-70 µs of CPU) over zeros. fallocate does not help: it leaves the blocks
// unwritten, and the first write to each converts it, in the journal. So
// a preallocated log writes each segment into a file already filled with
// zeros and synced, a spare, which a goroutine zeroes in the background
// while the segment before it fills up.
//
// A zeroed segment (header version segVersionZeroed) ends where its last
// nonzero byte does, not where its file does. Recovery needs nothing else
// to tell an unfinished write from damage, provided every record ends
// with a nonzero byte, which Append enforces: a record that reaches past
// the last nonzero byte never had its last byte written, exactly as a
// record reaching past the end of an unzeroed file never had it, and is
// torn; a fully written record keeps its nonzero last byte, so a flipped
// bit inside it cannot make it look unfinished. One limit: if the disk
// returned zeros in place of the newest records, with nothing written
// after them, they would read as space never written.

const (
	spareName    = "spare.zeroed"     // a file of zeros, synced, ready to become a segment
	spareTmpName = "spare.zeroed.tmp" // being zeroed
	recycledName = "spare.recycled"   // a deleted segment's file, to be zeroed into the next spare
)

// spareChunk is the size of each zero write that fills a spare; each is
// synced before the next. What a sync writes, the log's own fdatasyncs
// may queue behind, so it is small: with 8 MiB, they took 5 ms each while
// a spare was filled, and the p99 of publishing one event per call was
// 6.3-7.0 ms against 5.4-5.7 ms with 1 MiB (A/B runs, one shard). A disk
// that writes 200 MB/s takes 1.3 ms for 256 KiB.
//
// After each chunk the fill rests as long as the chunk took: the log's
// fdatasyncs then find the disk idle half the time, instead of never,
// while a spare is filled. A spare takes twice as long as writing it: at
// 200 MB/s, 0.7 s for 64 MiB, which a WAL synced every few dozen
// kilobytes took 2.3-2.7 s to fill on that disk (30,000 events of 1 KiB
// a second). Should the segment fill first, the next one is made the
// plain way.
const spareChunk = 256 << 10

func isSpareName(name string) bool {
	return name == spareName || name == spareTmpName || name == recycledName
}

// Recycling. A segment that DeletePrefix deletes is not unlinked but kept,
// renamed, to be zeroed into the next spare in place. Unlinking a
// segment's worth of blocks and allocating as many again costs the
// journal, and on a file system mounted with discard a discard of every
// freed block, which the log's own fdatasyncs wait behind: on the machine
// herald is measured on, an unlink took 15 ms and the fdatasyncs during
// it 10 ms instead of 0.2. Zeroing over blocks already allocated changes
// no metadata. One deleted file is kept at a time.

// spareStartFraction: a spare is zeroed once the active segment holds a
// 64th of a segment, not before, so that a log that writes little (a
// test's, an idle node's) never writes a segment's worth of zeros.
const spareStartFraction = 64

// spareWorthBytes is the most bytes per fdatasync at which zeroing pays.
// A zeroed file saves about 50 µs of CPU and 80 µs of waiting per
// fdatasync, and zeroing costs about 0.26 ns of CPU and 0.75 ns of disk
// time per byte (64 MiB: 17 ms of CPU, 50 ms in all), so it pays below
// about 100-230 KB per fdatasync. Publishing one event per request syncs
// every few dozen kilobytes; batches of a hundred, every half megabyte or
// more, where zeroing would double what the disk writes for little.
const spareWorthBytes = 128 << 10

// spare is the zeroed file the log's next segment is written into, and
// the goroutine that makes it. Its methods are safe on a nil *spare (a
// log that does not preallocate), which has none.
type spare struct {
	l *Log

	mu      sync.Mutex
	filling *segment // the active segment when the fill in progress started
	failed  *segment // the active segment when the last fill failed
	isReady bool     // spareName is zeroed and synced
	// recycled says recycledName holds a deleted segment's file for the
	// next fill to zero.
	recycled bool
	stop     chan struct{}
	wg       sync.WaitGroup
}

func newSpare(l *Log) *spare { return &spare{l: l, stop: make(chan struct{})} }

// ready reports whether a zeroed spare is waiting.
func (s *spare) ready() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.isReady
}

// take renames the zeroed spare to path, for a new segment to be written
// into, and reports whether there was one. The caller holds wmu.
func (s *spare) take(path string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.isReady {
		return false
	}
	s.isReady = false
	// A failed rename leaves the spare where it is, to be removed at the
	// next Open; the segment is then made the plain way.
	return s.l.fs.Rename(s.l.path(spareName), path) == nil
}

// prepareFor starts zeroing a spare unless one is ready or being made,
// once the active segment act is far enough along to need one soon, and
// if it has been synced often enough for zeroing to pay. A
// fill that failed (the disk full, say: a spare takes a segment's worth
// of space) is not tried again before the next segment; until a spare is
// made, segments are made the plain way. The caller holds wmu.
func (s *spare) prepareFor(act *segment) {
	if s == nil || act.size < s.l.segSize/spareStartFraction {
		return
	}
	if syncs := s.l.syncs.Load() - act.syncsBefore; syncs == 0 || act.size/int64(syncs) > spareWorthBytes {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.filling != nil || s.isReady || s.failed == act {
		return
	}
	select {
	case <-s.stop:
		return
	default:
	}
	s.filling = act
	s.wg.Go(s.fill)
}

// fill zeroes a spare of a segment's size, syncs it and renames it to
// spareName.
func (s *spare) fill() {
	err := s.zero()
	if err != nil {
		s.l.fs.Remove(s.l.path(spareTmpName))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failed = s.filling
	}
	s.filling = nil
	s.isReady = err == nil
}

// recycle keeps the file at path, of a segment DeletePrefix deleted, for
// the next fill, unless one is kept already; it reports whether it did.
// The caller makes the rename durable with the deletion.
func (s *spare) recycle(path string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recycled {
		return false
	}
	s.recycled = s.l.fs.Rename(path, s.l.path(recycledName)) == nil
	return s.recycled
}

// create opens the file a fill zeroes: the recycled file if there is
// one, cut to a segment's size, else a new one.
func (s *spare) create(tmp string) (vfs.File, error) {
	s.mu.Lock()
	recycled := s.recycled && s.l.fs.Rename(s.l.path(recycledName), tmp) == nil
	s.recycled = false
	s.mu.Unlock()
	if !recycled {
		return s.l.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	}
	// The deleted segment's name must be gone for good before its
	// records are zeroed: a power loss that brought the name back would
	// bring it back zeroed, a segment damaged in the middle of the log.
	if err := s.l.syncDir(); err != nil {
		return nil, err
	}
	f, err := s.l.fs.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	// Zeroing covers a segment's size; what lies past it must go, or
	// its bytes would read as records written after the zeros.
	if size, err := f.Size(); err != nil || size > s.l.segSize {
		if err == nil {
			err = f.Truncate(s.l.segSize)
		}
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

var errSpareStopped = errors.New("log closed while zeroing a spare")

func (s *spare) zero() error {
	tmp := s.l.path(spareTmpName)
	f, err := s.create(tmp)
	if err != nil {
		return fmt.Errorf("create spare %s: %w", tmp, err)
	}
	defer f.Close()
	zeros := make([]byte, spareChunk)
	rest := time.NewTimer(0)
	defer rest.Stop()
	for off := int64(0); off < s.l.segSize; off += spareChunk {
		select {
		case <-s.stop:
			return errSpareStopped
		case <-rest.C:
		}
		began := time.Now()
		if _, err := f.WriteAt(zeros[:min(spareChunk, s.l.segSize-off)], off); err != nil {
			return fmt.Errorf("zero spare %s at offset %d: %w", tmp, off, err)
		}
		// Written back as it goes, not in one burst that the log's own
		// fdatasyncs would queue behind.
		if err := f.SyncData(); err != nil {
			return fmt.Errorf("sync spare %s: %w", tmp, err)
		}
		rest.Reset(time.Since(began)) // as long as the chunk took
	}
	// Synced whole, size included, before it may be taken: what a
	// segment's records are written over must already be durable zeros.
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync spare %s: %w", tmp, err)
	}
	if err := s.l.fs.Rename(tmp, s.l.path(spareName)); err != nil {
		return fmt.Errorf("rename spare %s: %w", tmp, err)
	}
	return nil
}

// close stops a fill in progress and waits for it. A spare left on disk
// is removed at the next Open.
func (s *spare) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// contentEnd returns the offset just past the last nonzero byte of f at
// or after off, or off if there is none: where the records of a zeroed
// segment of the given size end.
func contentEnd(f vfs.File, off, size int64) (int64, error) {
	buf := make([]byte, min(spareChunk, max(size-off, 0)))
	for end := size; end > off; {
		start := max(off, end-int64(len(buf)))
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil {
			return 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != 0 {
				return start + int64(i) + 1, nil
			}
		}
		end = start
	}
	return off, nil
}
