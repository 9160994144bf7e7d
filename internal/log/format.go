package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

const (
	segMagic = "HLOG"
	// segVersion is a segment whose file ends where its last record does;
	// segVersionZeroed one written into a file of zeros (see
	// Options.Preallocate), whose records end where its nonzero bytes do.
	segVersion       = 1
	segVersionZeroed = 2

	// headerSize is the size of the fixed segment header.
	headerSize = 32

	// frameSize is the length and crc prefix of every record.
	frameSize = 8
	// bodyFixed is the part of the body before the data: index, term, type.
	bodyFixed = 17
	// recordOverhead is the on-disk size of a record with empty data.
	recordOverhead = frameSize + bodyFixed

	// maxDataSize keeps the body length representable in the uint32 length
	// field.
	maxDataSize int64 = math.MaxUint32 - bodyFixed
)

// Errors from decodeRecord. They are internal: recovery turns them into
// either a silently truncated torn tail or a *CorruptionError.
var (
	errShortRecord = errors.New("record extends past the end of the data")
	errBadLength   = errors.New("record length field is invalid")
	errBadChecksum = errors.New("record checksum mismatch")
)

// checksum is CRC-32C. crc32.MakeTable caches the Castagnoli table, so this
// costs no allocation and needs no package-level state.
func checksum(b []byte) uint32 {
	return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
}

// segHeader is the decoded fixed header of a segment.
type segHeader struct {
	base     uint64
	prevTerm uint64
	zeroed   bool // the file was filled with zeros before any record
}

func encodeHeader(h segHeader) []byte {
	b := make([]byte, 0, headerSize)
	b = append(b, segMagic...)
	v := uint32(segVersion)
	if h.zeroed {
		v = segVersionZeroed
	}
	b = binary.LittleEndian.AppendUint32(b, v)
	b = binary.LittleEndian.AppendUint64(b, h.base)
	b = binary.LittleEndian.AppendUint64(b, h.prevTerm)
	b = binary.LittleEndian.AppendUint32(b, 0)
	return binary.LittleEndian.AppendUint32(b, checksum(b))
}

// decodeHeader parses a segment header; the error is a reason suitable for
// a CorruptionError.
func decodeHeader(b []byte) (segHeader, error) {
	if len(b) < headerSize {
		return segHeader{}, fmt.Errorf("segment header truncated (%d of %d bytes)", len(b), headerSize)
	}
	if string(b[0:4]) != segMagic {
		return segHeader{}, fmt.Errorf("bad segment magic %q", b[0:4])
	}
	if got, want := binary.LittleEndian.Uint32(b[28:32]), checksum(b[:28]); got != want {
		return segHeader{}, fmt.Errorf("segment header checksum mismatch (stored %#08x, computed %#08x)", got, want)
	}
	v := binary.LittleEndian.Uint32(b[4:8])
	if v != segVersion && v != segVersionZeroed {
		return segHeader{}, fmt.Errorf("unsupported segment format version %d", v)
	}
	return segHeader{
		base:     binary.LittleEndian.Uint64(b[8:16]),
		prevTerm: binary.LittleEndian.Uint64(b[16:24]),
		zeroed:   v == segVersionZeroed,
	}, nil
}

// appendRecord appends the framed encoding of r to dst.
func appendRecord(dst []byte, r *Record) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(bodyFixed+len(r.Data)))
	dst = binary.LittleEndian.AppendUint32(dst, 0) // crc, filled in below
	dst = binary.LittleEndian.AppendUint64(dst, r.Index)
	dst = binary.LittleEndian.AppendUint64(dst, r.Term)
	dst = append(dst, r.Type)
	dst = append(dst, r.Data...)
	binary.LittleEndian.PutUint32(dst[start+4:], checksum(dst[start+frameSize:]))
	return dst
}

// lastByte is the last byte of r's encoding: the last of its data, or its
// type if it has none.
func lastByte(r *Record) byte {
	if len(r.Data) == 0 {
		return r.Type
	}
	return r.Data[len(r.Data)-1]
}

// recordSize is the on-disk size of a record with n bytes of data.
func recordSize(n int) int64 { return int64(recordOverhead + n) }

// frame holds the decoded length and crc prefix of a record.
type frame struct {
	length uint32
	crc    uint32
}

func decodeFrame(b []byte) frame {
	return frame{
		length: binary.LittleEndian.Uint32(b[0:4]),
		crc:    binary.LittleEndian.Uint32(b[4:8]),
	}
}

// decodeBody checks body (the length bytes after the frame) against the
// frame's checksum and decodes it. Data aliases body.
func decodeBody(f frame, body []byte) (Record, error) {
	if f.length < bodyFixed || int64(len(body)) != int64(f.length) {
		return Record{}, errBadLength
	}
	if checksum(body) != f.crc {
		return Record{}, errBadChecksum
	}
	return Record{
		Index: binary.LittleEndian.Uint64(body[0:8]),
		Term:  binary.LittleEndian.Uint64(body[8:16]),
		Type:  body[16],
		Data:  body[bodyFixed:len(body):len(body)],
	}, nil
}

// decodeRecord decodes the record at the start of b and returns it with the
// number of bytes it occupies. Data aliases b.
func decodeRecord(b []byte) (Record, int, error) {
	if len(b) < frameSize {
		return Record{}, 0, errShortRecord
	}
	f := decodeFrame(b)
	if f.length < bodyFixed {
		return Record{}, 0, errBadLength
	}
	if uint64(len(b)-frameSize) < uint64(f.length) {
		return Record{}, 0, errShortRecord
	}
	n := frameSize + int(f.length)
	r, err := decodeBody(f, b[frameSize:n])
	if err != nil {
		return Record{}, 0, err
	}
	return r, n, nil
}
