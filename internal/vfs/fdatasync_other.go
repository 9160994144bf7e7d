//go:build !linux

package vfs

import "os"

// fdatasync falls back to fsync where fdatasync is not available.
func fdatasync(f *os.File) error { return f.Sync() }

// dropCache does nothing where the kernel takes no such advice.
func dropCache(*os.File, int64, int64) error { return nil }
