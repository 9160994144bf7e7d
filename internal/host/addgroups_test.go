package host

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestAddGroupsFuncCallsBackAsEachGroupOpens checks that every group is
// reported once, with its error, and that a group reported opened already
// takes proposals, before AddGroupsFunc has returned.
func TestAddGroupsFuncCallsBackAsEachGroupOpens(t *testing.T) {
	h := newTestHost(t, t.TempDir(), func(c *Config) { c.BootParallelism = 3 })
	var gcs []GroupConfig
	for i := range 12 {
		gcs = append(gcs, GroupConfig{ID: uint64(i + 1), Name: fmt.Sprint("g", i), StateMachine: &listMachine{}})
	}
	gcs = append(gcs, GroupConfig{ID: 100, Name: "", StateMachine: &listMachine{}}) // invalid
	var mu sync.Mutex
	calls := make(map[uint64]error)
	proposed := make(map[uint64]error)
	failed := h.AddGroupsFunc(context.Background(), gcs, func(id uint64, err error) {
		var perr error
		if err == nil {
			_, perr = h.Propose(context.Background(), id, Bytes([]byte("early")))
		}
		mu.Lock()
		defer mu.Unlock()
		if _, again := calls[id]; again {
			t.Errorf("group %d reported twice", id)
		}
		calls[id], proposed[id] = err, perr
	})
	if len(calls) != len(gcs) {
		t.Fatalf("%d groups reported, want %d", len(calls), len(gcs))
	}
	if calls[100] == nil || failed[100] == nil || len(failed) != 1 {
		t.Fatalf("the invalid group: reported %v, returned %v; want it failed, alone", calls[100], failed)
	}
	for i := range 12 {
		id := uint64(i + 1)
		if calls[id] != nil || proposed[id] != nil {
			t.Errorf("group %d: reported %v, proposal from the callback %v; want it open and taking proposals", id, calls[id], proposed[id])
		}
	}
}
