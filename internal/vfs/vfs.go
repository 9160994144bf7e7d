// Package vfs is the file-system layer under herald's storage (the shard
// log, raftstore and the host's group directories).
//
// Storage code asks an FS for files instead of calling package os, so that
// tests can run it over MemFS, an in-memory file system that simulates
// power loss (every write, truncation, creation, rename and removal that no
// completed fsync covered is lost at a crash) and injects faults (ENOSPC,
// EIO, bit flips). OS is the real thing.
//
// The package also holds the few file routines every storage package needs:
// making a directory entry durable, replacing a file atomically, and
// checksummed small files.
//
// pebble's vfs package was considered first; its File has no Truncate,
// which the log needs to cut a torn tail, to drop a conflicting Raft suffix
// and to roll back a failed append, and its crash model cannot then be
// checked for those paths. This package is small on purpose: it offers
// exactly what herald's storage uses.
package vfs

import (
	"io"
	"os"
)

// FS is a namespace of files and directories.
type FS interface {
	// OpenFile opens name with os.OpenFile's flags (O_RDONLY, O_RDWR,
	// O_CREATE, O_EXCL, O_TRUNC are honoured).
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// OpenDir opens a directory so that Sync can make its entries durable.
	OpenDir(name string) (File, error)
	Remove(name string) error
	RemoveAll(name string) error
	Rename(oldname, newname string) error
	MkdirAll(name string, perm os.FileMode) error
	// ReadDir lists the names in a directory, sorted.
	ReadDir(name string) ([]string, error)
	// Stat reports whether name exists, and whether it is a directory.
	Stat(name string) (os.FileInfo, error)
}

// File is an open file.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	Name() string
	Truncate(size int64) error
	// Sync makes the file's data and metadata durable (fsync); on a
	// directory, its entries.
	Sync() error
	// SyncData makes the file's data, and the metadata needed to read it
	// back, durable (fdatasync).
	SyncData() error
	// Size returns the file's length.
	Size() (int64, error)
}

// StartWriteback asks that f's bytes [off, off+n), already written, start
// on their way to the disk now, without waiting for them. It makes
// nothing durable and changes nothing a crash leaves; a log calls it as it
// fills a file that will be synced later, so that the later fdatasync
// finds little left to write instead of tens of megabytes that every
// other fdatasync on the disk would queue behind. A hint: on a file other
// than one of OS's, or off Linux, it does nothing.
func StartWriteback(f File, off, n int64) {
	if w, ok := f.(interface{ startWriteback(off, n int64) }); ok {
		w.startWriteback(off, n)
	}
}
