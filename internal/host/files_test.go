package host

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// TestOpenSegmentFilesBound runs more groups than the bound of open
// segment files lets stay open: every group takes proposals, the files
// open stay near the bound (one in use at the moment may exceed it), and
// after a restart every group has everything it applied.
func TestOpenSegmentFilesBound(t *testing.T) {
	const groups, bound = 12, 3
	dir := t.TempDir()
	open := func() *Host {
		h := newTestHost(t, dir, func(c *Config) {
			c.OpenSegmentFiles = bound
			c.WriteBehind = -1 // each proposal touches its group's files
		})
		var gcs []GroupConfig
		for i := range groups {
			gcs = append(gcs, GroupConfig{ID: uint64(i + 1), Name: fmt.Sprint("g", i), StateMachine: &listMachine{}})
		}
		if failed := h.AddGroups(context.Background(), gcs); len(failed) > 0 {
			t.Fatalf("groups failed to open under a bound of %d files: %v", bound, failed)
		}
		return h
	}
	h := open()
	var want []string
	for round := range 3 {
		want = append(want, fmt.Sprint("cmd", round))
		for id := uint64(1); id <= groups; id++ {
			propose(t, h, id, want[round])
		}
		if got := h.files.Open(); got > bound+1 {
			t.Fatalf("round %d: %d segment files open, bound %d", round, got, bound)
		}
	}
	if h.files.Closes() == 0 || h.files.Reopens() == 0 {
		t.Fatalf("the bound closed %d files and opened %d again; want both, with %d groups and a bound of %d",
			h.files.Closes(), h.files.Reopens(), groups, bound)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h = open()
	for id := uint64(1); id <= groups; id++ {
		if got := machineState(t, h, id); !slices.Equal(got, want) {
			t.Fatalf("group %d after a restart: %q, want %q", id, got, want)
		}
	}
}
