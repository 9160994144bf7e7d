package vfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Checksum is CRC-32C (Castagnoli), the checksum of every herald file
// format. crc32.MakeTable caches the table, so this costs no allocation.
func Checksum(b []byte) uint32 {
	return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
}

// SyncDir makes the entries of dir (creations, renames, removals) durable.
func SyncDir(fsys FS, dir string) error {
	d, err := fsys.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// MkdirDurable creates dir, and any missing parents, and makes their
// entries durable, so that files later synced inside it cannot vanish with
// an unsynced directory at a crash. An existing dir is left alone.
func MkdirDurable(fsys FS, dir string) error {
	dir = filepath.Clean(dir)
	if _, err := fsys.Stat(dir); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirDurable(fsys, parent); err != nil {
			return err
		}
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return SyncDir(fsys, parent)
}

// RemoveAllDurable removes path and everything below it, and makes the
// removal durable in its parent directory.
func RemoveAllDurable(fsys FS, path string) error {
	if err := fsys.RemoveAll(path); err != nil {
		return err
	}
	return SyncDir(fsys, filepath.Dir(filepath.Clean(path)))
}

// ReadFile returns the contents of name.
func ReadFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// WriteFileAtomic replaces dir/name with data so that after a crash the
// file holds either its old or its new contents, never a mix: the bytes go
// to dir/name.tmp, which is fsynced and renamed over the target, and the
// directory is fsynced so that the rename survives. Callers serialize
// writes of the same name.
func WriteFileAtomic(fsys FS, dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	fail := func(err error) error {
		f.Close()
		fsys.Remove(tmp)
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return fail(fmt.Errorf("write %s: %w (is the disk full?)", tmp, err))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("fsync %s: %w", tmp, err))
	}
	if err := f.Close(); err != nil {
		fsys.Remove(tmp)
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := fsys.Rename(tmp, filepath.Join(dir, name)); err != nil {
		fsys.Remove(tmp)
		return fmt.Errorf("rename %s into place: %w", tmp, err)
	}
	return SyncDir(fsys, dir)
}

// RemoveInSteps removes name after cutting its length down by step bytes
// at a time. On a file system mounted with discard, unlinking a large file
// discards all its blocks in one request, and every fdatasync on the disk
// waits behind it: up to 14–16 ms for a 64 MiB file on the benchmark
// machine, against 2.4 ms in two runs of three (10 ms in the third) when
// it is cut 4 MiB at a time (bench/cmd/remove-stall). A crash or an
// error can leave the file shorter and in place: call it only on a file
// nothing will read again, under a name that recovery removes.
func RemoveInSteps(fsys FS, name string, step int64) error {
	f, err := fsys.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	size, err := f.Size()
	for err == nil && size > 0 {
		size = max(size-step, 0)
		if err = f.Truncate(size); err != nil {
			err = fmt.Errorf("remove %s: cut it to %d bytes: %w", name, size, err)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("remove %s: %w", name, cerr)
	}
	if err != nil {
		return err
	}
	return fsys.Remove(name)
}

// RemoveTemp deletes dir/name.tmp, the leftover of a WriteFileAtomic that a
// crash interrupted before its rename; nothing refers to it.
func RemoveTemp(fsys FS, dir, name string) error {
	err := fsys.Remove(filepath.Join(dir, name+".tmp"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// FrameHeaderBytes is the size of the magic and checksum that Frame puts
// before the data of a small checksummed file.
const FrameHeaderBytes = 8

// Frame prefixes data with a 4-byte magic and its CRC-32C, so that a
// damaged small file (hard state, snapshot, log state) is detected instead
// of misread.
func Frame(magic string, data []byte) []byte {
	out := make([]byte, FrameHeaderBytes, FrameHeaderBytes+len(data))
	out = append(out, data...)
	SetFrameHeader(out, magic)
	return out
}

// SetFrameHeader writes into b's first FrameHeaderBytes bytes the header
// that Frame puts before the rest of b: so a large encoding can be
// framed where it was written, without a copy.
func SetFrameHeader(b []byte, magic string) {
	if len(magic) != 4 {
		panic("vfs: frame magic must be 4 bytes")
	}
	copy(b, magic)
	binary.LittleEndian.PutUint32(b[4:], Checksum(b[FrameHeaderBytes:]))
}

// DamagedError reports a small checksummed file that cannot be trusted.
type DamagedError struct {
	File   string
	Offset int64
	Reason string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("%s is damaged at byte offset %d: %s", e.File, e.Offset, e.Reason)
}

// ReadFramed returns the data of a file written with Frame, or nil and no
// error if the file does not exist.
func ReadFramed(fsys FS, name, magic string) ([]byte, error) {
	b, err := ReadFile(fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return Unframe(name, b, magic)
}

// Unframe returns the data of b, the contents of the file name written
// with Frame, or a DamagedError if b is not whole.
func Unframe(name string, b []byte, magic string) ([]byte, error) {
	if len(b) < FrameHeaderBytes || string(b[:4]) != magic {
		return nil, &DamagedError{File: name, Offset: 0, Reason: "bad header"}
	}
	if Checksum(b[FrameHeaderBytes:]) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, &DamagedError{File: name, Offset: 4, Reason: "checksum mismatch"}
	}
	return b[FrameHeaderBytes:], nil
}

// IsNoSpace reports whether err is the file system's "no space left on
// device": a write that may succeed once space is freed, unlike a failing
// disk.
func IsNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }
