package log

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeRecord checks that decoding arbitrary bytes never panics, that
// whatever decodes re-encodes to the same bytes, and that encoding any
// record decodes back to it.
func FuzzDecodeRecord(f *testing.F) {
	valid := appendRecord(nil, &Record{Index: 7, Term: 3, Type: 2, Data: []byte("hello")})
	f.Add(valid, uint64(7), uint64(3), uint8(2), []byte("hello"))
	f.Add(valid[:len(valid)-2], uint64(1), uint64(1), uint8(0), []byte{})
	bad := bytes.Clone(valid)
	bad[len(bad)-1] ^= 1
	f.Add(bad, uint64(1<<63), uint64(0), uint8(255), []byte{0, 0, 0})
	f.Add(make([]byte, 40), uint64(0), uint64(0), uint8(0), []byte(nil))

	f.Fuzz(func(t *testing.T, b []byte, index, term uint64, typ uint8, data []byte) {
		r, n, err := decodeRecord(b)
		if err == nil {
			if n < recordOverhead || n > len(b) {
				t.Fatalf("decoded %d bytes of %d", n, len(b))
			}
			if again := appendRecord(nil, &r); !bytes.Equal(again, b[:n]) {
				t.Fatalf("re-encoding %+v gave %x, decoded from %x", r, again, b[:n])
			}
		} else if !errors.Is(err, errShortRecord) && !errors.Is(err, errBadLength) && !errors.Is(err, errBadChecksum) {
			t.Fatalf("unexpected error %v", err)
		}

		in := Record{Index: index, Term: term, Type: typ, Data: data}
		enc := appendRecord([]byte("prefix"), &in)[len("prefix"):]
		if int64(len(enc)) != recordSize(len(data)) {
			t.Fatalf("encoded %d bytes, recordSize says %d", len(enc), recordSize(len(data)))
		}
		out, n, err := decodeRecord(append(enc, b...))
		if err != nil || n != len(enc) || !recEqual(in, out) {
			t.Fatalf("round trip of %+v: got %+v, %d bytes, %v", in, out, n, err)
		}
	})
}

// FuzzOpen replaces the tail of a log's last segment with arbitrary bytes.
// Open must not panic; it either fails with a CorruptionError or recovers
// every record before the damage, and then the log must be usable.
func FuzzOpen(f *testing.F) {
	f.Add([]byte{}, uint16(0))
	f.Add([]byte{0, 0, 0, 0, 0, 0}, uint16(30))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, uint16(5))
	f.Add(appendRecord(nil, &Record{Index: 11, Term: 1}), uint16(0))

	f.Fuzz(func(t *testing.T, tail []byte, keep uint16) {
		dir := t.TempDir()
		l := mustOpen(t, dir, Options{SegmentSize: 1024})
		mustAppend(t, l, mkrecs(1, 11, 1))
		last := l.active()
		path := last.path
		// Keep whole records only, so that those are known to be good.
		cut := uint64(keep) % uint64(len(last.pos)+1)
		size := last.size
		if int(cut) < len(last.pos) {
			size = last.pos[cut]
		}
		good := last.base + cut - 1
		mustClose(t, l)

		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		fh, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.Write(tail); err != nil {
			t.Fatal(err)
		}
		fh.Close()

		l, err = Open(dir, Options{SegmentSize: 1024})
		if err != nil {
			var ce *CorruptionError
			if !errors.As(err, &ce) || filepath.Dir(ce.File) != dir {
				t.Fatalf("Open: %v", err)
			}
			return
		}
		defer l.Close()
		if l.LastIndex() < good {
			t.Fatalf("recovered up to %d, but records up to %d were intact", l.LastIndex(), good)
		}
		rs, err := l.Entries(1, l.LastIndex()+1, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs[:good] {
			if !recEqual(r, mkrec(r.Index, 1)) {
				t.Fatalf("record %d changed: %+v", r.Index, r)
			}
		}
		next := l.LastIndex() + 1
		mustAppend(t, l, mkrecs(next, next+3, 9))
		if rs, err := l.Entries(next, next+3, 0); err != nil || len(rs) != 3 {
			t.Fatalf("reading appended records: %d, %v", len(rs), err)
		}
	})
}
