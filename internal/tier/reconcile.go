package tier

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sync/errgroup"

	"herald/internal/backoff"
)

// A Shard is a shard this node leads, as the reconciler tiers it. The
// node implements it over its Raft host.
type Shard interface {
	// Name is the shard's group name, as the manifest records it.
	Name() string
	// Progress says where the shard stands, as this node has applied it.
	Progress(ctx context.Context) (Progress, error)
	// Entries returns the entries of the shard's local log from lo to hi
	// inclusive, at most maxBytes of them but at least one.
	Entries(lo, hi, maxBytes uint64) ([]pb.Entry, error)
	// Advance replicates the shard's new LRO; a lower one than it holds
	// changes nothing.
	Advance(ctx context.Context, lro uint64) error
}

// Progress is where a shard stands.
type Progress struct {
	// LRO is the shard's last reconciled index: every entry at or below
	// it that the shard still needs is recorded in the manifest.
	LRO uint64
	// Needed is the lowest index the shard still needs: entries below it
	// are delivered and freed, and are not uploaded.
	Needed uint64
	// Closed is the last applied index of the local log in a segment the
	// log no longer writes: what a cycle may upload.
	Closed uint64
}

// The Manifest records uploaded objects; the node keeps it in the
// controller's Raft group, so every node reads it and it survives any
// one of them.
type Manifest interface {
	// TieredThrough is the highest index of shard recorded, 0 if none.
	TieredThrough(shard string) uint64
	// Record records an uploaded object and its runs; recording it again
	// with the same runs changes nothing.
	Record(ctx context.Context, object string, runs []Run) error
	// Forget drops an object; forgetting one not recorded changes nothing.
	Forget(ctx context.Context, object string) error
	// Objects lists the recorded objects.
	Objects() []Object
}

// An Object is an object the manifest records.
type Object struct {
	Name string
	Runs []Run
}

// ReconcilerConfig configures a Reconciler. Zero values take the defaults
// shown.
type ReconcilerConfig struct {
	Store    *Store   // required
	Manifest Manifest // required
	// Shards returns the shards this node leads and tiers, at the start
	// of each cycle.
	Shards func() []Shard
	// Gone says whether a shard no longer exists (its topic was
	// deleted): its runs are freed. nil: none is.
	Gone func(shard string) bool
	// Node names this node's objects: NODE/TIME-RANDOM.hto under Prefix.
	Node   uint64
	Prefix string // "herald/"
	// Parallelism bounds the LRO advances in flight at once (32); 1
	// advances them one by one.
	Parallelism int
	Interval    time.Duration // 10s between the starts of cycles
	// MaxObjectBytes bounds one object (16 MiB); MaxCycleBytes what one
	// cycle uploads (256 MiB), so that LROs advance regularly however
	// large the backlog.
	MaxObjectBytes int64
	MaxCycleBytes  int64
	// SweepGrace is how old an object the manifest does not record must
	// be for the sweeper to delete it as an orphan (1h): one younger may
	// be another node's, uploaded and not yet recorded.
	SweepGrace time.Duration
	// SweepEvery is how many cycles pass between sweeps (30).
	SweepEvery int
	// UploadTimeout bounds one attempt to upload an object (2m).
	UploadTimeout time.Duration
	Metrics       *Metrics     // nil: none
	Logger        *slog.Logger // slog.Default()
	// AfterStep, if set, is called after each step that changes
	// something outside the node: "upload" (an object is in the store),
	// "record" (it is in the manifest) and "advance" (the LROs moved). A
	// hook for the tests that kill the process between two steps.
	AfterStep func(step string)
}

func (c *ReconcilerConfig) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = "herald/"
	}
	if c.Parallelism <= 0 {
		c.Parallelism = 32
	}
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.MaxObjectBytes <= 0 {
		c.MaxObjectBytes = 16 << 20
	}
	if c.MaxCycleBytes <= 0 {
		c.MaxCycleBytes = 256 << 20
	}
	if c.SweepGrace <= 0 {
		c.SweepGrace = time.Hour
	}
	if c.SweepEvery <= 0 {
		c.SweepEvery = 30
	}
	if c.UploadTimeout <= 0 {
		c.UploadTimeout = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// A Reconciler tiers the logs of the shards a node leads: each cycle it
// packs the entries they still need from their closed segments into
// objects, uploads each, records it in the manifest, and then advances
// every shard's LRO, many at once. Upload first, record second, advance
// last: a crash between any two leaves at most an object the manifest
// does not know (the sweeper deletes it) or a recorded range the LRO has
// not reached (the next cycle, on this node or a new leader's, advances
// to it without uploading again).
type Reconciler struct {
	cfg    ReconcilerConfig
	retry  backoff.Policy
	cycles int

	mu      sync.Mutex
	lastErr error // the last cycle's or failed attempt's, nil if it went well
}

// NewReconciler returns a reconciler; Run runs its cycles.
func NewReconciler(cfg ReconcilerConfig) *Reconciler {
	cfg.setDefaults()
	return &Reconciler{cfg: cfg, retry: backoff.Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2}}
}

// Run runs a cycle at once, the next after a random part of Interval,
// and then one every Interval, until ctx ends. The random start keeps
// the reconcilers of nodes started together out of step: in step, every
// node advances its LROs at the same moment, and each node's advances,
// round trips to the other nodes, wait behind theirs (bench tier: on one
// 2-core machine, 1,000 shards on three nodes in step took 95 to 180 ms
// per LRO phase at any parallelism from 8 to 128, the CPU all busy).
func (r *Reconciler) Run(ctx context.Context) {
	cycle := func() {
		if _, err := r.Cycle(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("tiering cycle failed; the next one tries again", "err", err)
		}
	}
	cycle()
	select {
	case <-ctx.Done():
		return
	case <-time.After(mrand.N(r.cfg.Interval)):
	}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		cycle()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// CycleStats tell what one cycle did.
type CycleStats struct {
	Shards   int           // shards looked at
	Objects  int           // objects uploaded and recorded
	Bytes    int64         // bytes uploaded
	Advanced int           // LROs advanced
	LROPhase time.Duration // the time the advances took together
	Forgot   int           // objects no shard needs any more, forgotten and deleted
	Swept    int           // orphan objects deleted
}

// plan is what a cycle does for one shard.
type plan struct {
	shard    Shard
	progress Progress
	from     uint64 // the first index to upload
	to       uint64 // the last index to upload, if from <= to
	lro      uint64 // the LRO to advance to once uploaded (and recorded)
}

// Cycle runs one cycle.
func (r *Reconciler) Cycle(ctx context.Context) (CycleStats, error) {
	start := time.Now()
	var st CycleStats
	shards := r.cfg.Shards()
	st.Shards = len(shards)
	plans, errs := r.plan(ctx, shards)
	uploaded, err := r.upload(ctx, plans, &st)
	errs = append(errs, err)
	st.Advanced, st.LROPhase, err = r.advance(ctx, uploaded)
	errs = append(errs, err)
	var forgot int
	forgot, err = r.collect(ctx, plans)
	st.Forgot = forgot
	errs = append(errs, err)
	if r.cycles++; r.cycles%r.cfg.SweepEvery == 0 {
		st.Swept, err = r.Sweep(ctx, time.Now())
		errs = append(errs, err)
	}
	took := time.Since(start)
	r.cfg.Metrics.cycle(plans, took)
	err = errors.Join(errs...)
	// The LRO phase histogram gives a mean, not a median: this line gives
	// each cycle's figures, for herald bench tier and for an operator who
	// wants them; the cycle's error, if any, is logged as a warning.
	r.cfg.Logger.Debug("tiering cycle", "shards", st.Shards, "objects", st.Objects, "bytes", st.Bytes,
		"advanced", st.Advanced, "lro_phase", st.LROPhase, "took", took, "forgot", st.Forgot, "swept", st.Swept, "failed", err != nil)
	r.setErr(err)
	return st, err
}

// setErr records the error LastError reports: a cycle's at its end, and
// a failed attempt's at once, so that a store down for hours shows while
// the cycle waits for it.
func (r *Reconciler) setErr(err error) {
	r.mu.Lock()
	r.lastErr = err
	r.mu.Unlock()
}

// LastError returns the error of the last cycle, nil if it went well:
// for the stats, where an operator sees that tiering is stuck (the
// store's credentials were revoked, say) before the disk fills.
func (r *Reconciler) LastError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

func (r *Reconciler) after(step string) {
	if r.cfg.AfterStep != nil {
		r.cfg.AfterStep(step)
	}
}

// plan reads where each shard stands and decides what to upload.
func (r *Reconciler) plan(ctx context.Context, shards []Shard) ([]plan, []error) {
	var plans []plan
	var errs []error
	for _, s := range shards {
		p, err := s.Progress(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %s: %w", s.Name(), err))
			continue
		}
		pl := plan{shard: s, progress: p, from: max(p.LRO+1, p.Needed), lro: p.LRO}
		// A range recorded by a cycle that did not live to advance the
		// LRO is not uploaded again.
		if through := r.cfg.Manifest.TieredThrough(s.Name()); through >= pl.from {
			pl.from, pl.lro = through+1, max(pl.lro, through)
		}
		pl.to = p.Closed
		if pl.from > pl.to {
			// Nothing the shard needs is in closed segments beyond what is
			// recorded: what lies below Closed is freed or recorded.
			pl.lro = max(pl.lro, p.Closed)
		}
		plans = append(plans, pl)
	}
	return plans, errs
}

// upload packs the plans' ranges into objects, uploads and records them,
// and returns the plans whose LRO moved: to the end of their ranges, or
// as far as the cycle's budget (or a failure) let the uploads go.
func (r *Reconciler) upload(ctx context.Context, plans []plan, st *CycleStats) ([]plan, error) {
	b := NewBuilder()
	var inObject []int // the plans with a run in b, and the last index each has there
	var lastIn []uint64
	flush := func() error {
		if len(inObject) == 0 {
			return nil
		}
		// The object is taken whether or not it lands: one that fails
		// (the cycle is being stopped) is made again by a later cycle.
		data, runs := b.Finish()
		in, last := inObject, lastIn
		b, inObject, lastIn = NewBuilder(), nil, nil
		name, err := r.put(ctx, data)
		if err != nil {
			return err
		}
		r.after("upload")
		if err := r.record(ctx, name, runs); err != nil {
			return err
		}
		r.after("record")
		st.Objects++
		st.Bytes += int64(len(data))
		for i, p := range in {
			plans[p].lro = max(plans[p].lro, last[i])
		}
		return nil
	}
	var err error
	budget := r.cfg.MaxCycleBytes
upload:
	for i := range plans {
		p := &plans[i]
		for next := p.from; next <= p.to; {
			if budget <= 0 {
				break upload
			}
			room := max(1, min(r.cfg.MaxObjectBytes-b.Len(), budget, MaxRunBytes))
			ents, rerr := p.shard.Entries(next, p.to, uint64(room))
			if rerr != nil {
				err = fmt.Errorf("shard %s: %w", p.shard.Name(), rerr)
				break // this shard waits for the next cycle; the others go on
			}
			if aerr := b.Add(p.shard.Name(), ents); aerr != nil {
				err = fmt.Errorf("shard %s: %w", p.shard.Name(), aerr)
				break
			}
			last := ents[len(ents)-1].Index
			if n := len(inObject); n > 0 && inObject[n-1] == i {
				lastIn[n-1] = last
			} else {
				inObject, lastIn = append(inObject, i), append(lastIn, last)
			}
			budget -= runBytes(ents)
			next = last + 1
			if b.Len() >= r.cfg.MaxObjectBytes {
				if err = flush(); err != nil {
					break upload
				}
			}
		}
	}
	if err == nil || len(inObject) > 0 {
		err = errors.Join(err, flush())
	}
	var moved []plan
	for _, p := range plans {
		if p.lro > p.progress.LRO {
			moved = append(moved, p)
		}
	}
	return moved, err
}

// MaxRunBytes bounds the entries of one run: a shard's range in an object
// is cut into runs of about this much. The reader fetches and caches
// whole runs, and a drain of a tiered backlog hands out runs of many
// keys' events, so it reads a stretch of log megabytes long at once; with
// a run per shard per object (up to MaxObjectBytes) a few such stretches
// filled the read cache and runs were fetched again and again (a backlog
// of 205 MB read 1.8 to 2.9 GB back from the store; bench-tier-io.sh
// consume). Smaller runs cache what the drain reads, and its first event
// waits for a megabyte, not sixteen.
const MaxRunBytes = 1 << 20

func runBytes(ents []pb.Entry) int64 {
	var n int64
	for _, e := range ents {
		n += int64(len(e.Data)) + 32
	}
	return n
}

// put uploads an object under a new name, retrying until it succeeds or
// ctx ends: a store that is down delays tiering, and nothing else.
func (r *Reconciler) put(ctx context.Context, data []byte) (string, error) {
	name, err := r.objectName()
	if err != nil {
		return "", err
	}
	b := backoff.New(r.retry)
	for {
		start := time.Now()
		// A store that holds a request open forever (a dead connection)
		// must fail the attempt, not the whole of tiering.
		actx, cancel := context.WithTimeout(ctx, r.cfg.UploadTimeout)
		err := r.cfg.Store.Put(actx, name, data)
		cancel()
		if err == nil {
			r.cfg.Metrics.uploaded(len(data), time.Since(start))
			return name, nil
		}
		r.cfg.Metrics.failed("upload")
		r.setErr(fmt.Errorf("upload %s (retrying): %w", name, err)) // err names the store
		r.cfg.Logger.Warn("tiering: upload failed; retrying", "object", name, "store", r.cfg.Store.URL(), "err", err)
		if serr := backoff.Sleep(ctx, b.Next()); serr != nil {
			return "", fmt.Errorf("upload %s: %w", name, errors.Join(err, serr))
		}
	}
}

// record records an uploaded object in the manifest, retrying like put.
func (r *Reconciler) record(ctx context.Context, name string, runs []Run) error {
	b := backoff.New(r.retry)
	for {
		err := r.cfg.Manifest.Record(ctx, name, runs)
		if err == nil {
			return nil
		}
		r.cfg.Metrics.failed("record")
		r.setErr(fmt.Errorf("record %s in the manifest (retrying): %w", name, err))
		r.cfg.Logger.Warn("tiering: recording an object in the manifest failed; retrying", "object", name, "err", err)
		if serr := backoff.Sleep(ctx, b.Next()); serr != nil {
			return fmt.Errorf("record %s: %w", name, errors.Join(err, serr))
		}
	}
}

// objectName returns a name no other upload has: this node's id, the
// time and random bits.
func (r *Reconciler) objectName() (string, error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", fmt.Errorf("name an object: %w", err)
	}
	return fmt.Sprintf("%s%d/%016x-%s.hto", r.cfg.Prefix, r.cfg.Node, time.Now().UnixNano(), hex.EncodeToString(rnd[:])), nil
}

// advance replicates the plans' new LROs, Parallelism at a time: each is
// a round trip through its shard's Raft group, independent of the
// others.
func (r *Reconciler) advance(ctx context.Context, plans []plan) (int, time.Duration, error) {
	if len(plans) == 0 {
		return 0, 0, nil
	}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.cfg.Parallelism)
	var mu sync.Mutex
	var errs []error
	advanced := 0
	for _, p := range plans {
		g.Go(func() error {
			err := p.shard.Advance(gctx, p.lro)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("advance the LRO of %s to %d: %w", p.shard.Name(), p.lro, err))
			} else {
				advanced++
			}
			return nil // one shard's failure does not stop the others
		})
	}
	_ = g.Wait()
	phase := time.Since(start)
	r.cfg.Metrics.lroPhase(phase)
	r.after("advance")
	return advanced, phase, errors.Join(errs...)
}

// collect forgets and deletes the recorded objects that no shard needs any
// more: each of whose runs is of a shard this node leads and lies wholly
// below what that shard needs. An object with a run of a shard led
// elsewhere waits until one node leads all of its shards' (objects are
// made of one node's shards, so that is the rule).
func (r *Reconciler) collect(ctx context.Context, plans []plan) (int, error) {
	needed := make(map[string]uint64, len(plans))
	for _, p := range plans {
		needed[p.shard.Name()] = p.progress.Needed
	}
	n := 0
	var errs []error
	for _, o := range r.cfg.Manifest.Objects() {
		if !r.freed(o.Runs, needed) {
			continue
		}
		// Forget first: an object deleted while recorded would be a run
		// a reader could look up and not find; one forgotten and not yet
		// deleted is an orphan the sweeper finds.
		if err := r.cfg.Manifest.Forget(ctx, o.Name); err != nil {
			errs = append(errs, fmt.Errorf("forget %s: %w", o.Name, err))
			continue
		}
		if err := r.cfg.Store.Delete(ctx, o.Name); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", o.Name, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// freed reports whether no shard needs any of runs: each is of a shard
// that is gone, or lies below what its shard, led here, needs.
func (r *Reconciler) freed(runs []Run, needed map[string]uint64) bool {
	for _, run := range runs {
		if n, led := needed[run.Shard]; led {
			if run.Last >= n {
				return false
			}
			continue
		}
		// Asked only of shards not led here: Gone looks at the controller.
		if r.cfg.Gone == nil || !r.cfg.Gone(run.Shard) {
			return false
		}
	}
	return true
}

// Sweep deletes the objects under Prefix that the manifest does not
// record and that are older than SweepGrace at now: uploads
// whose recording a crash cut off, and objects forgotten but not
// deleted. It returns how many it deleted.
func (r *Reconciler) Sweep(ctx context.Context, now time.Time) (int, error) {
	recorded := make(map[string]bool)
	for _, o := range r.cfg.Manifest.Objects() {
		recorded[o.Name] = true
	}
	objs, err := r.cfg.Store.List(ctx, r.cfg.Prefix)
	if err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	n := 0
	var errs []error
	for _, o := range objs {
		if recorded[o.Name] || now.Sub(o.ModTime) < r.cfg.SweepGrace {
			continue
		}
		if err := r.cfg.Store.Delete(ctx, o.Name); err != nil {
			errs = append(errs, fmt.Errorf("sweep %s: %w", o.Name, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
