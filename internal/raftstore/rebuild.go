package raftstore

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"herald/internal/vfs"
)

// rebuildingFile marks a replica that was rebuilt empty (its files were
// damaged, or its node lost its data directory) and has not yet caught up
// with a leader. Until it has, it must not vote: its empty log would make
// any candidate look up to date, even one missing entries this replica
// had helped commit.
const (
	rebuildingFile  = "rebuilding"
	rebuildingMagic = "HRSB"
)

// MarkRebuilding durably records that the replica is being rebuilt. The
// replica starts from nothing: what the node's WAL still holds of the
// group from before is not replayed into it.
func (s *Storage) MarkRebuilding() error {
	if err := s.barrier(); err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(s.fs, s.dir, rebuildingFile, vfs.Frame(rebuildingMagic, nil)); err != nil {
		return fmt.Errorf("mark %s as rebuilding: %w", s.dir, err)
	}
	return nil
}

// Rebuilding reports whether the replica is marked as being rebuilt. A
// damaged marker counts as one: it was written whole before anything
// depended on it, and staying out of elections a little longer is safe.
func (s *Storage) Rebuilding() (bool, error) {
	_, err := s.fs.Stat(filepath.Join(s.dir, rebuildingFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check whether %s is rebuilding: %w", s.dir, err)
	}
	return true, nil
}

// ClearRebuilding durably records that the replica has caught up.
func (s *Storage) ClearRebuilding() error {
	if err := vfs.RemoveAllDurable(s.fs, filepath.Join(s.dir, rebuildingFile)); err != nil {
		return fmt.Errorf("mark %s as rebuilt: %w", s.dir, err)
	}
	return nil
}
