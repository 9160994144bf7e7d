package robustness

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// TestE2EBitFlipsAreNeverSilent is the acceptance test of recovery against
// media rot, on the real binary: a node keeps a two-shard topic whose
// events sit in snapshots and in log segments, and is stopped either
// cleanly or by SIGKILL. Each trial copies its data directory, flips one
// random bit of one random file (segments, hard state, snapshot, log
// state, the controller's files, the boot epoch) and starts herald on the
// copy. A trial passes in one of two ways: every event still pending is
// served exactly once, in order per key, and none that a consumer
// acknowledged comes back; or the damage is refused with the flipped file
// named, by the node not starting or by Fetch listing the shard as
// unreadable while the other shard serves all of its events. Fewer events
// without a word fail the test.
//
// HERALD_BITFLIP_TRIALS sets the number of trials (default 24) and
// HERALD_BITFLIP_SEED the random seed, to replay a failure.
func TestE2EBitFlipsAreNeverSilent(t *testing.T) {
	trials := envInt(t, "HERALD_BITFLIP_TRIALS", 24)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HERALD_BITFLIP_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("HERALD_BITFLIP_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (HERALD_BITFLIP_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	fixtures := []*flipFixture{
		prepareFlipFixture(t, false),
		prepareFlipFixture(t, true),
	}
	outcomes := map[string]int{}
	for trial := range trials {
		fx := fixtures[trial%len(fixtures)]
		file := fx.files[rng.IntN(len(fx.files))]
		size := fileSize(t, filepath.Join(fx.dir, file))
		if size == 0 {
			continue
		}
		bit := rng.Int64N(size * 8)
		name := fmt.Sprintf("trial %d: %s, %s bit %d (byte %d)", trial, fx.stop, file, bit, bit/8)
		outcome := runFlipTrial(t, fx, file, bit)
		if outcome == "" {
			t.Fatalf("%s: failed; replay with HERALD_BITFLIP_SEED=%d", name, seed)
		}
		t.Logf("%s: %s", name, outcome)
		outcomes[outcome]++
	}
	t.Logf("%d trials: %v", trials, outcomes)
}

// flipFixture is a stopped node's data directory and what a consumer must
// find in it.
type flipFixture struct {
	dir     string
	stop    string                        // "clean stop" or "SIGKILL"
	files   []string                      // every regular file, relative to dir
	pending map[int][]framework.Published // per shard, the events not yet acknowledged, in publish order
	acked   map[string]bool               // events a consumer acknowledged
}

// prepareFlipFixture publishes 200 events over 10 keys, 4 at a time, to a two-shard
// topic, acknowledges about a quarter of them, and stops the node. Small
// snapshot thresholds put events in the snapshots and in the log segments
// both.
func prepareFlipFixture(t *testing.T, kill bool) *flipFixture {
	fx := &flipFixture{dir: t.TempDir(), stop: "clean stop", pending: map[int][]framework.Published{}, acked: map[string]bool{}}
	srv := framework.StartServer(t, fx.dir, testkit.FreeAddr(t), "--snapshot-entries", "16")
	c := client.New("http://"+srv.Addr(), client.WithTimeout(10*time.Second))
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, "flip", map[string]string{"shards": "2"}); err != nil {
		t.Fatal(err)
	}
	var all []framework.Published
	seqs := map[string]int{}
	publish := func(batches int) {
		for b := range batches {
			key := fmt.Sprintf("k%d", b%10)
			var evs []client.Event
			for range 4 {
				evs = append(evs, client.Event{Key: key, Payload: fmt.Appendf(nil, "%s %d", key, seqs[key])})
				seqs[key]++
			}
			ids, err := c.Publish(ctx, "flip", evs...)
			if err != nil {
				t.Fatal(err)
			}
			for j, id := range ids {
				all = append(all, framework.Published{Key: key, Seq: seqs[key] - len(ids) + j, ID: id})
			}
		}
	}
	publish(40)
	ds, err := c.Fetch(ctx, "flip", client.FetchOptions{MaxEvents: 50, VisibilityTimeout: time.Minute})
	if err != nil || len(ds) == 0 {
		t.Fatalf("fetch to acknowledge: %d events, %v", len(ds), err)
	}
	for _, d := range ds {
		if _, err := c.Ack(ctx, d.ID); err != nil {
			t.Fatal(err)
		}
		fx.acked[d.ID] = true
	}
	publish(10)
	for _, p := range all {
		if !fx.acked[p.ID] {
			shard := shardOfID(t, p.ID)
			fx.pending[shard] = append(fx.pending[shard], p)
		}
	}

	if kill {
		fx.stop = "SIGKILL"
		srv.Kill()
	} else {
		srv.Signal(syscall.SIGTERM)
		<-srv.Done()
		if err := srv.Err(); err != nil {
			t.Fatalf("herald serve exited with %v after SIGTERM:\n%s", err, srv.Output())
		}
	}
	err = filepath.WalkDir(fx.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(fx.dir, path)
		fx.files = append(fx.files, rel)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"controller/snapshot", "controller/hardstate", "shards/2-flip/snapshot", "shards/3-flip.1/hardstate", "wal/state", "boot.epoch"}
	if !kill {
		// A shard's log writes its state file at a clean close only; until
		// then the WAL's stands for it.
		want = append(want, "shards/2-flip/log/state")
	}
	for _, want := range want {
		if !slices.Contains(fx.files, want) {
			t.Fatalf("the fixture has no %s; files: %v", want, fx.files)
		}
	}
	return fx
}

// runFlipTrial flips one bit of file in a copy of the fixture, runs herald
// on the copy and returns how the trial ended, or "" after reporting why it
// failed.
func runFlipTrial(t *testing.T, fx *flipFixture, file string, bit int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(fx.dir)); err != nil {
		t.Fatal(err)
	}
	flipBit(t, filepath.Join(dir, file), bit)

	srv, err := framework.TryStartServer(t, dir, testkit.FreeAddr(t))
	if err != nil {
		if !strings.Contains(err.Error(), file) {
			t.Errorf("herald refused to start without naming %s: %v", file, err)
			return ""
		}
		return "node refused, file named"
	}
	defer srv.Kill()
	c := client.New("http://"+srv.Addr(), client.WithTimeout(10*time.Second))
	if _, err := c.GetTopic(context.Background(), "flip"); err != nil {
		t.Errorf("the topic is gone after the flip: %v", err)
		return ""
	}
	got, unreadable := framework.DrainTopic(t, c, "flip")
	for shard := range 2 {
		if reason, ok := unreadable[shard]; ok {
			if !strings.Contains(reason, file) {
				t.Errorf("shard %d unreadable without naming %s: %s", shard, file, reason)
				return ""
			}
			continue
		}
		if !sameEvents(t, fx, shard, got[shard]) {
			return ""
		}
	}
	if len(unreadable) > 0 {
		return "shard refused, file named"
	}
	return "all events back"
}

// sameEvents reports whether a shard served exactly its pending events,
// each once, with its payload, in publish order per key, and none that
// was acknowledged.
func sameEvents(t *testing.T, fx *flipFixture, shard int, got []client.Delivery) bool {
	t.Helper()
	want := map[string]framework.Published{}
	for _, p := range fx.pending[shard] {
		want[p.ID] = p
	}
	seen := map[string]bool{}
	lastSeq := map[string]int{}
	for _, d := range got {
		p, ok := want[d.ID]
		switch {
		case fx.acked[d.ID]:
			t.Errorf("shard %d: acknowledged event %s came back", shard, d.ID)
			return false
		case !ok:
			t.Errorf("shard %d: event %s was never published", shard, d.ID)
			return false
		case seen[d.ID]:
			t.Errorf("shard %d: event %s served twice", shard, d.ID)
			return false
		case string(d.Payload) != fmt.Sprintf("%s %d", p.Key, p.Seq) || d.Key != p.Key:
			t.Errorf("shard %d: event %s is key %q payload %q, want key %q payload %q", shard, d.ID, d.Key, d.Payload, p.Key, fmt.Sprintf("%s %d", p.Key, p.Seq))
			return false
		}
		if last, ok := lastSeq[p.Key]; ok && p.Seq < last {
			t.Errorf("shard %d: key %s event %d came after %d", shard, p.Key, p.Seq, last)
			return false
		}
		seen[d.ID], lastSeq[p.Key] = true, p.Seq
	}
	if len(seen) != len(want) {
		t.Errorf("shard %d served %d of its %d pending events, with no error", shard, len(seen), len(want))
		return false
	}
	return true
}

func shardOfID(t *testing.T, id string) int {
	t.Helper()
	parts := strings.Split(id, "/")
	if len(parts) != 3 {
		t.Fatalf("event id %q is not topic/shard/offset", id)
	}
	shard, err := strconv.Atoi(parts[1])
	if err != nil {
		t.Fatalf("event id %q: %v", id, err)
	}
	return shard
}

func flipBit(t *testing.T, path string, bit int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[bit/8] ^= 1 << (bit % 8)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}
