//go:build linux

package vfs

import (
	"os"
	"syscall"
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
