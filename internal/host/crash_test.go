package host_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"herald/internal/host"
	"herald/internal/shard"
)

// The crash test runs a writer in a subprocess (this test binary, re-executed
// with crashWriterEnv set), SIGKILLs it at a random moment, reopens its data
// in this process and checks that every event the writer saw acknowledged is
// there exactly once and in order per key. Snapshots and compactions are made
// to happen every few dozen entries so kills land mid-append, mid-snapshot and
// mid-compaction.

const (
	crashWriterEnv = "HERALD_CRASH_WRITER_DIR"
	crashGenEnv    = "HERALD_CRASH_WRITER_GEN"
	crashGroup     = 1
)

func crashHostConfig(dir string) host.Config {
	return host.Config{
		Dir:          dir,
		TickInterval: 10 * time.Millisecond,
		StorageConfig: host.StorageConfig{
			SnapshotEntries: 40,
			SegmentSize:     16 << 10,
			// Small WAL files: kills land in WAL files written over zeroed
			// spares (internal/log's Options.Preallocate) and in their rolls.
			WALSegmentSize: 64 << 10,
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func openCrashHost(t testing.TB, dir string) *host.Host {
	h, err := host.New(crashHostConfig(filepath.Join(dir, "data")))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddGroup(host.GroupConfig{ID: crashGroup, Name: "orders", StateMachine: shard.NewMachine()}); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestCrashWriter is the subprocess body; it does nothing in a normal run.
func TestCrashWriter(t *testing.T) {
	dir := os.Getenv(crashWriterEnv)
	if dir == "" {
		return
	}
	gen := os.Getenv(crashGenEnv)
	h := openCrashHost(t, dir)
	acks, err := os.OpenFile(filepath.Join(dir, "acked"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	consumed, err := os.OpenFile(filepath.Join(dir, "consumed"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var mu sync.Mutex // orders writes to the record files
	var wg sync.WaitGroup
	for p := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), uint64(time.Now().UnixNano())))
			seq := map[string]int{}
			for {
				key := fmt.Sprintf("k%d-%d", p, rng.IntN(4))
				n := 1 + rng.IntN(3)
				cmd := shard.Command{Op: shard.OpPublish, Time: time.Now().UnixNano()}
				for range n {
					payload := fmt.Sprintf("%s %s %d %s", key, gen, seq[key], strings.Repeat("x", rng.IntN(300)))
					cmd.Events = append(cmd.Events, shard.Event{Key: key, Payload: []byte(payload)})
					seq[key]++
				}
				r, err := h.Propose(ctx, crashGroup, &cmd)
				if err != nil {
					panic(err)
				}
				res := r.(shard.Result)
				if res.Err != nil {
					panic(res.Err)
				}
				var b strings.Builder
				for i, e := range cmd.Events {
					f := strings.Fields(string(e.Payload))
					fmt.Fprintf(&b, "%s %s %s %d .\n", f[0], f[1], f[2], res.FirstOffset+uint64(i))
				}
				mu.Lock()
				acks.WriteString(b.String())
				mu.Unlock()
			}
		})
	}
	// A consumer acks old events out of order so the delivery head moves and
	// the log can be compacted. It records its intent before proposing.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(99, uint64(time.Now().UnixNano())))
		for {
			time.Sleep(time.Millisecond)
			var head, next uint64
			h.View(ctx, crashGroup, func(sm host.StateMachine, _ uint64) {
				m := sm.(*shard.Machine)
				head, next = m.Head(), m.NextOffset()
			})
			if next-head < 50 {
				continue
			}
			var offs []uint64
			for o := head; o < next-40; o++ {
				if rng.IntN(3) > 0 {
					offs = append(offs, o)
				}
			}
			var b strings.Builder
			for _, o := range offs {
				fmt.Fprintf(&b, "%d\n", o)
			}
			mu.Lock()
			consumed.WriteString(b.String())
			mu.Unlock()
			cmd := shard.Command{Op: shard.OpAck, Offsets: offs}
			if _, err := h.Propose(ctx, crashGroup, &cmd); err != nil {
				panic(err)
			}
		}
	})
	wg.Wait()
}

type ackedEvent struct {
	key, gen string
	seq      int
	offset   uint64
}

func TestCrashKeepsAcknowledgedEvents(t *testing.T) {
	iterations := 12
	if s := os.Getenv("HERALD_CRASH_ITERATIONS"); s != "" {
		iterations, _ = strconv.Atoi(s)
	}
	dir := t.TempDir()
	for it := range iterations {
		runWriterAndKill(t, dir, it)
		verifyCrashState(t, dir, it)
	}
	h := openCrashHost(t, dir)
	defer h.Close()
	st, err := h.GroupStatus(crashGroup)
	if err != nil {
		t.Fatal(err)
	}
	if st.SnapIndex == 0 || st.FirstIndex <= 2 {
		t.Fatalf("the crash runs never snapshotted or compacted (status %+v): the test did not exercise what it claims", st)
	}
}

func runWriterAndKill(t *testing.T, dir string, gen int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashWriterEnv+"="+dir, fmt.Sprintf("%s=g%03d", crashGenEnv, gen))
	out, err := os.Create(filepath.Join(dir, "writer.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for the writer to make progress, then kill it at a random moment.
	ackPath := filepath.Join(dir, "acked")
	start := sizeOf(ackPath)
	deadline := time.Now().Add(30 * time.Second)
	for sizeOf(ackPath) == start && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if sizeOf(ackPath) == start {
		log, _ := os.ReadFile(filepath.Join(dir, "writer.log"))
		t.Fatalf("iteration %d: writer acknowledged nothing; its output:\n%s", gen, log)
	}
}

func sizeOf(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func verifyCrashState(t *testing.T, dir string, it int) {
	t.Helper()
	acked := readAcked(t, filepath.Join(dir, "acked"))
	consumed := map[uint64]bool{}
	for _, line := range readLines(t, filepath.Join(dir, "consumed")) {
		o, err := strconv.ParseUint(line, 10, 64)
		if err == nil {
			consumed[o] = true
		}
	}

	h := openCrashHost(t, dir)
	defer h.Close()
	var head, next uint64
	locs := map[uint64][2]uint64{}
	err := h.View(context.Background(), crashGroup, func(sm host.StateMachine, _ uint64) {
		m := sm.(*shard.Machine)
		head, next = m.Head(), m.NextOffset()
		for o := head; o < next; o++ {
			if idx, slot, ok := m.Locate(o); ok {
				locs[o] = [2]uint64{idx, uint64(slot)}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// Read back every pending event.
	type stored struct{ key, gen, seq string }
	events := map[uint64]stored{}
	seen := map[string]uint64{}
	lastPerKey := map[string]string{}
	for o := head; o < next; o++ {
		if consumed[o] {
			continue // acked out of order, not yet below the head
		}
		loc, ok := locs[o]
		if !ok {
			t.Fatalf("iteration %d: offset %d (head %d, next %d) cannot be located", it, o, head, next)
		}
		data, err := h.Entry(crashGroup, loc[0])
		if err != nil {
			t.Fatalf("iteration %d: offset %d: %v", it, o, err)
		}
		ev, err := shard.EventAt(data, int(loc[1]))
		if err != nil {
			t.Fatalf("iteration %d: offset %d: %v", it, o, err)
		}
		f := strings.Fields(string(ev.Payload))
		s := stored{f[0], f[1], f[2]}
		id := s.key + " " + s.gen + " " + s.seq
		if prev, dup := seen[id]; dup {
			t.Fatalf("iteration %d: event %q stored twice, at offsets %d and %d", it, id, prev, o)
		}
		seen[id] = o
		seqn, _ := strconv.Atoi(s.seq)
		order := fmt.Sprintf("%s/%09d", s.gen, seqn)
		if last, ok := lastPerKey[s.key]; ok && order <= last {
			t.Fatalf("iteration %d: key %s out of order at offset %d: %s after %s", it, s.key, o, order, last)
		}
		lastPerKey[s.key] = order
		events[o] = s
	}
	for _, a := range acked {
		if a.offset >= next {
			t.Fatalf("iteration %d: acknowledged event %s/%s/%d at offset %d is beyond the recovered end %d", it, a.key, a.gen, a.seq, a.offset, next)
		}
		if a.offset < head || consumed[a.offset] {
			if !consumed[a.offset] {
				t.Fatalf("iteration %d: acknowledged event at offset %d is below the head %d but was never consumed", it, a.offset, head)
			}
			continue
		}
		got, ok := events[a.offset]
		if !ok || got.key != a.key || got.gen != a.gen || got.seq != strconv.Itoa(a.seq) {
			t.Fatalf("iteration %d: acknowledged event %s %s %d expected at offset %d, found %+v", it, a.key, a.gen, a.seq, a.offset, got)
		}
	}
	t.Logf("iteration %d: %d acknowledged, head %d, next %d, %d pending verified", it, len(acked), head, next, len(events))
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// readAcked parses the writer's record of acknowledged events. Each line
// ends in " ." so a line torn by the kill is recognised and ignored: its
// publish was acknowledged but the writer died while recording it.
func readAcked(t *testing.T, path string) []ackedEvent {
	var out []ackedEvent
	for _, line := range readLines(t, path) {
		f := strings.Fields(line)
		if len(f) != 5 || f[4] != "." {
			continue
		}
		seq, err1 := strconv.Atoi(f[2])
		off, err2 := strconv.ParseUint(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, ackedEvent{f[0], f[1], seq, off})
	}
	return out
}
