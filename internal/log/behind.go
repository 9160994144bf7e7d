package log

import "slices"

// Writing behind (Options.WriteBehind).
//
// A log whose records another log holds synced (Options.UnsyncedElsewhere)
// need not write them to its segment files when they are appended: a
// crash loses nothing the other log does not bring back. Such a log may
// keep the newest records in memory, its tail, and write them out later
// in one write call for many appends: when the owner asks (WriteBehind,
// which the node's groups do while their WAL fdatasync runs), before any
// Sync (so a WAL checkpoint, which syncs the log before it deletes the
// WAL files holding its records, finds them on disk), and when an append
// would take the tail past four times the bound, however the owner
// behaves.
//
// The tail is part of the log for readers: LastIndex, Term and Entries
// see it. It always follows the segments' last record. Changing it, and
// moving it into the segments, happens under both wmu and mu, so readers
// see a record either in the tail or in a segment, never in both or none.

// tailLimit is how many times Options.WriteBehind the tail may hold
// before Append writes it out itself.
const tailLimit = 4

// lastIndex returns the index of the log's last record, the tail's if it
// has one. The caller holds wmu or mu.
func (l *Log) lastIndex() uint64 {
	if n := len(l.tail); n > 0 {
		return l.tail[n-1].Index
	}
	return l.active().next() - 1
}

// tailFrom returns the position in the tail of the record with index i,
// and whether it is there. The caller holds wmu or mu.
func (l *Log) tailFrom(i uint64) (int, bool) {
	if len(l.tail) == 0 || i < l.tail[0].Index {
		return 0, false
	}
	return int(i - l.tail[0].Index), true
}

// addToTail appends recs to the tail, first writing the tail out if recs
// would take it past its limit: if that fails, recs are not appended, as
// an Append that fails to write appends nothing. The caller holds wmu and
// has checked recs.
func (l *Log) addToTail(recs []Record) error {
	var size int64
	for i := range recs {
		size += int64(len(recs[i].Data))
	}
	if l.tailBytes+size >= tailLimit*l.behind {
		if err := l.writeTail(); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.tail = append(l.tail, recs...)
	l.tailBytes += size
	l.mu.Unlock()
	return nil
}

// cutTail drops the tail's records from index from on. The caller holds
// wmu.
func (l *Log) cutTail(from uint64) {
	k, ok := l.tailFrom(from)
	if !ok {
		k = 0
	}
	if k >= len(l.tail) {
		return
	}
	l.mu.Lock()
	for i := range l.tail[k:] {
		l.tailBytes -= int64(len(l.tail[k+i].Data))
	}
	clear(l.tail[k:]) // let go of the records' data
	l.tail = l.tail[:k]
	l.mu.Unlock()
}

// writeTail writes the tail to the segment files. On failure the tail is
// kept, and the segment files are as before (see write). The caller holds
// wmu.
func (l *Log) writeTail() error {
	if len(l.tail) == 0 {
		return nil
	}
	if err := l.writable(); err != nil {
		return err
	}
	return l.write(l.tail, true)
}

// takeTail empties the tail once write has published its records in the
// segments. The caller holds wmu and mu.
func (l *Log) takeTail() {
	clear(l.tail)
	if cap(l.tail) > 1024 {
		l.tail = nil
	} else {
		l.tail = l.tail[:0]
	}
	l.tailBytes = 0
}

// tailEntries appends to out the tail's records with indices in [lo, hi),
// stopping as Entries does once their data would exceed maxBytes, given
// total bytes already taken. The caller holds mu.
func (l *Log) tailEntries(out []Record, lo, hi, maxBytes, total uint64, first bool) []Record {
	k, _ := l.tailFrom(lo)
	end := k + int(hi-lo)
	out = slices.Grow(out, end-k)
	for _, r := range l.tail[k:end] {
		n := uint64(len(r.Data))
		if maxBytes > 0 && !first && total+n > maxBytes {
			break
		}
		first = false
		total += n
		r.Data = slices.Clip(r.Data) // appending to it must not reach whatever follows
		out = append(out, r)
	}
	return out
}

// WriteBehind writes the records held in memory (Options.WriteBehind) to
// the segment files if they amount to at least Options.WriteBehind bytes,
// without syncing them. A log without Options.WriteBehind writes every
// Append at once, and WriteBehind does nothing.
func (l *Log) WriteBehind() error { return l.writeHeld(l.behind) }

// WriteHeld writes every record held in memory to the segment files,
// without syncing them: for an owner going idle, whose records would
// otherwise wait in memory for the next Sync, and after a crash would
// have to be brought back from the other log and synced.
func (l *Log) WriteHeld() error { return l.writeHeld(0) }

// writeHeld writes the tail if its records hold atLeast bytes of data or more.
func (l *Log) writeHeld(atLeast int64) error {
	if l.behind == 0 {
		return nil
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.tailBytes < atLeast {
		return nil
	}
	return l.writeTail()
}
