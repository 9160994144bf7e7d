package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"herald/internal/consume"
	"herald/internal/controller"
	"herald/internal/host"
)

// reconciler makes the node's shard groups, and the runtimes of the
// registry, match the controller's topics: at the start (start, then
// boot), whenever the controller applies a change (watchController), and
// after a topic command this node proposed (reconcile). It owns the
// order of reconciles, and the boot's progress (booted, opened).
type reconciler struct {
	mu    sync.Mutex // one reconcile at a time
	swept bool       // orphaned shard directories were swept since the start; guarded by mu

	self    uint64
	host    *host.Host
	ctrl    controllerGroup
	changed <-chan struct{} // the controller applied a change
	reg     *registry
	opening *openProgress // of the local shards (see shardOpen)
	rejoin  bool          // the node rejoins its cluster (see membership.rejoining)
	// newMachine is the state machine of a shard's group.
	newMachine func(group uint64, leases *consume.Leases) host.StateMachine
	// entries caches the log entries fetches read, of every shard (see
	// consume.EntryCache).
	entries  *consume.EntryCache
	connect  func([]controller.Member) // connects the transport to the members (membership.connect)
	syncPush func()                    // starts and stops push dispatchers (push.Supervisor.Sync)
	identity *clusterIdentity          // learns the cluster's id as the controller changes
	log      *slog.Logger
	stop     <-chan struct{} // closed when the node stops

	booted atomic.Bool   // every shard the node had at its start has opened, or failed to
	opened chan struct{} // closed when booted is set, or the boot was cut short by stop
}

// start plans the first reconcile, at the node's start, and publishes the
// topics to the request paths: it holds r.mu until boot has opened the
// shards it plans.
func (r *reconciler) start(ctx context.Context) (*reconcilePlan, error) {
	r.mu.Lock()
	p, err := r.plan(ctx)
	if err != nil {
		r.mu.Unlock()
		return nil, err
	}
	return p, nil
}

// watchController reconciles local shard groups whenever the controller
// applies a change (a topic created or deleted by another node's request,
// or by a request this node forwarded).
func (r *reconciler) watchController() {
	// Until the cluster has an id, its controller's leader may change
	// before naming it: look again now and then, not only on changes.
	unnamed := time.NewTicker(5 * time.Second)
	defer unnamed.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.changed:
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if err := r.reconcile(ctx); err != nil {
				r.log.Error("reconcile shards with the controller", "err", err)
			}
			r.identity.learnOrLog(ctx)
			cancel()
		case <-unnamed.C:
			if r.identity.named() {
				unnamed.Stop()
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			r.identity.learnOrLog(ctx)
			cancel()
		}
	}
}

// reconcile makes the local shard groups match the controller's topics:
// it opens the shards of new topics (in parallel, on a bounded temporary
// worker set), removes those of deleted topics with their data, and
// refreshes the topic cache the request paths read.
func (r *reconciler) reconcile(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := r.plan(ctx)
	if err != nil {
		return err
	}
	r.finish(ctx, p)
	return nil
}

// A reconcilePlan is what a reconcile opens and removes.
type reconcilePlan struct {
	wanted   map[uint64]*shardRuntime // every local shard, by group
	toOpen   []host.GroupConfig
	toRemove []*shardRuntime
}

// plan reads the controller's topics and publishes them to the
// request paths at once, with the shards to open marked as opening: they
// answer that they are still opening until finish has opened
// them. The caller holds r.mu until finish returns.
func (r *reconciler) plan(ctx context.Context) (*reconcilePlan, error) {
	var topics []controller.Topic
	var members []controller.Member
	var rebalancing bool
	var move *controller.Move
	var lastSub uint64
	if err := r.ctrl.view(ctx, func(m *controllerMachine) {
		topics, members, rebalancing, lastSub = m.Topics(), m.Members(), m.Rebalancing(), m.LastSubscription()
		if mv, ok := m.CurrentMove(); ok {
			move = &mv
		}
	}); err != nil {
		return nil, fmt.Errorf("read topics from the controller: %w", err)
	}

	p := &reconcilePlan{wanted: make(map[uint64]*shardRuntime)}
	newTopics := make(map[string]*topicRuntime, len(topics))
	r.reg.mu.RLock()
	for _, t := range topics {
		tr := r.reg.topics[t.Name]
		if tr == nil || tr.info.FirstGroup != t.FirstGroup {
			tr = newTopicRuntime(t, r.self, r.entries)
		} else {
			tr = tr.withInfo(t, r.self)
		}
		newTopics[t.Name] = tr
		for _, s := range tr.shards {
			if s.local {
				p.wanted[s.group] = s
			}
		}
	}
	for id, s := range p.wanted {
		if _, ok := r.reg.shards[id]; !ok {
			// A new runtime (a new topic's, or a copy for a replica moved
			// here): no request path reads it yet.
			s.open = r.opening.start()
			// A replica added by a move starts from the voters the group
			// was created with, as the first replicas did (see
			// controller.Topic.Bootstrap).
			voters := newTopics[s.topic].info.BootstrapVoters(s.index)
			p.toOpen = append(p.toOpen, withRepair(host.GroupConfig{ID: id, Name: s.name, Peers: voters,
				Campaign: s.replicas[0] == r.self && slices.Contains(voters, r.self), StateMachine: r.newMachine(id, s.leases)}, r.rejoin))
		}
	}
	for id, s := range r.reg.shards {
		if _, ok := p.wanted[id]; !ok {
			p.toRemove = append(p.toRemove, s)
		}
	}
	r.reg.mu.RUnlock()

	r.reg.mu.Lock()
	// A shard already open keeps its runtime (wanted holds the same pointer);
	// a new id means a new topic, whose runtime is new.
	for id, s := range p.wanted {
		r.reg.shards[id] = s
	}
	r.reg.topics = newTopics
	r.reg.members, r.reg.rebalancing, r.reg.move = members, rebalancing, move
	r.reg.lastSubscription = lastSub
	r.reg.mu.Unlock()
	r.connect(members)
	return p, nil
}

// finish opens the shards plan published as opening,
// each serving as soon as it has opened, then removes the shards of
// deleted topics.
func (r *reconciler) finish(ctx context.Context, p *reconcilePlan) {
	r.host.AddGroupsFunc(ctx, p.toOpen, func(id uint64, err error) {
		s := p.wanted[id]
		if err != nil {
			r.log.Error("shard cannot be opened; it stays unavailable while the rest of the node serves", "shard", s.name, "err", err)
		}
		s.open.finish(err)
	})
	for _, s := range p.toRemove {
		// A shard that could not be opened is not hosted; the sweep below
		// removes its data.
		if s.openErr() == nil {
			if err := r.host.RemoveGroup(s.group, true); err != nil && !errors.Is(err, host.ErrUnknownGroup) {
				r.log.Error("remove shard of deleted topic", "shard", s.name, "err", err)
			}
		}
	}
	r.reg.mu.Lock()
	for _, s := range p.toRemove {
		delete(r.reg.shards, s.group)
		s.open.forget()
	}
	r.reg.mu.Unlock()
	for _, s := range p.toRemove {
		// Of a deleted topic, or a replica moved off this node: nothing
		// reads them here any more.
		s.leases.DropEntries()
	}
	// Deleted shards that were open lost their data with RemoveGroup; the
	// sweep (a directory listing) is for those that could not be opened,
	// and once per start for what a crash left between deleting a topic
	// and its data.
	if !r.swept || slices.ContainsFunc(p.toRemove, func(s *shardRuntime) bool { return s.openErr() != nil }) {
		if err := r.host.SweepGroupDirs(r.reg.hasShard); err != nil {
			r.log.Error("remove the data of deleted shards", "err", err)
		} else {
			r.swept = true
		}
	}
	select {
	case <-r.stop:
	default:
		r.syncPush()
	}
}

// boot opens the shards the node held at its start, which start planned,
// and then says the node is ready. It releases r.mu, which start took.
// Closing stop cuts it short.
func (r *reconciler) boot(plan *reconcilePlan) {
	defer close(r.opened)
	defer r.mu.Unlock()
	ctx, cancel := untilClosed(r.stop)
	defer cancel()
	start := time.Now()
	r.finish(ctx, plan)
	if ctx.Err() == nil {
		// Every group the node knew of at its start has taken what the
		// write-ahead log held for it; the host replays the rest.
		r.host.Booted()
		r.booted.Store(true)
		if len(plan.toOpen) > 0 {
			r.log.Info("every shard has opened", "shards", len(plan.toOpen), "took", time.Since(start).Round(time.Millisecond))
			// Reading every shard's files left garbage many times the
			// size of what the shards keep; hand it back to the system
			// now rather than as the scavenger gets round to it.
			debug.FreeOSMemory()
		}
	}
}

// withRepair lets a replicated group be rebuilt from its peers when its
// files are damaged, and, on a node that rejoins its cluster after losing
// its data directory (rejoin, see membership.rejoining), creates it as a
// rebuilt replica.
func withRepair(gc host.GroupConfig, rejoin bool) host.GroupConfig {
	gc.RepairFromPeers = len(gc.Peers) > 1
	gc.Rejoin = rejoin
	return gc
}

// untilClosed returns a context that ends when stop is closed or cancel
// is called; cancel also waits for the goroutine that watches stop.
func untilClosed(stop <-chan struct{}) (_ context.Context, cancel func()) {
	ctx, cancelCtx := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-stop:
			cancelCtx()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancelCtx()
		<-done
	}
}
