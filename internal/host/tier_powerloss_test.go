package host

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/vfs"
)

// TestTierManifestPowerLoss runs, over vfs.MemFS, what a node's tiering
// reconciler does, in its order: copy the closed entries a tiered queue
// still needs to an archive (the object store, which a power loss does
// not touch), record them in a second group (the manifest, which the
// controller's group holds), and only then advance the queue's tiered
// point, which lets the host delete them locally. A publisher writes to
// the queue all along. The power fails at a random moment, around the
// manifest's writes; after the reopen, every pending entry of the queue
// that is no longer in its local log must be recorded in the manifest:
// the record of an upload is never lost while the deletion it allowed
// survives. (node.Config takes no vfs.FS, so this runs at the host's
// level, with the two kinds of groups a node tiers with.)
func TestTierManifestPowerLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("40 trials of a few hundred proposals each")
	}
	for trial := range 40 {
		seed := uint64(trial)*104729 + 7
		t.Run(strconv.Itoa(trial), func(t *testing.T) { tierPowerLossTrial(t, seed) })
	}
}

func tierPowerLossTrial(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	const queue, manifest = 1, 2 // mapArchive serves group 1
	fs := vfs.NewMem()
	cfg := func(boot string) func(*Config) {
		return func(c *Config) {
			c.Dir, c.FS, c.BootID = "/data", fs, boot
			c.SnapshotEntries = uint64(10 + rng.IntN(30))
			c.SegmentSize = 4096
			c.WriteBehind = []int64{-1, 0, 2048}[rng.IntN(3)]
		}
	}
	archive := &mapArchive{entries: map[uint64]pb.Entry{}}
	withArchive := func(boot string) func(*Config) {
		return func(c *Config) { cfg(boot)(c); c.Archive = archive }
	}
	const retention = 4096
	h := newTestHost(t, "/data", withArchive("boot-1"))
	if err := h.AddGroup(GroupConfig{ID: queue, Name: "q", StateMachine: &tieredQueue{retention: retention}}); err != nil {
		t.Fatal(err)
	}
	if err := h.AddGroup(GroupConfig{ID: manifest, Name: "m", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	payload := "pub " + strings.Repeat("x", 200)
	wg.Go(func() {
		for ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			h.Propose(pctx, queue, Bytes([]byte(payload)))
			cancel()
		}
	})
	// The reconciler: upload, record, advance, as tier.Reconciler.
	cycles := 0
	wg.Go(func() {
		var lro uint64
		for ctx.Err() == nil {
			time.Sleep(time.Millisecond)
			b, err := h.LogBounds(queue)
			if err != nil || b.ClosedThrough <= lro {
				continue
			}
			g, err := h.group(queue)
			if err != nil {
				continue
			}
			from := max(lro+1, g.storage.Log().FirstIndex())
			ents, err := h.Entries(queue, from, b.ClosedThrough+1, 1<<30)
			if err != nil || len(ents) == 0 {
				continue
			}
			to := ents[len(ents)-1].Index
			archive.put(ents)
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = h.Propose(pctx, manifest, Bytes(fmt.Appendf(nil, "%d-%d", from, to)))
			if err == nil {
				_, err = h.Propose(pctx, queue, Bytes(fmt.Appendf(nil, "tier %d", to+1)))
			}
			cancel()
			if err != nil {
				continue
			}
			lro = to
			cycles++
		}
	})
	time.Sleep(time.Duration(20+rng.IntN(200)) * time.Millisecond)

	crashed := fs.CrashClone(nil)
	if rng.IntN(2) == 0 {
		crashed = fs.CrashClone(rand.New(rand.NewPCG(seed, 1)))
	}
	stop()
	h.Close()
	wg.Wait()

	fs = crashed
	h2, err := openTestHost(t, "/data", withArchive("boot-2"))
	if err == nil {
		err = h2.AddGroup(GroupConfig{ID: queue, Name: "q", StateMachine: &tieredQueue{retention: retention}})
	}
	if err == nil {
		err = h2.AddGroup(GroupConfig{ID: manifest, Name: "m", StateMachine: &listMachine{}})
	}
	if err != nil {
		t.Fatalf("reopen after a power loss: %v", err)
	}
	var recorded [][2]uint64
	for _, r := range machineState(t, h2, manifest) {
		var from, to uint64
		if _, err := fmt.Sscanf(r, "%d-%d", &from, &to); err != nil {
			t.Fatalf("manifest record %q: %v", r, err)
		}
		recorded = append(recorded, [2]uint64{from, to})
	}
	var pending []uint64
	err = h2.View(context.Background(), queue, func(sm StateMachine, _ uint64) {
		pending = append(pending, sm.(*tieredQueue).pending...)
	})
	if err != nil {
		t.Fatal(err)
	}
	first := h2.groups[queue].storage.Log().FirstIndex()
	below := 0
	for _, idx := range pending {
		if idx >= first {
			continue
		}
		below++
		covered := false
		for _, r := range recorded {
			covered = covered || r[0] <= idx && idx <= r[1]
		}
		if !covered {
			t.Fatalf("pending entry %d is below the local log (from %d) and the manifest does not record it (records %v)", idx, first, recorded)
		}
		if _, err := h2.Entry(queue, idx); err != nil {
			t.Fatalf("pending entry %d: %v", idx, err)
		}
	}
	t.Logf("%d cycles; after the power loss %d records, %d pending entries, %d of them only in the archive", cycles, len(recorded), len(pending), below)
}
