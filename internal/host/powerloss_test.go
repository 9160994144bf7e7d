package host

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"herald/internal/vfs"
)

// crashKind is how a trial of TestPowerLossSimulator ends.
type crashKind int

const (
	powerLoss     crashKind = iota // only what was synced survives
	tornPowerLoss                  // unsynced sectors survive or not, at random
	processCrash                   // everything written survives; then one bit flips on disk
)

func (k crashKind) String() string {
	return [...]string{"power loss", "torn power loss", "process crash and a flipped bit"}[k]
}

// TestPowerLossSimulator runs a group over vfs.MemFS with writers
// proposing concurrently, crashes it at a random moment (sometimes after
// injecting ENOSPC or EIO), reopens what a crash would leave, and checks
// that every acknowledged command is there exactly once and in order per
// writer, or that the group refuses to open naming a damaged file. Never
// fewer commands quietly. HERALD_POWERLOSS_TRIALS sets the number of
// trials (default 300).
func TestPowerLossSimulator(t *testing.T) {
	trials := 300
	if s := os.Getenv("HERALD_POWERLOSS_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("HERALD_POWERLOSS_TRIALS=%q: %v", s, err)
		}
		trials = n
	}
	refused := map[crashKind]int{}
	for trial := range trials {
		seed := uint64(trial)*7919 + 17
		kind := crashKind(trial % 3)
		t.Run(fmt.Sprintf("%d-%s", trial, strings.ReplaceAll(kind.String(), " ", "-")), func(t *testing.T) {
			if powerLossTrial(t, seed, kind) {
				refused[kind]++
			}
		})
	}
	t.Logf("trials: %d; refused with a named error: %v", trials, refused)
	if refused[powerLoss] > 0 {
		t.Errorf("%d trials refused to open after a clean power loss: only damage may be refused", refused[powerLoss])
	}
}

// powerLossTrial runs one trial and reports whether the group refused to
// open (allowed only where data was damaged or torn).
func powerLossTrial(t *testing.T, seed uint64, kind crashKind) (refused bool) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	fs := vfs.NewMem()
	cfg := func(boot string) func(*Config) {
		return func(c *Config) {
			c.Dir, c.FS, c.BootID = "/data", fs, boot
			c.SnapshotEntries = uint64(5 + rng.IntN(40))
			c.SegmentSize = int64(1024 + rng.IntN(4096))
			// Small WAL files roll often, into zeroed spares (internal/log's
			// Options.Preallocate) as the WAL of a busy node does.
			c.WALSegmentSize = int64(2048 + rng.IntN(8192))
			// The group's log writes behind (log.Options.WriteBehind): by
			// default it holds more than a trial writes, so its entries
			// reach the segment files only when a checkpoint, a
			// compaction or quiescing writes them; with a small bound
			// every few Readies write them, and with 1 every Ready does.
			c.WriteBehind = []int64{0, 1, int64(64 + rng.IntN(512))}[rng.IntN(3)]
		}
	}
	h := newTestHost(t, "/data", cfg("boot-1"))
	if err := h.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}}); err != nil {
		t.Fatal(err)
	}

	// Writers propose "w<writer>-<seq>"; acked[w] lists the seqs that
	// were acknowledged.
	const writers = 4
	acked := make([][]int, writers)
	var mu sync.Mutex
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for seq := 0; ctx.Err() == nil; seq++ {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := h.Propose(pctx, 1, Bytes(fmt.Appendf(nil, "w%d-%d", w, seq)))
				cancel()
				if err != nil {
					if errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed) || errors.Is(err, vfs.ErrInjected) ||
						strings.Contains(err.Error(), "stopped on a failure") {
						return
					}
					continue
				}
				mu.Lock()
				acked[w] = append(acked[w], seq)
				mu.Unlock()
			}
		})
	}
	target := 1 + rng.IntN(300)
	if kind != processCrash && rng.IntN(3) == 0 {
		injectAfter(fs, rng, target/2)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := 0
		for _, a := range acked {
			n += len(a)
		}
		mu.Unlock()
		// A group on a full disk (ENOSPC injected) waits for space
		// rather than failing: crash it while it waits.
		if st, _ := h.GroupStatus(1); n >= target || h.groupFailed(1) || st.WaitingForSpace {
			break
		}
		time.Sleep(time.Millisecond)
	}

	// Crash while the writers still run, then let the old host go. What
	// was acknowledged before the crash must survive it.
	mu.Lock()
	want := make([][]int, writers)
	for w := range acked {
		want[w] = slices.Clone(acked[w])
	}
	mu.Unlock()
	var crashed *vfs.MemFS
	boot := "boot-2"
	switch kind {
	case powerLoss:
		crashed = fs.CrashClone(nil)
	case tornPowerLoss:
		crashed = fs.CrashClone(rand.New(rand.NewPCG(seed, 1)))
	case processCrash:
		crashed, boot = fs.Clone(), "boot-1"
	}
	stop()
	h.Close()
	wg.Wait()

	var flipped string
	if kind == processCrash {
		flipped = flipRandomBit(t, crashed, rng)
	}
	fs = crashed
	h2, err := openTestHost(t, "/data", cfg(boot))
	if err == nil {
		err = h2.AddGroup(GroupConfig{ID: 1, Name: "g", StateMachine: &listMachine{}})
	}
	if err != nil {
		if kind == powerLoss || !strings.Contains(err.Error(), "/data/") {
			t.Fatalf("reopen after %s (flipped %s): %v", kind, flipped, err)
		}
		if kind == processCrash && !strings.Contains(err.Error(), flipped) {
			t.Fatalf("reopen after flipping a bit of %s refused naming another file: %v", flipped, err)
		}
		t.Logf("refused after %s: %v", kind, err)
		return true
	}
	got := machineState(t, h2, 1)
	checkAcked(t, got, want, flipped)
	t.Logf("%s: %d acknowledged, %d present after reopen (target %d)", kind, countAcked(want), len(got), target)
	return false
}

// injectAfter makes the n-th write or sync from now, and every one after
// it, fail with ENOSPC or EIO.
func injectAfter(fs *vfs.MemFS, rng *rand.Rand, n int) {
	kind, errno := vfs.OpWrite, syscall.ENOSPC
	if rng.IntN(2) == 0 {
		kind, errno = vfs.OpSync, syscall.EIO
	}
	var mu sync.Mutex
	count := 0
	fs.SetInjector(func(op vfs.Op) error {
		if op.Kind != kind {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		count++
		if count < n {
			return nil
		}
		return vfs.InjectedError(op, errno)
	})
}

// flipRandomBit flips one bit of a random file of the group and returns
// the file's name.
func flipRandomBit(t *testing.T, fs *vfs.MemFS, rng *rand.Rand) string {
	files, err := fs.Files("/data")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name, size := range files {
		if size > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	name := names[rng.IntN(len(names))]
	if err := fs.FlipBit(name, rng.Int64N(files[name]*8)); err != nil {
		t.Fatal(err)
	}
	return name
}

// checkAcked checks that got, the commands the reopened group applied,
// holds every acknowledged command once, each writer's in order.
func checkAcked(t *testing.T, got []string, acked [][]int, flipped string) {
	t.Helper()
	seen := make([]map[int]bool, len(acked))
	last := make([]int, len(acked))
	for w := range seen {
		seen[w], last[w] = map[int]bool{}, -1
	}
	for _, c := range got {
		var w, seq int
		if _, err := fmt.Sscanf(c, "w%d-%d", &w, &seq); err != nil || w >= len(acked) {
			t.Fatalf("unexpected command %q after reopen (flipped %q)", c, flipped)
		}
		if seen[w][seq] {
			t.Fatalf("command %q applied twice after reopen (flipped %q)", c, flipped)
		}
		if seq < last[w] {
			t.Fatalf("writer %d's command %d applied after %d (flipped %q)", w, seq, last[w], flipped)
		}
		seen[w][seq], last[w] = true, seq
	}
	for w, seqs := range acked {
		for _, seq := range seqs {
			if !seen[w][seq] {
				t.Fatalf("acknowledged command w%d-%d lost: %d of %d acknowledged commands present (flipped %q)",
					w, seq, countSeen(seen, acked), countAcked(acked), flipped)
			}
		}
	}
}

func countAcked(acked [][]int) (n int) {
	for _, a := range acked {
		n += len(a)
	}
	return n
}

func countSeen(seen []map[int]bool, acked [][]int) (n int) {
	for w, a := range acked {
		for _, s := range a {
			if seen[w][s] {
				n++
			}
		}
	}
	return n
}
