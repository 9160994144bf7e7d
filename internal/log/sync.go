package log

import (
	"fmt"
)

// Sync makes every record appended before the call durable.
//
// Concurrent calls are group-committed. The first caller becomes the
// leader: it takes the list of segments with unsynced bytes and fdatasyncs
// them without holding the lock readers and Append need. Callers arriving
// meanwhile wait; when the leader finishes, those whose appends it did not
// cover elect one new leader whose fdatasync covers all of them. So a Sync
// costs at most the remainder of one in-flight fdatasync plus one more.
//
// A failed fdatasync leaves the state of the page cache unknown, so the
// failure is sticky: every later write and Sync reports it, and the log
// must be reopened (which re-verifies what reached the disk).
//
// A log writing behind (Options.WriteBehind) first writes the records it
// holds in memory.
func (l *Log) Sync() error {
	if l.behind > 0 {
		l.wmu.Lock()
		err := l.writeTail()
		l.wmu.Unlock()
		if err != nil {
			return fmt.Errorf("sync log %s: %w", l.dir, err)
		}
	}
	return l.syncWritten()
}

// syncWritten is Sync of what has been written to the segment files.
func (l *Log) syncWritten() error {
	l.smu.Lock()
	defer l.smu.Unlock()

	l.mu.RLock()
	target, closed := l.written, l.closed
	l.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	for {
		if l.synced >= target {
			return nil
		}
		if !l.syncing {
			break
		}
		l.scond.Wait()
	}

	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return ErrClosed
	case l.broken != nil:
		err := l.broken
		l.mu.Unlock()
		return fmt.Errorf("sync log %s: it failed earlier and must be reopened: %w", l.dir, err)
	}
	seq := l.written
	batch := append(l.batch[:0], l.dirty...)
	for _, s := range batch {
		s.dirty = false
	}
	clear(l.dirty)
	l.dirty = l.dirty[:0]
	l.mu.Unlock()

	// Lead: fdatasync with only smu released, so readers and Append go on.
	l.syncing = true
	l.smu.Unlock()
	// A segment removed meanwhile keeps its file open until its fdatasync
	// is done (see handle.retire), or was closed and needs none.
	var err error
	for _, s := range batch {
		if serr := s.h.sync(); serr != nil && err == nil {
			err = fmt.Errorf("sync segment %s: %w; the log must be reopened", s.path, serr)
		}
	}
	l.smu.Lock()

	if err != nil {
		l.fail(err)
	}

	clear(batch)
	l.batch = batch[:0]
	if err == nil {
		l.synced = seq
	}
	l.syncing = false
	l.scond.Broadcast()
	return err
}
