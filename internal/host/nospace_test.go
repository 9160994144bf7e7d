package host

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"herald/internal/vfs"
)

// TestFullDiskStallsAGroupUntilSpaceReturns fills the disk under a group
// with proposals in flight: the group waits instead of stopping, says so
// in its status, and once space returns it goes on. Every proposal
// acknowledged is applied exactly once, in order, and new ones commit.
func TestFullDiskStallsAGroupUntilSpaceReturns(t *testing.T) {
	mem := vfs.NewMem()
	h := newTestHost(t, "/data", func(c *Config) { c.Dir, c.FS = "/data", mem })
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := h.Propose(ctx, 1, Bytes([]byte("before"))); err != nil {
		t.Fatal(err)
	}

	var full atomic.Bool
	mem.SetInjector(func(op vfs.Op) error {
		if full.Load() && op.Kind == vfs.OpWrite {
			return vfs.InjectedError(op, syscall.ENOSPC)
		}
		return nil
	})
	full.Store(true)
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			cmd := fmt.Sprintf("during-%d", i)
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := h.Propose(pctx, 1, Bytes([]byte(cmd))); err == nil {
				mu.Lock()
				acked = append(acked, cmd)
				mu.Unlock()
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := h.GroupStatus(1)
		if err != nil || st.Err != nil {
			t.Fatalf("the group on a full disk: %+v, %v; want it waiting, not stopped", st, err)
		}
		if st.WaitingForSpace {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the group does not say that it waits for disk space")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a few retries meet the full disk
	full.Store(false)
	wg.Wait()
	if st, _ := h.GroupStatus(1); st.WaitingForSpace || st.Err != nil {
		t.Fatalf("after space returned: %+v", st)
	}
	if _, err := h.Propose(ctx, 1, Bytes([]byte("after"))); err != nil {
		t.Fatalf("a proposal once space returned: %v", err)
	}

	got := machineState(t, h, 1)
	if got[0] != "before" || got[len(got)-1] != "after" {
		t.Fatalf("applied %v", got)
	}
	for _, cmd := range acked {
		if n := count(got, cmd); n != 1 {
			t.Errorf("acknowledged %s applied %d times", cmd, n)
		}
	}
	if len(acked) == 0 {
		t.Error("no proposal made while the disk was full was acknowledged after it had space")
	}
}

func count(s []string, v string) int {
	n := 0
	for i := slices.Index(s, v); i >= 0; i = slices.Index(s, v) {
		n++
		s = s[i+1:]
	}
	return n
}
