//go:build linux

package vfs

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// fdatasync flushes f's data, and the metadata needed to read it back, to
// stable storage. It skips the timestamp updates that fsync would also
// write.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	// Control keeps the descriptor from being closed while in use.
	err = rc.Control(func(fd uintptr) {
		for {
			if serr = syscall.Fdatasync(int(fd)); serr != syscall.EINTR {
				return
			}
		}
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return os.NewSyscallError("fdatasync", serr)
	}
	return nil
}

// dropCache tells the kernel that the pages of f in [off, off+n) will not
// be read soon, so it may drop them from the page cache. Pages still
// dirty are only queued for writeback, not dropped.
func dropCache(f *os.File, off, n int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var aerr error
	err = rc.Control(func(fd uintptr) {
		aerr = unix.Fadvise(int(fd), off, n, unix.FADV_DONTNEED)
	})
	if err != nil {
		return err
	}
	return aerr
}
