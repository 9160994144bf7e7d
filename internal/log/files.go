package log

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"herald/internal/vfs"
)

// Files bounds how many segment files the logs sharing it keep open: a
// node with a hundred thousand shards has a hundred thousand logs, more
// than the process may have files open, while few of them are in use at
// any moment. When more than the bound are open, the least recently used
// file that no operation is using is closed, after an fdatasync if bytes
// written through it have not been synced yet, so that closing never
// loses what a later Sync must make durable; the next read or write of
// its segment opens it again.
//
// The bound is soft: a file in use is never closed, and a file whose
// sync before closing failed stays open (its log reports the failure and
// must be reopened), so more may be open for a moment.
type Files struct {
	max int // 0: unbounded

	mu   sync.Mutex
	cond sync.Cond // signalled when a handle stops being busy
	open int       // handles with a file open, or being opened
	// idle lists the open handles no operation uses, most recently used
	// first: a ring through handle.prev and next, of which idle is the
	// head, not a handle. Linked in place, so that a read or write of a
	// busy log allocates nothing here.
	idle handle

	reopens atomic.Uint64 // files opened again after the bound closed them
	closes  atomic.Uint64 // files the bound closed
}

// NewFiles returns a bound of max open segment files, shared by every log
// opened with it (Options.Files). max < 1 means no bound.
func NewFiles(max int) *Files {
	f := &Files{max: max}
	f.cond.L = &f.mu
	f.idle.prev, f.idle.next = &f.idle, &f.idle
	return f
}

// Open is how many segment files are open.
func (fs *Files) Open() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.open
}

// Reopens is how many times a segment file closed by the bound was opened
// again.
func (fs *Files) Reopens() uint64 { return fs.reopens.Load() }

// Closes is how many segment files the bound has closed.
func (fs *Files) Closes() uint64 { return fs.closes.Load() }

// handle is one segment's file. An operation pins it (get) for as long as
// it uses the file and unpins it (put) after; only an unpinned file is
// closed by the bound. Its fields are guarded by files.mu, but path, fs
// and fsync, which are set at creation.
type handle struct {
	files *Files
	fs    vfs.FS
	path  string
	fsync func(vfs.File) error // the log's, which counts its calls

	f        vfs.File // nil while closed by the bound
	pins     int
	busy     bool // being opened, or closed by the bound
	unsynced bool // written through since its last fdatasync
	retired  bool // its segment left the log: close it when unpinned
	err      error
	// prev and next link the handle into files.idle while it is open and
	// unpinned; nil otherwise.
	prev, next *handle
}

// pushIdle puts h at the front of the idle list. The caller holds mu.
func (fs *Files) pushIdle(h *handle) {
	h.prev, h.next = &fs.idle, fs.idle.next
	h.next.prev = h
	fs.idle.next = h
}

// unidle takes h off the idle list if it is on it. The caller holds mu.
func (fs *Files) unidle(h *handle) {
	if h.next == nil {
		return
	}
	h.prev.next, h.next.prev = h.next, h.prev
	h.prev, h.next = nil, nil
}

// newHandle registers f, open on path, with the bound. A pinned handle
// starts in use (its file is not at path yet, say): put releases it.
func (fs *Files) newHandle(fsys vfs.FS, path string, f vfs.File, fsync func(vfs.File) error, pinned bool) *handle {
	h := &handle{files: fs, fs: fsys, path: path, fsync: fsync, f: f}
	fs.mu.Lock()
	fs.open++
	var victims []*handle
	if pinned {
		h.pins = 1
	} else {
		fs.pushIdle(h)
		victims = fs.evictLocked()
	}
	fs.mu.Unlock()
	fs.closeVictims(victims)
	return h
}

// get pins the handle's file, opening it again if the bound closed it.
// A writer is refused once a sync of the file failed; a reader is not.
func (h *handle) get(write bool) (vfs.File, error) {
	fs := h.files
	fs.mu.Lock()
	for h.busy {
		fs.cond.Wait()
	}
	if write && h.err != nil {
		err := h.err
		fs.mu.Unlock()
		return nil, err
	}
	if h.f != nil {
		h.pins++
		fs.unidle(h)
		f := h.f
		fs.mu.Unlock()
		return f, nil
	}
	h.busy = true
	fs.open++
	victims := fs.evictLocked()
	fs.mu.Unlock()
	fs.closeVictims(victims)

	f, err := h.fs.OpenFile(h.path, os.O_RDWR, 0)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	h.busy = false
	fs.cond.Broadcast()
	if err != nil {
		fs.open--
		return nil, fmt.Errorf("open segment %s again: %w", h.path, err)
	}
	fs.reopens.Add(1)
	h.f, h.pins = f, 1
	return f, nil
}

// put unpins the handle; wrote says the caller wrote through the file
// without syncing it.
func (h *handle) put(wrote bool) {
	fs := h.files
	fs.mu.Lock()
	if wrote {
		h.unsynced = true
	}
	h.pins--
	var victims []*handle
	var closeNow vfs.File
	if h.pins == 0 {
		switch {
		case h.retired:
			closeNow, h.f = h.f, nil
			if closeNow != nil {
				fs.open--
			}
		case h.err == nil:
			fs.pushIdle(h)
			victims = fs.evictLocked()
		}
	}
	fs.mu.Unlock()
	if closeNow != nil {
		closeNow.Close()
	}
	fs.closeVictims(victims)
}

// sync makes what was written through the handle durable. A file the
// bound closed was synced before it was closed.
func (h *handle) sync() error {
	fs := h.files
	fs.mu.Lock()
	for h.busy {
		fs.cond.Wait()
	}
	switch {
	case h.err != nil:
		err := h.err
		fs.mu.Unlock()
		return err
	case h.f == nil:
		fs.mu.Unlock()
		return nil
	}
	f := h.f
	h.pins++
	fs.unidle(h)
	// Cleared before the fdatasync: a write that lands during it sets it
	// again, and the fdatasync may not cover that write.
	h.unsynced = false
	fs.mu.Unlock()
	err := h.fsync(f)
	h.put(err != nil)
	return err
}

// close retires the handle, when its segment leaves the log or the log
// closes, and closes its file unless an operation still uses it (the last
// one closes it then); it returns the error of a close made now.
func (h *handle) close() error {
	fs := h.files
	fs.mu.Lock()
	for h.busy {
		fs.cond.Wait()
	}
	h.retired = true
	fs.unidle(h)
	var f vfs.File
	if h.pins == 0 && h.f != nil {
		f, h.f = h.f, nil
		fs.open--
	}
	fs.mu.Unlock()
	if f == nil {
		return nil
	}
	return f.Close()
}

// evictLocked takes, least recently used first, the idle handles to close
// for the open files to fit the bound, and marks them busy. The caller
// holds mu and closes them with closeVictims once it has released it.
func (fs *Files) evictLocked() []*handle {
	if fs.max < 1 {
		return nil
	}
	var victims []*handle
	for fs.open-len(victims) > fs.max {
		h := fs.idle.prev // the least recently used
		if h == &fs.idle {
			break
		}
		fs.unidle(h)
		h.busy = true
		victims = append(victims, h)
	}
	return victims
}

// closeVictims closes the files evictLocked chose, each after an
// fdatasync if it has unsynced bytes. A file whose fdatasync fails stays
// open and its handle keeps the error, which its log's next Sync or
// write reports: the log must be reopened, as after any failed sync.
func (fs *Files) closeVictims(victims []*handle) {
	for _, h := range victims {
		// busy keeps every other operation off h until it is cleared.
		var err error
		if h.unsynced {
			if err = h.fsync(h.f); err != nil {
				err = fmt.Errorf("sync segment %s before closing it to stay within the open-files bound: %w; the log must be reopened", h.path, err)
			}
		}
		if err == nil {
			h.f.Close() // synced: a failed close loses nothing
		}
		fs.mu.Lock()
		h.busy = false
		if err != nil {
			h.err = err
		} else {
			h.f, h.unsynced = nil, false
			fs.open--
			fs.closes.Add(1)
		}
		fs.cond.Broadcast()
		fs.mu.Unlock()
	}
}
