//go:build !linux

package vfs

import "os"

// fdatasync falls back to fsync where fdatasync is not available.
func fdatasync(f *os.File) error { return f.Sync() }

// startWriteback does nothing where sync_file_range is not available.
func startWriteback(*os.File, int64, int64) {}
