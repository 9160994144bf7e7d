package tier

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// freedShard is a shard whose closed entries are all delivered: a cycle
// advances its LRO without uploading anything. Advance takes a moment,
// and counts the advances in flight at once.
type freedShard struct {
	name     string
	closed   uint64
	inFlight *advances
}

type advances struct {
	mu       sync.Mutex
	now, max int
	lros     map[string]uint64
}

func (s freedShard) Name() string { return s.name }

func (s freedShard) Progress(context.Context) (Progress, error) {
	return Progress{Needed: s.closed + 1, Closed: s.closed}, nil
}

func (s freedShard) Entries(lo, hi, maxBytes uint64) ([]*pb.Entry, error) {
	return nil, fmt.Errorf("no entries from %d: all delivered", lo)
}

func (s freedShard) Advance(_ context.Context, lro uint64) error {
	f := s.inFlight
	f.mu.Lock()
	f.now++
	f.max = max(f.max, f.now)
	f.mu.Unlock()
	time.Sleep(5 * time.Millisecond)
	f.mu.Lock()
	f.now--
	f.lros[s.name] = lro
	f.mu.Unlock()
	return nil
}

type emptyManifest struct{}

func (emptyManifest) TieredThrough(string) uint64                 { return 0 }
func (emptyManifest) Record(context.Context, string, []Run) error { return nil }
func (emptyManifest) Forget(context.Context, string) error        { return nil }
func (emptyManifest) Objects() []Object                           { return nil }

func TestCycleAdvancesWithinParallelismAndLogsItsStats(t *testing.T) {
	ctx := context.Background()
	store, err := OpenStore(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, parallelism := range []int{1, 4} {
		f := &advances{lros: make(map[string]uint64)}
		var shards []Shard
		for i := range 12 {
			shards = append(shards, freedShard{name: fmt.Sprintf("s%d", i), closed: uint64(10 + i), inFlight: f})
		}
		var log bytes.Buffer
		r := NewReconciler(ReconcilerConfig{
			Store: store, Manifest: emptyManifest{}, Shards: func() []Shard { return shards },
			Parallelism: parallelism,
			Logger:      slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
		st, err := r.Cycle(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Shards != 12 || st.Advanced != 12 || st.Objects != 0 {
			t.Errorf("parallelism %d: stats %+v, want 12 shards advanced and no object", parallelism, st)
		}
		if f.max > parallelism {
			t.Errorf("parallelism %d: %d advances in flight at once", parallelism, f.max)
		}
		if parallelism > 1 && f.max < 2 {
			t.Errorf("parallelism %d: the advances went one by one", parallelism)
		}
		for i := range 12 {
			if got, want := f.lros[fmt.Sprintf("s%d", i)], uint64(10+i); got != want {
				t.Errorf("parallelism %d: LRO of s%d advanced to %d, want %d", parallelism, i, got, want)
			}
		}
		line := log.String()
		for _, want := range []string{`level=DEBUG msg="tiering cycle"`, "shards=12", "advanced=12", "lro_phase=" + st.LROPhase.String()} {
			if !strings.Contains(line, want) {
				t.Errorf("parallelism %d: the cycle's log line lacks %s:\n%s", parallelism, want, line)
			}
		}
	}
}
