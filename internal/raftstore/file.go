package raftstore

import (
	"fmt"
	"os"
	"path/filepath"
)

// writeFileAtomic replaces dir/name with data so that after a crash the file
// holds either its old or its new contents, never a mix: the bytes go to a
// temporary file that is fsynced, renamed over the target, and the directory
// is fsynced so the rename itself survives.
func writeFileAtomic(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, name+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temporary file for %s: %w", name, err)
	}
	tmpName := tmp.Name()
	cleanup := func(err error) error {
		tmp.Close()
		os.Remove(tmpName)
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return cleanup(fmt.Errorf("write %s: %w (is the disk full?)", tmpName, err))
	}
	if err := tmp.Sync(); err != nil {
		return cleanup(fmt.Errorf("fsync %s: %w", tmpName, err))
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmpName)
		return fmt.Errorf("close %s: %w", tmpName, err)
	}
	if err := os.Rename(tmpName, filepath.Join(dir, name)); err != nil {
		os.Remove(tmpName)
		return fmt.Errorf("rename %s into place: %w", name, err)
	}
	return syncDir(dir)
}

// syncDir makes renames, creations and removals in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// removeTempFiles deletes leftovers of writeFileAtomic calls that a crash
// interrupted; they were never renamed into place, so nothing refers to them.
func removeTempFiles(dir, name string) {
	matches, _ := filepath.Glob(filepath.Join(dir, name+".tmp-*"))
	for _, m := range matches {
		os.Remove(m)
	}
}
