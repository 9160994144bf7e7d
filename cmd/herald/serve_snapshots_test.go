package main

import (
	"math"
	"testing"

	"herald/internal/host"
)

// TestSnapshotsOff checks that --snapshots=false sets thresholds no log
// reaches, and that the default leaves --snapshot-entries alone.
func TestSnapshotsOff(t *testing.T) {
	cfg := defaultServeConfig()
	if !cfg.Snapshots {
		t.Fatal("snapshots are off by default")
	}
	sc := snapshotConfig(cfg, host.StorageConfig{SnapshotEntries: 7})
	if sc.SnapshotEntries != 7 || sc.SnapshotBytes != 0 {
		t.Errorf("snapshots on: %d entries, %d bytes; want 7 and 0 (the host's default)", sc.SnapshotEntries, sc.SnapshotBytes)
	}
	cfg.Snapshots = false
	sc = snapshotConfig(cfg, host.StorageConfig{SnapshotEntries: 7})
	if sc.SnapshotEntries != math.MaxUint64 || sc.SnapshotBytes != math.MaxInt64 {
		t.Errorf("snapshots off: %d entries, %d bytes; want the largest values", sc.SnapshotEntries, sc.SnapshotBytes)
	}
}
