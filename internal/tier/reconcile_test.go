package tier

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// fakeShard is a shard whose log is entries 1 to last, of which it needs
// those from needed on, with segments closed through closed.
type fakeShard struct {
	name                 string
	lro, needed, closed  uint64
	last                 uint64
	mu                   sync.Mutex
	advances             []uint64
	failProgress, failAd bool
}

func (s *fakeShard) Name() string { return s.name }

func (s *fakeShard) Progress(context.Context) (Progress, error) {
	if s.failProgress {
		return Progress{}, fmt.Errorf("%s: not led here", s.name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return Progress{LRO: s.lro, Needed: s.needed, Closed: s.closed}, nil
}

func (s *fakeShard) Entries(lo, hi, maxBytes uint64) ([]pb.Entry, error) {
	var out []pb.Entry
	var size uint64
	for i := lo; i <= hi && i <= s.last; i++ {
		e := pb.Entry{Index: i, Term: 1, Data: []byte(fmt.Sprintf("%s-%d", s.name, i))}
		// As raft's storage does, the size counts the entry's encoding.
		n := uint64(e.Size())
		if len(out) > 0 && size+n > maxBytes {
			break
		}
		out, size = append(out, e), size+n
	}
	return out, nil
}

func (s *fakeShard) Advance(context.Context, uint64) error { return nil }

// advancingShard records its advances.
type advancingShard struct{ *fakeShard }

func (s advancingShard) Advance(_ context.Context, lro uint64) error {
	if s.failAd {
		return fmt.Errorf("%s: leadership lost", s.name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advances = append(s.advances, lro)
	s.lro = max(s.lro, lro)
	return nil
}

// memManifest is a Manifest in memory.
type memManifest struct {
	mu      sync.Mutex
	objects map[string][]Run
}

func (m *memManifest) TieredThrough(shard string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var through uint64
	for _, runs := range m.objects {
		for _, r := range runs {
			if r.Shard == shard {
				through = max(through, r.Last)
			}
		}
	}
	return through
}

func (m *memManifest) Record(_ context.Context, object string, runs []Run) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[object] = runs
	return nil
}

func (m *memManifest) Forget(_ context.Context, object string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, object)
	return nil
}

func (m *memManifest) Objects() []Object {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Object
	for name, runs := range m.objects {
		out = append(out, Object{Name: name, Runs: runs})
	}
	slices.SortFunc(out, func(a, b Object) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out
}

func newTestReconciler(store *Store, m Manifest, shards []Shard, mod func(*ReconcilerConfig)) *Reconciler {
	cfg := ReconcilerConfig{Store: store, Manifest: m, Shards: func() []Shard { return shards }, Node: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mod != nil {
		mod(&cfg)
	}
	return NewReconciler(cfg)
}

// readBack reads every entry of shard the manifest records, from the
// store.
func readBack(t *testing.T, store *Store, m *memManifest, shard string) map[uint64]string {
	t.Helper()
	out := map[uint64]string{}
	r := NewReader(store, 1<<20)
	defer r.Close()
	for _, o := range m.Objects() {
		for _, run := range o.Runs {
			if run.Shard != shard {
				continue
			}
			ents, err := r.Read(context.Background(), o.Name, run)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				out[e.Index] = string(e.Data)
			}
		}
	}
	return out
}

// TestReconcilerUploadsWhatShardsNeed: a cycle uploads, for each shard,
// the entries it still needs from its closed segments (none it no longer
// needs, none beyond the closed ones), records them, and advances each
// LRO to the end of its closed segments.
func TestReconcilerUploadsWhatShardsNeed(t *testing.T) {
	store, m := openMem(t), &memManifest{objects: map[string][]Run{}}
	a := &fakeShard{name: "a#1", needed: 5, closed: 20, last: 30}  // needs 5..20 uploaded
	b := &fakeShard{name: "b#2", needed: 40, closed: 25, last: 40} // needs nothing closed
	c := &fakeShard{name: "c#3", lro: 10, needed: 1, closed: 10, last: 12}
	shards := []Shard{advancingShard{a}, advancingShard{b}, advancingShard{c}}
	r := newTestReconciler(store, m, shards, nil)
	st, err := r.Cycle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects != 1 || st.Advanced != 2 {
		t.Fatalf("cycle %+v: want 1 object and 2 LROs advanced (a's and b's)", st)
	}
	got := readBack(t, store, m, "a#1")
	if len(got) != 16 || got[5] != "a#1-5" || got[20] != "a#1-20" {
		t.Fatalf("a's entries in the store: %v; want 5 to 20", got)
	}
	if len(readBack(t, store, m, "b#2")) != 0 || len(readBack(t, store, m, "c#3")) != 0 {
		t.Fatal("entries that no shard needs, or already reconciled, were uploaded")
	}
	if a.lro != 20 || b.lro != 25 || len(c.advances) != 0 {
		t.Fatalf("LROs a %d b %d, c advanced %v; want 20, 25, none", a.lro, b.lro, c.advances)
	}

	// Nothing new: the next cycle uploads and advances nothing.
	st, err = r.Cycle(context.Background())
	if err != nil || st.Objects != 0 || st.Advanced != 0 {
		t.Fatalf("idle cycle %+v, %v", st, err)
	}
}

// TestReconcilerCarriesOnFromTheManifest: a range recorded by a cycle
// that did not advance the LRO (it crashed, or leadership moved) is not
// uploaded again; the LRO is advanced to it.
func TestReconcilerCarriesOnFromTheManifest(t *testing.T) {
	store, m := openMem(t), &memManifest{objects: map[string][]Run{}}
	a := &fakeShard{name: "a#1", needed: 1, closed: 10, last: 10}
	crashed := newTestReconciler(store, m, []Shard{a}, nil) // a's Advance does nothing
	if _, err := crashed.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.lro != 0 || len(m.objects) != 1 {
		t.Fatalf("LRO %d, %d objects: want the range recorded and the LRO not advanced", a.lro, len(m.objects))
	}
	r := newTestReconciler(store, m, []Shard{advancingShard{a}}, nil)
	st, err := r.Cycle(context.Background())
	if err != nil || st.Objects != 0 || st.Advanced != 1 || a.lro != 10 {
		t.Fatalf("cycle %+v, %v, LRO %d: want no upload and the LRO advanced to 10", st, err, a.lro)
	}
}

// TestReconcilerBoundsObjectsAndCycles: objects stay near their bound,
// a cycle uploads about its budget, and the LRO advances only as far as
// what was recorded.
func TestReconcilerBoundsObjectsAndCycles(t *testing.T) {
	store, m := openMem(t), &memManifest{objects: map[string][]Run{}}
	a := &fakeShard{name: "a#1", needed: 1, closed: 1000, last: 1000}
	r := newTestReconciler(store, m, []Shard{advancingShard{a}}, func(c *ReconcilerConfig) {
		c.MaxObjectBytes, c.MaxCycleBytes = 4096, 25000
	})
	st, err := r.Cycle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects < 2 || a.lro == 0 || a.lro >= 1000 {
		t.Fatalf("cycle %+v, LRO %d: want several objects and the LRO short of 1000", st, a.lro)
	}
	got := readBack(t, store, m, "a#1")
	if uint64(len(got)) != a.lro || got[a.lro] == "" {
		t.Fatalf("%d entries recorded, LRO %d: the LRO must be exactly what is recorded", len(got), a.lro)
	}
	for i := 0; a.lro < 1000; i++ {
		if i == 100 {
			t.Fatalf("LRO stuck at %d", a.lro)
		}
		if _, err := r.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := readBack(t, store, m, "a#1"); len(got) != 1000 {
		t.Fatalf("%d entries in the store, want 1000", len(got))
	}
}

// TestReconcilerCollectsAndSweeps: an object whose runs no shard needs
// is forgotten and deleted; an object the manifest does not record is
// deleted once older than the grace, and not before.
func TestReconcilerCollectsAndSweeps(t *testing.T) {
	ctx := context.Background()
	store, m := openMem(t), &memManifest{objects: map[string][]Run{}}
	a := &fakeShard{name: "a#1", needed: 1, closed: 10, last: 10}
	gone := map[string]bool{}
	r := newTestReconciler(store, m, []Shard{advancingShard{a}}, func(c *ReconcilerConfig) {
		c.Gone = func(s string) bool { return gone[s] }
		c.SweepGrace = time.Hour
	})
	if _, err := r.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	objs := m.Objects()
	if len(objs) != 1 {
		t.Fatalf("%d objects recorded, want 1", len(objs))
	}
	// An orphan: uploaded, never recorded.
	if err := store.Put(ctx, "herald/1/orphan.hto", []byte("x")); err != nil {
		t.Fatal(err)
	}
	// Still needed: kept.
	if st, err := r.Cycle(ctx); err != nil || st.Forgot != 0 {
		t.Fatalf("cycle %+v, %v: forgot an object still needed", st, err)
	}
	// Consumed past it: forgotten and deleted.
	a.needed = 11
	if st, err := r.Cycle(ctx); err != nil || st.Forgot != 1 || len(m.Objects()) != 0 {
		t.Fatalf("cycle %+v, %v: want the object no shard needs forgotten", st, err)
	}
	if _, err := store.ReadRange(ctx, objs[0].Name, 0, 1); err == nil {
		t.Fatal("a forgotten object is still in the store")
	}
	if n, err := r.Sweep(ctx, time.Now()); err != nil || n != 0 {
		t.Fatalf("sweep within the grace deleted %d (%v)", n, err)
	}
	if n, err := r.Sweep(ctx, time.Now().Add(2*time.Hour)); err != nil || n != 1 {
		t.Fatalf("sweep past the grace deleted %d (%v), want the orphan", n, err)
	}
}

// TestReconcilerStoppedMidUpload: a cycle whose context ends while it
// uploads (the node is stopping) records nothing, advances nothing, and
// returns its error.
func TestReconcilerStoppedMidUpload(t *testing.T) {
	store, m := openMem(t), &memManifest{objects: map[string][]Run{}}
	a := &fakeShard{name: "a#1", needed: 1, closed: 100, last: 100}
	r := newTestReconciler(store, m, []Shard{advancingShard{a}}, func(c *ReconcilerConfig) { c.MaxObjectBytes = 100 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, err := r.Cycle(ctx)
	if err == nil || st.Objects != 0 || a.lro != 0 || len(m.Objects()) != 0 {
		t.Fatalf("cycle %+v, %v, LRO %d, %d objects recorded: want an error and nothing done", st, err, a.lro, len(m.Objects()))
	}
}
