// Package node runs one herald node: a Raft host carrying the controller
// group (topics and their attributes) and the shard groups of every topic,
// and the operations the API offers on top of them — topic management,
// two-phase publish, pull consumption, dead letters, statistics and the
// cluster's membership. It turns API requests into shard and controller
// commands and routes them to the right group, forwarding to another node
// what only that node can do; its only durable state of its own is the
// boot epoch (see bootEpochFile).
//
// Node is the façade the API calls, and its lifecycle (Open, Close). Each
// internal job is a part that owns its state and takes narrow
// dependencies, not the Node:
//
//   - registry: the topics' and shards' runtimes and the members, as the
//     controller last said;
//   - reconciler: matches the shard groups and the registry to the
//     controller's topics, at the boot and on every change;
//   - relay: runs the calls about a shard where they must run — on its
//     leader for pull leases, through a replica for a node holding none —
//     and serves them, one hop at most;
//   - membership: the calls nodes make on each other about the cluster
//     (status, join, started), and the connections to new members;
//   - liveness: pings the members, answers their pings, tells the host
//     of a member gone, and says whom a starting node waits for;
//   - clusterIdentity: whose the data directory is, checked against the
//     peers and recorded once the controller names the cluster;
//   - reservationExpiry: expires the reservations of the shards it leads;
//   - retentionTrim: frees the retained events of the shards it leads
//     once their topic's retention has passed;
//   - controllerGroup: the controller's group as the parts reach it.
//
// rpcHandlers puts the parts' rpcs together for the transport. The jobs
// with a logic of their own and no need of the node's types are packages
// it drives through small interfaces its runtimes implement: balance
// decides the balancer's changes (balancer.go carries them out), push
// supervises the push dispatchers, and consume holds the pull leases and
// the local reads under them.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/alert"
	"herald/internal/consume"
	"herald/internal/controller"
	"herald/internal/datadir"
	"herald/internal/delivery"
	"herald/internal/endpoint"
	"herald/internal/host"
	"herald/internal/push"
	"herald/internal/shard"
	"herald/internal/transport"
	"herald/internal/vfs"
)

// Config configures a node. Zero values take DefaultConfig's.
type Config struct {
	DataDir string // required
	NodeID  uint64
	// Members are the ids of every node of the cluster, this one
	// included. None means a cluster of this node alone.
	Members []uint64
	// Addresses are the members' addresses (host:port) as --peers gives
	// them, for the cluster's status; nodes added later are known by the
	// address the controller records.
	Addresses map[uint64]string
	// Join says that the node joins a running cluster that made it a
	// member (herald cluster add): on a new data directory, its replica
	// of the controller starts from the cluster's first voters, which it
	// asks the other members for, rather than from Members.
	Join bool
	// BalanceInterval is how often the node checks the shards it leads:
	// that their preferred leader leads them, and that their replicas
	// follow the placement (moves off a draining node). Default 2s.
	BalanceInterval time.Duration
	// Transport connects the node to the other members; required when
	// there are any. The node starts it; its creator closes it, before or
	// after the node (the node's groups only queue messages on it).
	Transport          *transport.Transport
	MaxPayloadBytes    int           // per event payload
	ReservationTimeout time.Duration // uncommitted reservations expire after this
	// StorageConfig is how the node keeps its shards' data, handed to
	// its host as it is.
	host.StorageConfig
	// DeliveryConcurrency bounds a shard's concurrent pushes; events of
	// one key are never pushed concurrently whatever the bound.
	DeliveryConcurrency int
	// DedupWindow is how long a published event's dedup id is
	// remembered (see Event.DedupID).
	DedupWindow time.Duration
	// DiskFreeLimit is the free space, in bytes, on the data directory's
	// file system under which new events (publishes, reservations,
	// commits) are refused: 0 means DefaultDiskFreeLimit, a negative
	// value turns the check off.
	DiskFreeLimit int64
	Logger        *slog.Logger // slog.Default()
	// Registerer receives the node's metrics (delivery outcomes, queue
	// depths) and its host's; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// PushGuard says what push endpoints may reach besides public
	// addresses, and where their CA files may be. The zero value allows
	// only public addresses and no CA file.
	PushGuard endpoint.GuardConfig

	// DiskFree, if set, replaces the reading of the data directory's free
	// disk space (in bytes): a hook for tests of the disk alarm.
	DiskFree func(dir string) (uint64, error)

	// BeforeShardOpen, if set, is called with a shard's group id as the
	// group opens, before its state is restored: a hook for tests, which
	// slow the opening of shards with it.
	BeforeShardOpen func(group uint64)

	// AlertWebhook, if set, is the operator's webhook (http or https):
	// it is told when a subscription is disabled because its endpoint
	// is gone or kept failing, and when one is enabled again (see
	// package alert). AlertSecret, if set, signs its requests.
	AlertWebhook string
	AlertSecret  string

	// SNSZonegroup is the SNS-compatible API's zonegroup (serve's
	// --sns-zonegroup): subscriptions made through that API are
	// delivered in SNS's envelope, whose topic ARNs name it.
	SNSZonegroup string

	// Tier configures tiering to object storage; off unless Tier.URL is
	// set (serve --tier-url).
	Tier TierConfig
}

// DefaultMaxPayloadBytes is the default limit on one event's payload.
const DefaultMaxPayloadBytes = 1 << 20

// DefaultDedupWindow is how long dedup ids are remembered by default: long
// enough for a client to retry across a restart or a change of leader.
const DefaultDedupWindow = 2 * time.Minute

// DefaultConfig returns the defaults of every setting that has one: the
// one place herald's defaults are declared (herald serve starts from it).
func DefaultConfig() Config {
	return Config{
		NodeID:              1,
		MaxPayloadBytes:     DefaultMaxPayloadBytes,
		ReservationTimeout:  30 * time.Second,
		StorageConfig:       host.StorageConfig{SnapshotEntries: host.DefaultSnapshotEntries},
		DeliveryConcurrency: delivery.DefaultMaxInFlight,
		DedupWindow:         DefaultDedupWindow,
		DiskFreeLimit:       DefaultDiskFreeLimit,
		BalanceInterval:     2 * time.Second,
		Tier:                DefaultTierConfig(),
	}
}

func (c *Config) setDefaults() {
	d := DefaultConfig()
	if c.NodeID == 0 {
		c.NodeID = d.NodeID
	}
	if c.MaxPayloadBytes <= 0 {
		c.MaxPayloadBytes = d.MaxPayloadBytes
	}
	if c.ReservationTimeout <= 0 {
		c.ReservationTimeout = d.ReservationTimeout
	}
	if c.DeliveryConcurrency <= 0 {
		c.DeliveryConcurrency = d.DeliveryConcurrency
	}
	if c.DedupWindow <= 0 {
		c.DedupWindow = d.DedupWindow
	}
	if c.DiskFreeLimit == 0 {
		c.DiskFreeLimit = d.DiskFreeLimit
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.BalanceInterval <= 0 {
		c.BalanceInterval = d.BalanceInterval
	}
	if len(c.Members) == 0 {
		c.Members = []uint64{c.NodeID}
	}
	c.Members = slices.Sorted(slices.Values(c.Members))
}

const controllerName = "controller"

// ControllerDir is the directory of the controller group in a data
// directory, and ControllerGroup its group id: what an offline check of
// the directory needs to know of it (host.CheckDir).
const (
	ControllerDir   = controllerName
	ControllerGroup = controller.ControllerGroup
)

// Node is a running herald node.
type Node struct {
	cfg       Config
	log       *slog.Logger
	host      *host.Host
	ctrl      *controllerMachine
	ctrlGroup controllerGroup // the controller's group on host
	guard     *endpoint.Guard // what push endpoints may reach

	reg *registry // the topics' and shards' runtimes, and the members

	push             *push.Supervisor // the dispatchers of the push topics' shards this node leads
	delivery         *deliveryMetrics
	forwards         *forwards       // herald_forwarded_requests_total
	bootEpoch        uint64          // see bootEpochFile
	relay            *relay          // runs shard calls where they must run (see relay.go)
	membership       *membership     // the calls about the cluster's membership (see membership.go)
	live             *liveness       // which members answer and reach this node (see liveness.go)
	reserving        *groupSet       // shards holding reservations (see reservations.go)
	retaining        *groupSet       // shards retaining events (see retention.go)
	opening          openProgress    // of the local shards (see shardOpen)
	reconciler       *reconciler     // matches the shards to the controller's topics (see reconcile.go)
	nonPersistentSeq atomic.Uint64   // non-persistent events pushed in this epoch
	cursors          *cursorSync     // the shards' cursors, one per subscription (see cursors.go)
	alerts           *alert.Notifier // the operator's webhook; nil without one
	tier             *tiering        // tiering to object storage; nil when off (see tier.go)

	lock      *datadir.Lock    // the data directory's, held until Close has closed the host
	identity  *clusterIdentity // whose the data directory is
	disk      *diskAlarm       // refuses new events while the data directory's disk is short of space
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Open starts a node on its data directory: it opens the controller group
// and returns once it has caught up, while the shard groups of every topic
// open in the background, a few at a time; each serves once it has opened
// (see Readiness and Opened). A shard that fails to open (for example a
// damaged log) is reported by name and stays unavailable; the others serve.
func Open(ctx context.Context, cfg Config) (_ *Node, err error) {
	cfg.setDefaults()
	if cfg.DataDir == "" {
		return nil, errors.New("no data directory configured; pass --data-dir")
	}
	guard, err := endpoint.NewGuard(cfg.PushGuard)
	if err != nil {
		return nil, err
	}
	// Nothing in the directory is read or written before it is ours.
	lock, err := datadir.Acquire(cfg.DataDir, processDescription())
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Release()
		}
	}()
	if err := checkWritable(cfg.DataDir); err != nil {
		return nil, err
	}
	if !slices.Contains(cfg.Members, cfg.NodeID) {
		return nil, fmt.Errorf("node %d is not among the cluster's members %v; list every node, this one included, in --peers", cfg.NodeID, cfg.Members)
	}
	if len(cfg.Members) > 1 && cfg.Transport == nil {
		return nil, fmt.Errorf("node %d has peers %v but no transport to reach them", cfg.NodeID, cfg.Members)
	}
	identity, err := claimDataDir(cfg)
	if err != nil {
		return nil, err
	}
	epoch, err := nextBootEpoch(cfg.DataDir)
	if vfs.IsNoSpace(err) {
		// A node on a full disk still serves what frees space; it only
		// cannot make non-persistent event ids (see pushNow).
		cfg.Logger.Warn("the disk is full: the boot epoch was not stored, so non-persistent topics cannot push until the node restarts with space", "err", err)
		epoch, err = 0, nil
	}
	if err != nil {
		return nil, err
	}
	tiers, err := openTiering(ctx, cfg.Tier, cfg.Registerer)
	if err != nil {
		return nil, err
	}
	hc := host.Config{
		NodeID:        cfg.NodeID,
		Dir:           cfg.DataDir,
		StorageConfig: cfg.StorageConfig,
		Logger:        cfg.Logger,
		Registerer:    cfg.Registerer,
	}
	if tiers != nil {
		hc.Archive = tiers
	}
	live := newLiveness()
	live.self, live.members, live.addresses, live.log = cfg.NodeID, cfg.Members, cfg.Addresses, cfg.Logger
	if cfg.Transport != nil {
		hc.Transport = cfg.Transport
		hc.PeerAlive = live.alive
		live.pinger = cfg.Transport
	}
	h, err := host.New(hc)
	if err != nil {
		if tiers != nil {
			tiers.close()
		}
		return nil, err
	}
	live.peerDown = h.PeerDown
	n := &Node{
		cfg:       cfg,
		log:       cfg.Logger,
		host:      h,
		ctrl:      newControllerMachine(),
		ctrlGroup: controllerGroup{host: h, self: cfg.NodeID},
		guard:     guard,
		reg:       newRegistry(),
		delivery:  newDeliveryMetrics(),
		forwards:  &forwards{counter: newForwardsMetric()},
		stop:      make(chan struct{}),

		lock:      lock,
		disk:      newDiskAlarm(cfg),
		bootEpoch: epoch,
		live:      live,
		reserving: newGroupSet(),
		retaining: newGroupSet(),
		tier:      tiers,
	}
	if tiers != nil {
		tiers.start(n)
	}
	n.relay = &relay{self: cfg.NodeID, host: h, shards: n.reg, here: n, forwards: n.forwards}
	n.membership = &membership{self: cfg.NodeID, members: cfg.Members, ctrl: n.ctrlGroup, groups: h,
		shards: n.reg.localShards, log: cfg.Logger}
	n.identity = &clusterIdentity{dir: cfg.DataDir, id: identity, ctrl: n.ctrlGroup,
		pingOthers: live.pingOthers, log: cfg.Logger}
	if t := cfg.Transport; t != nil { // the parts' peers stay nil (not a nil *Transport) for a node alone
		n.relay.peers, n.membership.peers, n.identity.peers = t, t, t
	}
	n.push = push.New(push.Config{Source: pushSource{n}, Guard: guard, Metrics: n.delivery,
		Logger: cfg.Logger, MaxInFlight: cfg.DeliveryConcurrency, OnDisable: n.disableGivenUp, SNSZonegroup: cfg.SNSZonegroup})
	n.cursors = &cursorSync{reg: n.reg, leads: n.relay.leads, view: n.viewShard, propose: n.proposeAsLeader,
		log: cfg.Logger, kick: make(chan struct{}, 1)}
	if cfg.AlertWebhook != "" {
		if n.alerts, err = alert.New(alert.Config{URL: cfg.AlertWebhook, Secret: cfg.AlertSecret,
			Node: fmt.Sprint(cfg.NodeID), Logger: cfg.Logger}); err != nil {
			h.Close()
			return nil, fmt.Errorf("--alert-webhook: %w", err)
		}
	}
	if cfg.Registerer != nil {
		if err := n.registerMetrics(cfg.Registerer); err != nil {
			h.Close()
			return nil, err
		}
	}
	if cfg.Transport != nil {
		cfg.Transport.Handle(rpcHandlers(h, n.relay, n.live, n.membership))
		cfg.Transport.Start(h)
	}
	// A joining node is new to the cluster, not one that lost its data:
	// its replicas join as learners, which do not vote anyway.
	var rejoin bool
	if !cfg.Join {
		rejoin = n.membership.rejoining(ctx, epoch)
	}
	if err := n.identity.checkPeers(ctx); err != nil {
		h.Close()
		return nil, err
	}
	ctrlVoters := cfg.Members
	if cfg.Join && epoch == 1 {
		if ctrlVoters, err = n.membership.join(ctx); err != nil {
			h.Close()
			return nil, err
		}
	}
	ctrl := withRepair(host.GroupConfig{ID: controller.ControllerGroup, Name: controllerName, Dir: controllerName,
		Peers: ctrlVoters, StateMachine: n.ctrl}, rejoin)
	if err := h.AddGroup(ctrl); err != nil {
		h.Close()
		return nil, fmt.Errorf("open the controller (topic metadata) in %s: %w", cfg.DataDir, err)
	}
	if err := n.ctrlGroup.waitCaughtUp(ctx, n.identity.foreign, live.logPeerWait); err != nil {
		h.Close()
		return nil, err
	}
	if err := n.identity.learn(ctx); err != nil {
		h.Close()
		return nil, err
	}
	// The topics are served from here on; their shards open in the
	// background, each serving once it has (see Readiness). The
	// reconciler takes no other reconcile until they have all opened, by
	// boot.
	n.reconciler = &reconciler{self: cfg.NodeID, host: h, ctrl: n.ctrlGroup, changed: n.ctrl.changed, reg: n.reg,
		opening: &n.opening, rejoin: rejoin, connect: n.membership.connect, syncPush: n.syncSubscriptions,
		identity: n.identity, log: cfg.Logger, stop: n.stop, opened: make(chan struct{}),
		entries: consume.NewEntryCache(consume.DefaultEntryCacheBytes),
		newMachine: func(group uint64, leases *consume.Leases) host.StateMachine {
			return newShardMachine(group, leases, n.reserving, n.retaining, n.tier, cfg.BeforeShardOpen)
		}}
	plan, err := n.reconciler.start(ctx)
	if err != nil {
		h.Close()
		return nil, err
	}
	n.push.Sync() // push endpoints open for non-persistent events at once
	leadership := h.WatchLeadership()
	if len(plan.toOpen) == 0 {
		n.reconciler.boot(plan) // nothing to open: the node is ready when Open returns
	} else {
		n.wg.Go(func() { n.reconciler.boot(plan) })
	}
	if n.disk.limit > 0 {
		n.wg.Go(func() { n.disk.watch(n.stop, cfg.Logger) })
	}
	n.wg.Go(n.reconciler.watchController)
	led := groupReservations{registry: n.reg, relay: n.relay, host: h, propose: n.proposeShard}
	expiry := &reservationExpiry{timeout: cfg.ReservationTimeout, reserving: n.reserving, log: cfg.Logger, now: time.Now, shards: led}
	n.wg.Go(func() { expiry.run(n.stop) })
	trim := &retentionTrim{retaining: n.retaining, log: cfg.Logger, now: time.Now, shards: led}
	n.wg.Go(func() { trim.run(n.stop) })
	n.wg.Go(func() { n.push.Run(n.stop, leadership) })
	n.wg.Go(func() { n.cursors.run(n.stop, h.WatchLeadership()) })
	leases := h.WatchLeadership()
	n.wg.Go(func() { n.forgetLeases(n.stop, leases) })
	n.wg.Go(newBalancer(n).run)
	n.wg.Go(func() { live.run(n.stop) })
	if n.tier != nil {
		n.wg.Go(func() { n.tier.run(n.stop) })
	}
	return n, nil
}

// checkWritable fails early, with advice, when the data directory cannot be
// used, rather than deep inside the first shard that tries to write.
func checkWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("data directory %s cannot be created: %w; choose another --data-dir or fix its permissions", dir, err)
	}
	probe := filepath.Join(dir, ".write-probe")
	f, err := os.Create(probe)
	if err != nil {
		return fmt.Errorf("data directory %s is not writable: %w; choose another --data-dir or fix its permissions", dir, err)
	}
	f.Close()
	return os.Remove(probe)
}

// processDescription says who holds the data directory, for a second
// process that is refused it: the command line says which server (its
// --listen, say) to stop.
func processDescription() string {
	return strings.Join(os.Args, " ")
}

// Close stops the node. Requests in flight get ErrUnavailable. Calling it
// again, even concurrently, waits for the first call and returns its
// result.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		close(n.stop)
		n.wg.Wait()
		var alertsErr error
		if n.alerts != nil {
			alertsErr = n.alerts.Close()
		}
		var tierErr error
		hostErr := n.host.Close()
		if n.tier != nil {
			// After the host: its groups read the store until they close.
			tierErr = n.tier.close()
		}
		n.closeErr = errors.Join(hostErr, alertsErr, tierErr, n.lock.Release())
	})
	return n.closeErr
}

// BrokenShards lists shards that could not be opened, by name.
func (n *Node) BrokenShards() map[string]error {
	out := make(map[string]error)
	if n.opening.failed.Load() == 0 {
		// /readyz asks on every call: with 100,000 shards, visiting
		// them all was a fifth of a boot's CPU under a client polling it.
		return out
	}
	for _, s := range n.reg.localShards() {
		if err := s.openErr(); err != nil {
			out[s.name] = err
		}
	}
	return out
}

// Readiness says how far the node is in opening its shards.
type Readiness struct {
	// Ready: every shard the node held when it started has opened, or
	// could not be opened (BrokenShards lists those). Each shard serves
	// as soon as it has opened, before the node is ready.
	Ready bool
	// ShardsOpen is how many of the node's Shards have finished opening
	// (those that could not be opened included). Shards of topics being
	// created count too, after the node is ready.
	ShardsOpen, Shards int
}

// Opened returns a channel closed once every shard the node held at its
// start has opened, or could not be opened (see BrokenShards), or the
// node was closed first.
func (n *Node) Opened() <-chan struct{} { return n.reconciler.opened }

// Readiness returns how far the node is in opening its shards.
func (n *Node) Readiness() Readiness {
	return Readiness{Ready: n.reconciler.booted.Load(), ShardsOpen: int(n.opening.finished.Load()), Shards: int(n.opening.total.Load())}
}

// proposeShard sends a shard command to its group, or, on a node that
// holds no replica of the shard, to a node that does, and unwraps the
// result.
func (n *Node) proposeShard(ctx context.Context, s *shardRuntime, cmd *shard.Command) (shard.Result, error) {
	return n.startShard(ctx, s, cmd)()
}

// startShard is proposeShard without the wait: it hands cmd on and
// returns the function that waits for the result, which the caller must
// call. Proposals to several shards started before any is waited for
// commit in parallel, with no goroutine per shard on this node.
func (n *Node) startShard(ctx context.Context, s *shardRuntime, cmd *shard.Command) (wait func() (shard.Result, error)) {
	if !s.local {
		var res shard.Result
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			res, err = n.relay.propose(ctx, s, cmd)
		}()
		return func() (shard.Result, error) {
			<-done
			return res, err
		}
	}
	if err := s.unservable(); err != nil {
		return func() (shard.Result, error) { return shard.Result{}, err }
	}
	if leader, _ := n.host.Leader(s.group); leader != 0 && leader != n.cfg.NodeID {
		n.forwards.count(ctx, "raft")
	}
	p := n.host.Start(ctx, s.group, cmd)
	return func() (shard.Result, error) {
		r, err := p.Wait(ctx)
		return shardResult(s, r, err)
	}
}

// proposeAsLeader proposes a shard command that only the shard's leader
// may make (host.ProposeAsLeader): it fails unless this replica leads.
func (n *Node) proposeAsLeader(ctx context.Context, s *shardRuntime, cmd *shard.Command) (shard.Result, error) {
	if err := s.unservable(); err != nil {
		return shard.Result{}, err
	}
	r, err := n.host.ProposeAsLeader(ctx, s.group, cmd)
	return shardResult(s, r, err)
}

// shardResult unwraps what the host answered a shard command.
func shardResult(s *shardRuntime, r any, err error) (shard.Result, error) {
	if err != nil {
		return shard.Result{}, hostError(s.name, err)
	}
	res := r.(shard.Result)
	return res, res.Err
}

// hostError is err, from the host about group, as the node reports it.
func hostError(group string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, host.ErrOverloaded):
		return fmt.Errorf("%s: %w", group, err)
	default:
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, group, err)
	}
}
