package log

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

const (
	segSuffix   = ".seg"
	tmpSuffix   = ".seg.tmp" // a segment being created by a roll
	resetSuffix = ".reset"   // the replacement segment of an unfinished Reset
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
	f        *os.File
	base     uint64
	prevTerm uint64

	pos  []int64   // pos[i] is the file offset of record base+i
	runs []termRun // term changes, in index order
	size int64     // end of the last record; the file's valid length

	// Guarded by Log.mu.
	dirty          bool // has bytes not yet covered by a Sync
	syncing        bool // a Sync leader is fdatasyncing f
	removed        bool // no longer part of the log
	closeAfterSync bool // removed while syncing; the leader closes f
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
	if _, err := s.f.ReadAt(buf, start); err != nil {
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
// A bad record in the last segment is a torn write if nothing follows it:
// it extends past the end of the file, or every byte after it is zero
// (unwritten space, which includes the case of a record ending exactly at
// EOF). Such a record was never synced, so was never acknowledged, and
// scanSegment reports its offset as torn for the caller to cut away. Any
// other damage is a *CorruptionError. The file is not modified.
func scanSegment(f *os.File, path string, base uint64, last bool) (s *segment, torn int64, err error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("stat segment %s: %w", path, err)
	}
	size := fi.Size()

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
	s = &segment{path: path, f: f, base: base, prevTerm: h.prevTerm}

	r := bufio.NewReaderSize(io.NewSectionReader(f, headerSize, size-headerSize), 1<<20)
	off := int64(headerSize)
	var fb [frameSize]byte
	var body []byte
	for off < size {
		var reason string
		var zerosFrom int64 // bytes from here to EOF must be zero for a torn record
		pastEOF := false
		if size-off < frameSize {
			reason, pastEOF = "record frame extends past the end of the file", true
		} else if _, err := io.ReadFull(r, fb[:]); err != nil {
			return nil, 0, fmt.Errorf("read segment %s at offset %d: %w", path, off, err)
		} else {
			fr := decodeFrame(fb[:])
			end := off + frameSize + int64(fr.length)
			switch {
			case fr.length < bodyFixed:
				reason, zerosFrom = fmt.Sprintf("invalid record length %d", fr.length), off+frameSize
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
					reason, zerosFrom = err.Error(), end
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

		if !last {
			return nil, 0, corruptf(path, off, "%s (not the last segment, so this is not a torn write)", reason)
		}
		if !pastEOF {
			zero, err := zeroTail(f, zerosFrom, size)
			if err != nil {
				return nil, 0, fmt.Errorf("read segment %s: %w", path, err)
			}
			if !zero {
				return nil, 0, corruptf(path, off, "%s, and data follows it", reason)
			}
		}
		s.size = off
		return s, off, nil
	}
	s.size = off
	return s, -1, nil
}

// zeroTail reports whether every byte of f in [from, size) is zero.
func zeroTail(f *os.File, from, size int64) (bool, error) {
	buf := make([]byte, 64<<10)
	for from < size {
		n := int(min(int64(len(buf)), size-from))
		if _, err := f.ReadAt(buf[:n], from); err != nil {
			return false, err
		}
		for _, c := range buf[:n] {
			if c != 0 {
				return false, nil
			}
		}
		from += int64(n)
	}
	return true, nil
}
