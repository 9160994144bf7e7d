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

func (s freedShard) Entries(lo, hi, maxBytes uint64) ([]pb.Entry, error) {
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

// backlogShard is a shard whose closed entries 1 to len(ents) are all
// still needed: a cycle uploads them.
type backlogShard struct {
	ents []pb.Entry
	lro  uint64
}

func (s *backlogShard) Name() string { return "backlog#1" }

func (s *backlogShard) Progress(context.Context) (Progress, error) {
	return Progress{LRO: s.lro, Needed: 1, Closed: uint64(len(s.ents))}, nil
}

func (s *backlogShard) Entries(lo, hi, maxBytes uint64) ([]pb.Entry, error) {
	var out []pb.Entry
	var n uint64
	for i := lo; i <= hi; i++ {
		e := s.ents[i-1]
		if len(out) > 0 && n+uint64(len(e.Data)) > maxBytes {
			break
		}
		out, n = append(out, e), n+uint64(len(e.Data))
	}
	return out, nil
}

func (s *backlogShard) Advance(_ context.Context, lro uint64) error {
	s.lro = max(s.lro, lro)
	return nil
}

type recordingManifest struct {
	emptyManifest
	runs []Run
}

func (m *recordingManifest) Record(_ context.Context, _ string, runs []Run) error {
	m.runs = append(m.runs, runs...)
	return nil
}

func TestCycleCutsAShardsRangeIntoRunsOfMaxRunBytes(t *testing.T) {
	ctx := context.Background()
	store, err := OpenStore(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s := &backlogShard{}
	for i := range 40 {
		s.ents = append(s.ents, pb.Entry{Index: uint64(i + 1), Term: 1, Type: pb.EntryNormal, Data: bytes.Repeat([]byte{byte(i)}, 100<<10)})
	}
	m := &recordingManifest{}
	r := NewReconciler(ReconcilerConfig{Store: store, Manifest: m, Shards: func() []Shard { return []Shard{s} },
		Logger: slog.New(slog.DiscardHandler)})
	st, err := r.Cycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects != 1 || st.Advanced != 1 || s.lro != 40 {
		t.Fatalf("stats %+v, LRO %d; want one object and the LRO at 40", st, s.lro)
	}
	if len(m.runs) < 4 {
		t.Errorf("%d runs for 4 MB of entries, want at least 4", len(m.runs))
	}
	next := uint64(1)
	for _, run := range m.runs {
		if run.First != next || run.Length > MaxRunBytes+(200<<10) {
			t.Errorf("run %+v: want one from %d of at most about %d bytes", run, next, MaxRunBytes)
		}
		next = run.Last + 1
	}
	if next != 41 {
		t.Errorf("the runs end at %d, want 40", next-1)
	}
}

func TestRunCyclesUntilItsContextEnds(t *testing.T) {
	store, err := OpenStore(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	f := &advances{lros: make(map[string]uint64)}
	var mu sync.Mutex
	cycles := 0
	r := NewReconciler(ReconcilerConfig{
		Store: store, Manifest: emptyManifest{}, Interval: 20 * time.Millisecond,
		Shards: func() []Shard {
			mu.Lock()
			cycles++
			mu.Unlock()
			return []Shard{freedShard{name: "s", closed: 5, inFlight: f}}
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r.Run(ctx) // returns when ctx ends
	mu.Lock()
	defer mu.Unlock()
	// The first at once, the second within an interval, then one per
	// interval: at least 10 in 300ms, allowing for a slow machine.
	if cycles < 5 || cycles > 17 {
		t.Errorf("%d cycles in 300ms at an interval of 20ms", cycles)
	}
	if f.lros["s"] != 5 {
		t.Errorf("LRO %d, want 5", f.lros["s"])
	}
}
