package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/controller"
	"herald/internal/host"
	"herald/internal/shard"
	"herald/internal/tier"
	"herald/internal/topic"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// TierConfig configures tiering to object storage: off unless URL is set.
type TierConfig struct {
	// URL is the object store (tier.OpenStore): s3://, file:// or mem://.
	URL string
	// Parallelism bounds the LRO advances in flight at once (32).
	Parallelism int
	// Interval is the time between the starts of cycles (10s).
	Interval time.Duration
	// LocalRetention is how many bytes of each shard's newest log stay
	// on the local disk, for topics whose local_retention_bytes is 0
	// (64 MiB).
	LocalRetention int64
	// CacheBytes bounds the entries read back from the store kept in
	// memory (64 MiB).
	CacheBytes int64
	// SweepGrace is how old an object the manifest does not record must
	// be to be swept as an orphan (1h).
	SweepGrace time.Duration
	// AfterStep is tier.ReconcilerConfig.AfterStep: a hook for tests.
	AfterStep func(step string)
}

// DefaultTierConfig returns tiering's defaults (with no URL: off).
func DefaultTierConfig() TierConfig {
	return TierConfig{Parallelism: 32, Interval: 10 * time.Second, LocalRetention: 64 << 20, CacheBytes: 64 << 20, SweepGrace: time.Hour}
}

func (c *TierConfig) setDefaults() {
	d := DefaultTierConfig()
	if c.Parallelism <= 0 {
		c.Parallelism = d.Parallelism
	}
	if c.Interval <= 0 {
		c.Interval = d.Interval
	}
	if c.LocalRetention <= 0 {
		c.LocalRetention = d.LocalRetention
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = d.CacheBytes
	}
	if c.SweepGrace <= 0 {
		c.SweepGrace = d.SweepGrace
	}
}

// tiering is the node's side of tiering: the object store, the reads
// from it (the host's Archive), the manifest in the controller, and the
// reconciler of the shards this node leads. Entries are recorded under a
// shard's tier key, its name and group id: a topic deleted and made
// again has new groups, whose entries must never be confused with the
// old ones'.
type tiering struct {
	cfg     TierConfig
	store   *tier.Store
	reader  *tier.Reader
	metrics *tier.Metrics    // nil without a registerer
	rec     *tier.Reconciler // set before the node serves
	n       *Node            // set once the node exists

	mu   sync.Mutex
	last map[uint64]tierRun // per group, the run read last: reads go in order
}

// tierRun is a run the manifest records, with its object.
type tierRun struct {
	object string
	run    tier.Run
}

// openTiering opens the object store of cfg, checking that it can be
// written: wrong credentials are an error at start, not at the first
// upload. It returns nil when tiering is off.
func openTiering(ctx context.Context, cfg TierConfig, reg prometheus.Registerer) (*tiering, error) {
	if cfg.URL == "" {
		return nil, nil
	}
	cfg.setDefaults()
	store, err := tier.OpenStore(ctx, cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("--tier-url: %w", err)
	}
	t := &tiering{cfg: cfg, store: store, reader: tier.NewReader(store, cfg.CacheBytes), last: make(map[uint64]tierRun)}
	if reg != nil {
		if t.metrics, err = tier.NewMetrics(reg, t.reader); err != nil {
			t.close()
			return nil, err
		}
	}
	return t, nil
}

// tierKey is the name the manifest records a shard's entries under.
func tierKey(name string, group uint64) string { return name + "#" + strconv.FormatUint(group, 10) }

// splitTierKey returns the shard name and group id of a tier key.
func splitTierKey(key string) (name string, group uint64, ok bool) {
	i := strings.LastIndexByte(key, '#')
	if i < 0 {
		return "", 0, false
	}
	g, err := strconv.ParseUint(key[i+1:], 10, 64)
	return key[:i], g, err == nil
}

// Entry reads the entry at index of group from the object store
// (host.Archive): it finds the run holding it in the manifest and reads
// the run through the cache.
func (t *tiering) Entry(ctx context.Context, group, index uint64) (pb.Entry, error) {
	r, err := t.runAt(ctx, group, index)
	if err != nil {
		return pb.Entry{}, err
	}
	ents, err := t.reader.Read(ctx, r.object, r.run)
	var corrupt *tier.CorruptError
	if errors.As(err, &corrupt) {
		return t.fromReplica(ctx, group, index, err)
	}
	if err != nil {
		return pb.Entry{}, err
	}
	i := int(index - r.run.First)
	if i < 0 || i >= len(ents) || ents[i].Index != index {
		return pb.Entry{}, &tier.CorruptError{Object: r.object, Offset: r.run.Offset,
			Reason: fmt.Sprintf("the run recorded for entries %d to %d of %s does not hold entry %d", r.run.First, r.run.Last, r.run.Shard, index)}
	}
	return ents[i], nil
}

// fromReplica reads the entry at index of group from the local log of
// another replica, for an object that failed its checksum (damaged): the
// other replicas delete their local segments by their own retention, and
// one may still hold it. It returns damaged, naming the object, if none
// does.
func (t *tiering) fromReplica(ctx context.Context, group, index uint64, damaged error) (pb.Entry, error) {
	s, ok := t.n.reg.shard(group)
	if !ok || t.n.cfg.Transport == nil {
		return pb.Entry{}, damaged
	}
	errs := []error{damaged}
	for _, peer := range s.replicas {
		if peer == t.n.cfg.NodeID {
			continue
		}
		resp, err := t.n.cfg.Transport.Entries(ctx, peer, &clusterv1.EntriesRequest{Group: group, Lo: index, Hi: index + 1, MaxBytes: 1})
		var ents []pb.Entry
		if err == nil {
			ents, err = host.DecodeEntries(resp.GetEntries())
		}
		if err == nil && len(ents) > 0 && ents[0].Index == index {
			t.n.log.Warn("a tiered object failed its checksum; the entry was read from another replica's log", "shard", s.name, "index", index, "replica", peer, "err", damaged)
			return ents[0], nil
		}
		if err == nil {
			err = fmt.Errorf("replica %d does not hold it", peer)
		}
		errs = append(errs, fmt.Errorf("node %d: %w", peer, err))
	}
	return pb.Entry{}, errors.Join(errs...)
}

// runAt returns the recorded run that holds entry index of group.
func (t *tiering) runAt(ctx context.Context, group, index uint64) (tierRun, error) {
	t.mu.Lock()
	r, ok := t.last[group]
	t.mu.Unlock()
	if ok && r.run.First <= index && index <= r.run.Last {
		return r, nil
	}
	var ref controller.TierRunRef
	var found bool
	err := t.n.ctrlGroup.view(ctx, func(m *controllerMachine) { ref, found = m.TierRunAtGroup(group, index) })
	if err != nil {
		return tierRun{}, err
	}
	if !found {
		name := fmt.Sprintf("of group %d", group)
		if s, ok := t.n.reg.shard(group); ok {
			name = s.name
		}
		return tierRun{}, fmt.Errorf("entry %d of shard %s is neither in its local log nor recorded in the tier manifest; restore the shard from a replica", index, name)
	}
	r = tierRun{object: ref.Object, run: runOfManifest(ref.Run)}
	t.mu.Lock()
	t.last[group] = r
	t.mu.Unlock()
	// Readers go on in order: read the shard's next run ahead, once per
	// run they move to.
	if next, ok := t.nextRun(ctx, group, r); ok {
		t.reader.Prefetch(next.object, next.run)
	}
	return r, nil
}

// nextRun returns the run recorded after r for r's shard.
func (t *tiering) nextRun(ctx context.Context, group uint64, r tierRun) (tierRun, bool) {
	var ref controller.TierRunRef
	var found bool
	err := t.n.ctrlGroup.view(ctx, func(m *controllerMachine) { ref, found = m.TierRunAtGroup(group, r.run.Last+1) })
	return tierRun{object: ref.Object, run: runOfManifest(ref.Run)}, err == nil && found
}

// runOfManifest is a run the manifest records, as package tier names
// shards: by tier key.
func runOfManifest(r controller.TierRun) tier.Run {
	return tier.Run{Shard: tierKey(r.Shard, r.Group), First: r.First, Last: r.Last, Offset: r.Offset, Length: r.Length, CRC: r.CRC}
}

// manifestRuns are runs named by tier key as the manifest records them.
func manifestRuns(runs []tier.Run) ([]controller.TierRun, error) {
	out := make([]controller.TierRun, len(runs))
	for i, r := range runs {
		name, group, ok := splitTierKey(r.Shard)
		if !ok {
			return nil, fmt.Errorf("run of %q: not a tier key", r.Shard)
		}
		out[i] = controller.TierRun{Shard: name, Group: group, First: r.First, Last: r.Last, Offset: r.Offset, Length: r.Length, CRC: r.CRC}
	}
	return out, nil
}

// localRetention is how many bytes of group's newest log stay local.
func (t *tiering) localRetention(group uint64) int64 {
	if s, ok := t.n.reg.shard(group); ok {
		if tr, err := t.n.reg.lookup(s.topic); err == nil && tr.info.Attributes.LocalRetentionBytes > 0 {
			return tr.info.Attributes.LocalRetentionBytes
		}
	}
	return t.cfg.LocalRetention
}

// run runs the reconciler until stop.
func (t *tiering) run(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	})
	t.rec.Run(ctx)
}

// start makes the reconciler of node n.
func (t *tiering) start(n *Node) {
	t.n = n
	t.rec = tier.NewReconciler(tier.ReconcilerConfig{
		Store: t.store, Manifest: tierManifest{n}, Shards: t.ledShards, Gone: t.gone,
		Node: n.cfg.NodeID, Parallelism: t.cfg.Parallelism, Interval: t.cfg.Interval,
		SweepGrace: t.cfg.SweepGrace, Metrics: t.metrics, Logger: n.log, AfterStep: t.cfg.AfterStep,
	})
}

// ledShards returns the shards this node leads, as the reconciler tiers
// them.
func (t *tiering) ledShards() []tier.Shard {
	var out []tier.Shard
	for _, s := range t.n.reg.localShards() {
		if t.n.relay.leads(s) {
			out = append(out, tierShard{t.n, s})
		}
	}
	return out
}

// gone says whether the shard of a tier key no longer exists: its topic
// was deleted, and maybe made again with new groups.
func (t *tiering) gone(key string) bool {
	name, group, ok := splitTierKey(key)
	if !ok {
		return false
	}
	topicName, i, err := topic.ParseShardName(name)
	if err != nil {
		return false
	}
	gone := false
	err = t.n.ctrlGroup.view(context.Background(), func(m *controllerMachine) {
		tp, ok := m.Topic(topicName)
		gone = !ok || i >= tp.Attributes.Shards || tp.Group(i) != group
	})
	return err == nil && gone
}

// close stops the reads and closes the store.
func (t *tiering) close() error {
	t.reader.Close()
	return t.store.Close()
}

// tierShard is a shard this node leads, as the reconciler sees it.
type tierShard struct {
	n *Node
	s *shardRuntime
}

func (s tierShard) Name() string { return tierKey(s.s.name, s.s.group) }

func (s tierShard) Progress(ctx context.Context) (tier.Progress, error) {
	var p tier.Progress
	var applied uint64
	err := s.n.host.View(ctx, s.s.group, func(sm host.StateMachine, idx uint64) {
		m := machineOf(sm)
		p.LRO, p.Needed, applied = m.LRO(), m.CompactIndex(), idx
	})
	if err != nil {
		return p, hostError(s.s.name, err)
	}
	b, err := s.n.host.LogBounds(s.s.group)
	if err != nil {
		return p, hostError(s.s.name, err)
	}
	p.Closed = min(b.ClosedThrough, applied)
	return p, nil
}

func (s tierShard) Entries(lo, hi, maxBytes uint64) ([]pb.Entry, error) {
	ents, err := s.n.host.Entries(s.s.group, lo, hi+1, maxBytes)
	if err == nil && len(ents) == 0 {
		err = fmt.Errorf("no entries from %d", lo)
	}
	return ents, err
}

func (s tierShard) Advance(ctx context.Context, lro uint64) error {
	_, err := s.n.proposeAsLeader(ctx, s.s, &shard.Command{Op: shard.OpTierAdvance, From: lro})
	return err
}

// tierManifest is the manifest in the controller (tier.Manifest).
type tierManifest struct{ n *Node }

func (m tierManifest) TieredThrough(key string) uint64 {
	_, group, ok := splitTierKey(key)
	if !ok {
		return 0
	}
	var through uint64
	_ = m.n.ctrlGroup.view(context.Background(), func(c *controllerMachine) { through = c.TieredThroughGroup(group) })
	return through
}

func (m tierManifest) Record(ctx context.Context, object string, runs []tier.Run) error {
	mruns, err := manifestRuns(runs)
	if err != nil {
		return err
	}
	res, err := m.n.ctrlGroup.propose(ctx, controller.Command{Op: controller.OpRecordTierObject, Object: object, Runs: mruns})
	if err == nil {
		err = res.Err
	}
	return err
}

func (m tierManifest) Forget(ctx context.Context, object string) error {
	res, err := m.n.ctrlGroup.propose(ctx, controller.Command{Op: controller.OpForgetTierObject, Object: object})
	if err == nil {
		err = res.Err
	}
	return err
}

func (m tierManifest) Objects() []tier.Object {
	var objs []controller.TierObject
	_ = m.n.ctrlGroup.view(context.Background(), func(c *controllerMachine) { objs = c.TierObjects() })
	out := make([]tier.Object, len(objs))
	for i, o := range objs {
		out[i] = tier.Object{Name: o.Name}
		for _, r := range o.Runs {
			out[i].Runs = append(out[i].Runs, runOfManifest(r))
		}
	}
	return out
}
