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

// startWriteback asks the kernel to begin writing f's bytes [off, off+n)
// to the disk and returns without waiting (sync_file_range with
// SYNC_FILE_RANGE_WRITE). Nothing is made durable: it only spreads the
// disk writes that a later fdatasync would otherwise make in one burst.
func startWriteback(f *os.File, off, n int64) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE) // a hint: its failure changes nothing
	})
}
