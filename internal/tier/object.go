package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"go.etcd.io/raft/v3/raftpb"
)

// Layout constants; the package comment describes the format.
const (
	objectMagic   = "HTIR"
	runMagic      = "RUN1"
	formatVersion = 1

	headerSize   = 8  // magic, version
	trailerSize  = 24 // footer offset, footer length, footer CRC, magic
	entryHeader  = 24 // index, term, type, data length
	runFixedSize = 4 + 2 + 8 + 8
	maxShardName = math.MaxUint16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Run locates the entries of one shard in an object: entries First
// through Last, in Length bytes from Offset, with CRC-32C CRC. The
// manifest keeps the runs of every object.
type Run struct {
	Shard       string
	First, Last uint64
	Offset      int64
	Length      int64
	CRC         uint32
}

func (r Run) String() string {
	return fmt.Sprintf("%s [%d, %d] at %d+%d", r.Shard, r.First, r.Last, r.Offset, r.Length)
}

// Builder lays out one object in memory. Its zero value is not ready:
// use NewBuilder.
type Builder struct {
	buf      []byte
	runs     []Run
	finished bool
}

// NewBuilder returns a Builder holding only the object's header.
func NewBuilder() *Builder {
	b := &Builder{buf: make([]byte, 0, 64<<10)}
	b.buf = append(b.buf, objectMagic...)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, formatVersion)
	return b
}

// Add appends a run: entries of shard, which must be non-empty and
// consecutive (each Index one more than the one before). An invalid run
// changes nothing.
func (b *Builder) Add(shard string, entries []raftpb.Entry) error {
	if b.finished {
		return errors.New("tier: Add after Finish")
	}
	if err := checkRun(shard, entries); err != nil {
		return err
	}
	off := len(b.buf)
	first, last := entries[0].Index, entries[len(entries)-1].Index
	b.buf = append(b.buf, runMagic...)
	b.buf = binary.LittleEndian.AppendUint16(b.buf, uint16(len(shard)))
	b.buf = append(b.buf, shard...)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, first)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, last)
	for _, e := range entries {
		b.buf = binary.LittleEndian.AppendUint64(b.buf, e.Index)
		b.buf = binary.LittleEndian.AppendUint64(b.buf, e.Term)
		b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(e.Type))
		b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(e.Data)))
		b.buf = append(b.buf, e.Data...)
	}
	b.runs = append(b.runs, Run{
		Shard: shard, First: first, Last: last,
		Offset: int64(off), Length: int64(len(b.buf) - off),
		CRC: crc32.Checksum(b.buf[off:], castagnoli),
	})
	return nil
}

func checkRun(shard string, entries []raftpb.Entry) error {
	switch {
	case shard == "":
		return errors.New("tier: a run needs a shard name")
	case len(shard) > maxShardName:
		return fmt.Errorf("tier: shard name of %d bytes is longer than %d", len(shard), maxShardName)
	case len(entries) == 0:
		return fmt.Errorf("tier: run of shard %s has no entries", shard)
	}
	for i, e := range entries {
		if i > 0 && e.Index != entries[i-1].Index+1 {
			return fmt.Errorf("tier: run of shard %s is not consecutive: index %d follows %d", shard, e.Index, entries[i-1].Index)
		}
		if int64(len(e.Data)) > math.MaxUint32 {
			return fmt.Errorf("tier: entry %d of shard %s has %d bytes of data, more than %d", e.Index, shard, len(e.Data), uint32(math.MaxUint32))
		}
	}
	return nil
}

// Len returns the size the object has so far, without its footer, so
// that a caller can bound objects.
func (b *Builder) Len() int64 { return int64(len(b.buf)) }

// Runs returns how many runs were added.
func (b *Builder) Runs() int { return len(b.runs) }

// Finish appends the footer and trailer and returns the object and its
// runs. The Builder is done: Add fails after Finish, and the data belongs
// to the caller.
func (b *Builder) Finish() (data []byte, runs []Run) {
	if b.finished {
		panic("tier: Finish called twice")
	}
	b.finished = true
	footerOff := len(b.buf)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(b.runs)))
	for _, r := range b.runs {
		b.buf = binary.LittleEndian.AppendUint16(b.buf, uint16(len(r.Shard)))
		b.buf = append(b.buf, r.Shard...)
		b.buf = binary.LittleEndian.AppendUint64(b.buf, r.First)
		b.buf = binary.LittleEndian.AppendUint64(b.buf, r.Last)
		b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(r.Offset))
		b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(r.Length))
		b.buf = binary.LittleEndian.AppendUint32(b.buf, r.CRC)
	}
	footer := b.buf[footerOff:]
	crc := crc32.Checksum(footer, castagnoli)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(footerOff))
	b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(len(footer)))
	b.buf = binary.LittleEndian.AppendUint32(b.buf, crc)
	b.buf = append(b.buf, objectMagic...)
	data, runs = b.buf, b.runs
	b.buf, b.runs = nil, nil
	return data, runs
}
