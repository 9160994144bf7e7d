package log

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"herald/internal/vfs"
)

// RepairedFile, in a log's directory, says that Cut discarded the damaged
// part of the log: records that may have been acknowledged are gone, by
// the operator's choice. The log's owner reads it to accept what it lost
// (see Repaired), and removes it once it has.
const RepairedFile = "REPAIRED"

// A Damage is a damaged record that keeps a log from opening, as Inspect
// found it, with what lies after it: what Cut would discard.
type Damage struct {
	*CorruptionError
	dir     string
	fs      vfs.FS
	content int64 // end of the damaged file's content (its zero-filled tail excluded)

	// Later are the segment files after the damaged one, which hold
	// nothing the log can use without the damaged record.
	Later []string
	// After are the valid records that could be read after the damage,
	// in the damaged file and the later ones, in order. The records
	// between them, if any, are lost for good.
	After []Record
	// Unreadable counts the bytes after the damage that hold no valid
	// record.
	Unreadable int64
	// Bytes counts every byte Cut would move aside.
	Bytes int64
}

// Dir returns the directory of the damaged log.
func (d *Damage) Dir() string { return d.dir }

// Inspect reports the damage that keeps the log in dir from opening, or
// nil if it opens. It opens the log with opts over a vfs.Overlay, so that
// the log's files are not touched, whatever its recovery does.
func Inspect(dir string, opts Options) (*Damage, error) {
	fsys := opts.FS
	if fsys == nil {
		fsys = vfs.OS
	}
	opts.FS, opts.Files = vfs.NewOverlay(fsys), nil
	l, err := Open(dir, opts)
	if err == nil {
		return nil, l.Close()
	}
	var ce *CorruptionError
	if !errors.As(err, &ce) {
		return nil, fmt.Errorf("inspect log %s: %w", dir, err)
	}
	d := &Damage{CorruptionError: ce, dir: dir, fs: fsys}
	return d, d.salvage()
}

// salvage finds the later files and the records that can still be read
// after the damage.
func (d *Damage) salvage() error {
	names, err := d.fs.ReadDir(d.dir)
	if err != nil {
		return fmt.Errorf("list log %s: %w", d.dir, err)
	}
	damagedBase, ok := parseSegName(filepath.Base(d.File), segSuffix)
	if !ok {
		return fmt.Errorf("the damaged file %s is not a segment of log %s", d.File, d.dir)
	}
	for _, name := range names {
		if base, ok := parseSegName(name, segSuffix); ok && base > damagedBase {
			d.Later = append(d.Later, filepath.Join(d.dir, name))
		}
	}
	want := damagedBase
	for i, path := range append([]string{d.File}, d.Later...) {
		from := int64(headerSize)
		if i == 0 {
			from = d.Offset
		}
		b, err := vfs.ReadFile(d.fs, path)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if h, err := decodeHeader(b); err == nil && h.zeroed {
			b = b[:len(bytes.TrimRight(b, "\x00"))] // a preallocated file's unwritten tail
		}
		if i == 0 {
			d.content = int64(len(b))
			want = nextIndex(b, want, from)
		} else if base, ok := parseSegName(filepath.Base(path), segSuffix); ok {
			want = base
		}
		from = min(from, int64(len(b)))
		d.Bytes += int64(len(b)) - from
		recs, unreadable := salvageRecords(b[from:], want)
		d.After = append(d.After, recs...)
		d.Unreadable += unreadable
		if len(recs) > 0 {
			want = recs[len(recs)-1].Index + 1
		}
	}
	return nil
}

// nextIndex returns the index of the record at offset upTo of segment
// bytes b whose first record is base: the records before it are read in
// order.
func nextIndex(b []byte, base uint64, upTo int64) uint64 {
	off := int64(headerSize)
	for off < upTo {
		_, n, err := decodeRecord(b[off:])
		if err != nil {
			break
		}
		off += int64(n)
		base++
	}
	return base
}

// salvageRecords returns the valid records in b, whose first record
// should be want, and the bytes between and around them that hold none.
func salvageRecords(b []byte, want uint64) (recs []Record, unreadable int64) {
	off := 0
	for off < len(b) {
		if r, n, err := decodeRecord(b[off:]); err == nil && r.Index >= want {
			r.Data = slices.Clone(r.Data)
			recs = append(recs, r)
			want = r.Index + 1
			off += n
			continue
		}
		p, idx, ok := findValidRecord(b, off+1, want)
		if !ok {
			return recs, unreadable + int64(len(b)-off)
		}
		unreadable += int64(p - off)
		off, want = p, idx
	}
	return recs, unreadable
}

// Cut moves the damaged record and everything after it into the
// directory aside (created if need be), leaving the log with the records
// before the damage, and records in the log's directory, in RepairedFile,
// that it did. Nothing is deleted: the bytes moved aside can be examined
// or restored by hand.
func (d *Damage) Cut(aside string) error {
	if err := vfs.MkdirDurable(d.fs, aside); err != nil {
		return fmt.Errorf("create %s: %w", aside, err)
	}
	for _, path := range d.Later {
		if err := d.moveAside(path, aside); err != nil {
			return err
		}
	}
	if d.Offset <= headerSize {
		// The segment's header is damaged: nothing in it can be read.
		if err := d.moveAside(d.File, aside); err != nil {
			return err
		}
	} else if err := d.cutFile(aside); err != nil {
		return err
	}
	note := fmt.Sprintf("cut at %s, byte offset %d (%s); the damaged part was moved to %s", d.File, d.Offset, d.Reason, aside)
	return WriteRepaired(d.fs, d.dir, note)
}

// WriteRepaired records in the log directory dir, durably, that the log's
// owner is to accept a loss the next time it opens the log: note says
// why.
func WriteRepaired(fsys vfs.FS, dir, note string) error {
	if fsys == nil {
		fsys = vfs.OS
	}
	if err := vfs.WriteFileAtomic(fsys, dir, RepairedFile, []byte(note+"\n")); err != nil {
		return fmt.Errorf("record the repair of log %s: %w", dir, err)
	}
	return nil
}

func (d *Damage) moveAside(path, aside string) error {
	if err := d.fs.Rename(path, filepath.Join(aside, filepath.Base(path))); err != nil {
		return fmt.Errorf("move %s aside: %w", path, err)
	}
	return nil
}

// cutFile copies the damaged file's bytes from the damage on into aside,
// then truncates the file at the damage.
func (d *Damage) cutFile(aside string) error {
	f, err := d.fs.OpenFile(d.File, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", d.File, err)
	}
	defer f.Close()
	tail := make([]byte, max(d.content-d.Offset, 0))
	if _, err := f.ReadAt(tail, d.Offset); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", d.File, err)
	}
	name := filepath.Base(d.File) + ".from-" + strconv.FormatInt(d.Offset, 10)
	if err := vfs.WriteFileAtomic(d.fs, aside, name, tail); err != nil {
		return err
	}
	if err := f.Truncate(d.Offset); err != nil {
		return fmt.Errorf("cut %s at byte offset %d: %w", d.File, d.Offset, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", d.File, err)
	}
	return nil
}

// Repaired returns what RepairedFile in dir says, "" if there is none:
// the log was cut by Cut, and its owner is to accept what it lost.
func Repaired(fsys vfs.FS, dir string) (string, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	b, err := vfs.ReadFile(fsys, filepath.Join(dir, RepairedFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return string(bytes.TrimSpace(b)), err
}

// ClearRepaired removes RepairedFile from dir, durably, once the log's
// owner has accepted the loss.
func ClearRepaired(fsys vfs.FS, dir string) error {
	if fsys == nil {
		fsys = vfs.OS
	}
	if err := fsys.Remove(filepath.Join(dir, RepairedFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return vfs.SyncDir(fsys, dir)
}
