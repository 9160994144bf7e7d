package host

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/vfs"
)

// waitChanged waits for the watch to report exactly the groups in want.
func waitChanged(t *testing.T, w *LeadershipWatch, want ...uint64) {
	t.Helper()
	var got []uint64
	deadline := time.After(10 * time.Second)
	for !slices.Equal(got, want) {
		select {
		case <-w.C():
			for _, id := range w.Changed() {
				if !slices.Contains(got, id) {
					got = append(got, id)
				}
			}
			slices.Sort(got)
		case <-deadline:
			t.Fatalf("leadership changes reported: %v, want %v", got, want)
		}
	}
}

// TestLeadershipWatchReportsElectionsAndStops: a watcher learns when a
// group elects this node and when a group stops, whether removed or
// failed, without polling; a stopped group reports no leader.
func TestLeadershipWatchReportsElectionsAndStops(t *testing.T) {
	mem := vfs.NewMem()
	h := newTestHost(t, "/data", func(c *Config) {
		c.FS = mem
		c.WriteBehind = 1 // a group's files are written in each Ready
	})
	w := h.WatchLeadership()
	defer w.Stop()
	for id := uint64(1); id <= 2; id++ {
		if err := h.AddGroup(GroupConfig{ID: id, Name: "g", StateMachine: &listMachine{}}); err != nil {
			t.Fatal(err)
		}
	}
	waitChanged(t, w, 1, 2)
	for id := uint64(1); id <= 2; id++ {
		if st, err := h.GroupStatus(id); err != nil || !st.IsLeader {
			t.Fatalf("group %d after its election: %+v, %v", id, st, err)
		}
	}

	if err := h.RemoveGroup(1, false); err != nil {
		t.Fatal(err)
	}
	waitChanged(t, w, 1)

	// A failed write stops group 2: it must not look like a leader any
	// more, or its dispatcher would keep running.
	mem.SetInjector(func(op vfs.Op) error {
		if op.Kind == vfs.OpWrite && strings.Contains(op.Path, "2-g") {
			return vfs.InjectedError(op, syscall.EIO)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := h.Propose(ctx, 2, Bytes([]byte("x"))); err == nil {
		t.Fatal("a proposal whose write failed succeeded")
	}
	waitChanged(t, w, 2)
	if st, err := h.GroupStatus(2); err != nil || st.IsLeader || st.Leader != 0 || st.Err == nil {
		t.Fatalf("failed group: %+v, %v; want no leader and its error", st, err)
	}
}

// TestSweepGroupDirs removes the directories of groups that are neither
// hosted nor kept, and nothing else.
func TestSweepGroupDirs(t *testing.T) {
	dir := t.TempDir()
	h := newTestHost(t, dir, nil)
	for id := uint64(1); id <= 3; id++ {
		if err := h.AddGroup(GroupConfig{ID: id, Name: "g", StateMachine: &listMachine{}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []uint64{2, 3} {
		if err := h.RemoveGroup(id, false); err != nil {
			t.Fatal(err)
		}
	}
	stranger := filepath.Join(dir, groupsDir, "notes")
	if err := os.WriteFile(stranger, []byte("not a group"), 0o644); err != nil {
		t.Fatal(err)
	}
	keep := func(id uint64) bool { return id == 3 }
	if err := h.SweepGroupDirs(keep); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, groupsDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	// 1 is hosted, 3 is kept, notes is not a group's; 2 is gone.
	if want := []string{"1-g", "3-g", "notes"}; !slices.Equal(names, want) {
		t.Fatalf("after the sweep: %v, want %v", names, want)
	}
}

// TestHostMetricsAreRegistered: the fsync histogram a scrape shows counts
// the host's fsyncs, and the raft round counters count its Readies.
func TestHostMetricsAreRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newTestHost(t, t.TempDir(), func(c *Config) { c.Registerer = reg })
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	propose(t, h, 1, "a")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var fsyncs uint64
	var walSyncs, readies, appended, sent float64
	for _, mf := range mfs {
		switch mf.GetName() {
		case "herald_fsync_duration_seconds":
			fsyncs = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		case "herald_wal_fsyncs_total":
			walSyncs = mf.GetMetric()[0].GetCounter().GetValue()
		case "herald_raft_readies_total":
			readies = mf.GetMetric()[0].GetCounter().GetValue()
		case "herald_raft_appended_entries_total":
			appended = mf.GetMetric()[0].GetCounter().GetValue()
		case "herald_raft_messages_sent_total":
			sent = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	// The group's first leader appends an empty entry, then "a"; a group
	// of one node sends nothing.
	if readies < 2 || appended < 2 || sent != 0 {
		t.Fatalf("readies %v, appended entries %v, messages sent %v: want at least 2 Readies persisting the 2 entries and no message", readies, appended, sent)
	}
	if walSyncs == 0 || walSyncs != float64(h.wal.SyncCount()) {
		t.Fatalf("herald_wal_fsyncs_total = %v, the WAL made %d fdatasyncs", walSyncs, h.wal.SyncCount())
	}
	if fsyncs == 0 || fsyncs != h.Stats().Fsyncs.Load() {
		t.Fatalf("herald_fsync_duration_seconds counts %d fsyncs, the host made %d", fsyncs, h.Stats().Fsyncs.Load())
	}
	if _, err := New(Config{Dir: t.TempDir(), Registerer: reg}); err == nil {
		t.Fatal("a second host registering the same series in one registry succeeded")
	}
}
