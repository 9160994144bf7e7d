package log

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"herald/internal/vfs"
)

const (
	segSuffix   = ".seg"
	tmpSuffix   = ".seg.tmp" // a segment being created by a roll
	resetSuffix = ".reset"   // the replacement segment of an unfinished Reset
	// deletingSuffix names a segment that DeletePrefix detached and is
	// emptying before it unlinks it (see removeSegmentFiles).
	deletingSuffix = ".seg.deleting"
)

// termRun records that the records from index first onwards have the given
// term, up to the next run. Terms change rarely, so a few runs per segment
// let Term answer from memory without reading the file.
type termRun struct {
	first uint64
	term  uint64
}

// segment is one segment file and its in-memory index.
//
// pos, runs and size are read by readers holding Log.mu shared and are
// replaced only by a writer holding both Log.wmu and Log.mu. The writer may
// append beyond len(pos) and len(runs) without Log.mu, since readers never
// look past the lengths they observed under the lock.
type segment struct {
	path     string
	h        *handle // the file
	base     uint64
	prevTerm uint64

	pos  []int64   // pos[i] is the file offset of record base+i
	runs []termRun // term changes, in index order
	size int64     // end of the last record; the file's valid length

	// zeroed says the file was filled with zeros before the segment was
	// written (Options.Preallocate): its records end where its nonzero
	// bytes do, not where the file does.
	zeroed bool
	// syncsBefore is the log's SyncCount when the segment was created or
	// opened: how often the log syncs it decides whether the next one is
	// zeroed.
	syncsBefore uint64
	// writtenBack is the offset up to which the disk was asked to write
	// the file back (Options.WritebackEvery). Guarded by Log.wmu.
	writtenBack int64

	// Guarded by Log.mu.
	dirty   bool // has bytes not yet covered by a Sync
	removed bool // no longer part of the log
}

// segName returns the file name of the segment whose first index is base.
func segName(base uint64, suffix string) string {
	return fmt.Sprintf("%016x%s", base, suffix)
}

// parseSegName is the inverse of segName. It accepts only the exact form
// segName produces, so stray files are never mistaken for segments.
func parseSegName(name, suffix string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, suffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	base, err := strconv.ParseUint(hex, 16, 64)
	if err != nil || segName(base, "") != hex {
		return 0, false
	}
	return base, true
}

// next returns the index that the next record of the segment would have.
func (s *segment) next() uint64 { return s.base + uint64(len(s.pos)) }

// lastTerm returns the term of the segment's last record, or prevTerm if
// it has none.
func (s *segment) lastTerm() uint64 {
	if len(s.runs) == 0 {
		return s.prevTerm
	}
	return s.runs[len(s.runs)-1].term
}

// term returns the term of record i, which must be in the segment.
func (s *segment) term(i uint64) uint64 {
	k := sort.Search(len(s.runs), func(j int) bool { return s.runs[j].first > i })
	return s.runs[k-1].term
}

// end returns the file offset just past record i, which must be in the
// segment.
func (s *segment) end(i uint64) int64 {
	if k := i - s.base + 1; k < uint64(len(s.pos)) {
		return s.pos[k]
	}
	return s.size
}

// read decodes records [lo, hi) of the segment, appending them to out. It
// reads them with a single pread; their Data share one buffer.
func (s *segment) read(out []Record, lo, hi uint64) ([]Record, error) {
	start, stop := s.pos[lo-s.base], s.end(hi-1)
	buf := make([]byte, stop-start)
	f, err := s.h.get(false)
	if err != nil {
		return out, fmt.Errorf("read segment %s: %w", s.path, err)
	}
	_, err = f.ReadAt(buf, start)
	s.h.put(false)
	if err != nil {
		return out, fmt.Errorf("read segment %s at offset %d: %w", s.path, start, err)
	}
	for i := lo; i < hi; i++ {
		off := s.pos[i-s.base]
		b := buf[off-start : s.end(i)-start]
		r, n, err := decodeRecord(b)
		if err == nil && n != len(b) {
			err = errBadLength
		}
		if err != nil {
			return out, corruptf(s.path, off, "record %d: %v", i, err)
		}
		if r.Index != i {
			return out, corruptf(s.path, off, "record holds index %d where %d was expected", r.Index, i)
		}
		out = append(out, r)
	}
	return out, nil
}

// scanSegment verifies the segment file f and rebuilds its index.
//
// Recovery never guesses: a bad record is cut as a torn write only when
// the log cannot have acknowledged it, which scanSegment decides in this
// order (the last segment only; elsewhere every bad record is corruption,
// since a segment is synced before the next one is created):
//
//  1. If a valid record of a later index follows the bad one anywhere in
//     the file, the bad record was written before data that survived: it
//     is damage, not an unfinished write.
//  2. If the bytes from the bad record's body to the end of the file form
//     a complete record that matches its checksum, only its length field
//     is damaged.
//  3. A record that extends past the end of the file is the prefix of a
//     write that never finished (a process killed inside write(2) leaves
//     exactly that), so it is torn.
//  4. Any other bad record (a checksum mismatch or an impossible length
//     inside the file) can be a torn write only if the machine lost power
//     while the write was unsynced. noTear, when not empty, says why that
//     cannot have happened (the log was closed cleanly, or the machine
//     has not restarted since it was last written), and the record is
//     corruption; otherwise it is torn.
//
// A torn record's offset is returned for the caller to cut; damage is a
// *CorruptionError naming the file and offset. The file is not modified,
// and the caller gives the segment its handle.
func scanSegment(f vfs.File, path string, base uint64, last bool, noTear string, covered bool) (s *segment, torn int64, err error) {
	size, err := f.Size()
	if err != nil {
		return nil, 0, fmt.Errorf("stat segment %s: %w", path, err)
	}

	hb := make([]byte, headerSize)
	n, err := f.ReadAt(hb, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, fmt.Errorf("read segment header %s: %w", path, err)
	}
	h, err := decodeHeader(hb[:n])
	if err != nil {
		return nil, 0, corruptf(path, 0, "%v", err)
	}
	if h.base != base {
		return nil, 0, corruptf(path, 8, "header says the segment starts at index %d but its name says %d", h.base, base)
	}
	s = &segment{path: path, base: base, prevTerm: h.prevTerm, zeroed: h.zeroed}

	// Sized to the segment: a node opens thousands of small ones at boot.
	r := bufio.NewReaderSize(io.NewSectionReader(f, headerSize, size-headerSize), int(min(1<<20, max(size-headerSize, 4096))))
	off := int64(headerSize)
	var fb [frameSize]byte
	var body []byte
	for off < size {
		var reason string
		pastEOF := false
		end := int64(-1) // of the record at off, once its frame is read
		if size-off < frameSize {
			reason, pastEOF = "record frame extends past the end of the file", true
		} else if _, err := io.ReadFull(r, fb[:]); err != nil {
			return nil, 0, fmt.Errorf("read segment %s at offset %d: %w", path, off, err)
		} else {
			fr := decodeFrame(fb[:])
			end = off + frameSize + int64(fr.length)
			switch {
			case fr.length < bodyFixed:
				reason = fmt.Sprintf("invalid record length %d", fr.length)
			case end > size:
				reason, pastEOF = "record extends past the end of the file", true
			default:
				if cap(body) < int(fr.length) {
					body = make([]byte, fr.length)
				}
				body = body[:fr.length]
				if _, err := io.ReadFull(r, body); err != nil {
					return nil, 0, fmt.Errorf("read segment %s at offset %d: %w", path, off, err)
				}
				rec, err := decodeBody(fr, body)
				if err != nil {
					reason = err.Error()
					break
				}
				if want := s.next(); rec.Index != want {
					return nil, 0, corruptf(path, off, "record holds index %d where %d was expected", rec.Index, want)
				}
				s.pos = append(s.pos, off)
				if n := len(s.runs); n == 0 || s.runs[n-1].term != rec.Term {
					s.runs = append(s.runs, termRun{first: rec.Index, term: rec.Term})
				}
				off = end
				continue
			}
		}
		if s.zeroed {
			// The records of a zeroed segment end where its nonzero bytes
			// do (see prealloc.go).
			z, err := contentEnd(f, off, size)
			if err != nil {
				return nil, 0, fmt.Errorf("read segment %s after offset %d: %w", path, off, err)
			}
			if z == off {
				break // zeros from here on: space never written
			}
			size = z
			if end < 0 || end > z {
				reason, pastEOF = "record extends past the last byte written", true
			}
		}
		if err := classifyBad(f, path, off, size, s.next(), last, pastEOF, reason, noTear, covered); err != nil {
			return nil, 0, err
		}
		s.size = off
		return s, off, nil
	}
	s.size = off
	return s, -1, nil
}

// classifyBad decides whether the bad record at off, which should hold
// index want, is a torn write (nil) or damage (a *CorruptionError); see
// scanSegment for the rules.
func classifyBad(f vfs.File, path string, off, size int64, want uint64, last, pastEOF bool, reason, noTear string, covered bool) error {
	if !last {
		return corruptf(path, off, "%s (not the last segment, so this is not a torn write)", reason)
	}
	if covered && noTear == "" {
		return nil // another log holds the unsynced tail; the caller checks it covers the cut
	}
	rest := make([]byte, size-off)
	if _, err := f.ReadAt(rest, off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read segment %s at offset %d: %w", path, off, err)
	}
	if p, idx, ok := findValidRecord(rest, 1, want); ok {
		return corruptf(path, off, "%s, and a valid record (index %d) follows at offset %d, so this is damage, not an unfinished write",
			reason, idx, off+int64(p))
	}
	if completeWithBadLength(rest, want) {
		return corruptf(path, off, "record length field is damaged (the record's data, up to the end of the file, matches its checksum)")
	}
	if pastEOF {
		return nil
	}
	if noTear != "" {
		return corruptf(path, off, "%s; %s, so no write can have been torn and the record may have been acknowledged", reason, noTear)
	}
	return nil
}

// findValidRecord looks in b, from offset from on, for a record that
// decodes and checks out with an index of at least want, and returns its
// offset and index. Candidates are filtered by a plausible index before
// their checksum is computed, so scanning garbage stays cheap.
func findValidRecord(b []byte, from int, want uint64) (off int, index uint64, ok bool) {
	for p := from; p+recordOverhead <= len(b); p++ {
		length := binary.LittleEndian.Uint32(b[p:])
		if length < bodyFixed || uint64(len(b)-p-frameSize) < uint64(length) {
			continue
		}
		idx := binary.LittleEndian.Uint64(b[p+frameSize:])
		if idx < want || idx-want > uint64(len(b)/recordOverhead) {
			continue
		}
		if r, _, err := decodeRecord(b[p:]); err == nil {
			return p, r.Index, true
		}
	}
	return 0, 0, false
}

// completeWithBadLength reports whether b, a record whose length field
// does not check out, holds a complete record for index want ending at the
// end of b: the signature of a flipped bit in the length of the last
// record.
func completeWithBadLength(b []byte, want uint64) bool {
	if len(b) < recordOverhead {
		return false
	}
	f := decodeFrame(b)
	r, err := decodeBody(frame{length: uint32(len(b) - frameSize), crc: f.crc}, b[frameSize:])
	return err == nil && r.Index == want
}
