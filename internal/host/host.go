// Package host drives many Raft groups on one node. Each group (a shard of
// a topic, or the controller) is an etcd raft RawNode with its own storage
// directory and state machine; no group has a goroutine of its own. A
// fixed set of workers (scheduler.go) takes the groups that have work in
// rounds (round.go): a round batches each group's concurrent proposals
// into one Ready, persists every group's Ready in the node's write-ahead
// log with one fdatasync, applies committed entries and answers proposers
// once their entry is applied. Snapshots are taken off the workers.
//
// A single node is a cluster of one: the same code path runs, and nothing
// outside this package assumes there is only one node.
package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sync/errgroup"

	hlog "herald/internal/log"
	"herald/internal/raftstore"
	"herald/internal/vfs"
	"herald/internal/wal"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// StateMachine is what a group replicates. All methods are called on the
// group's loop (its turns on the host's workers), one at a time.
type StateMachine interface {
	// Apply applies the command committed at index and returns the result
	// handed to its proposer. It must be deterministic.
	Apply(index uint64, cmd []byte) any
	// Snapshot encodes the whole state. It runs on the apply loop, so it
	// must be cheap: state machines keep metadata, not data. A machine
	// that also implements AsyncSnapshotter is encoded off the loop in the
	// default (asynchronous) mode.
	Snapshot() ([]byte, error)
	// Restore replaces the state with a snapshot's; empty data means the
	// initial state.
	Restore(data []byte) error
	// CompactIndex is the lowest log index the state machine may still need
	// to read (for a shard, the entry holding the oldest undelivered event).
	CompactIndex() uint64
}

// AsyncSnapshotter is implemented by state machines that can capture their
// state cheaply and encode it later: SnapshotFunc runs on the group's
// goroutine and returns a function that may run on another goroutine,
// concurrently with further applies, and must return the bytes Snapshot
// would have returned at capture time. The host then encodes snapshots off
// the apply loop.
type AsyncSnapshotter interface {
	SnapshotFunc() func() ([]byte, error)
}

// Tiered is implemented by state machines whose old entries may be read
// from elsewhere (a shard's log tiered to object storage). The host then
// deletes the local segments below TieredBelow, beyond the newest
// LocalRetention bytes of the log, although the machine still needs
// them; the machine's reads below the local log go elsewhere. Followers
// installing a snapshot fetch only the entries held locally.
type Tiered interface {
	// TieredBelow is the log index below which every entry the machine
	// still needs is held elsewhere; 0 if none is.
	TieredBelow() uint64
	// LocalRetention is how many bytes of the newest log the group keeps
	// locally all the same.
	LocalRetention() int64
}

// Transport carries Raft messages to other nodes, and the rpcs a group
// makes on them. Messages of every group share it; each is tagged with its
// group id.
type Transport interface {
	Send(group uint64, msgs []pb.Message)
	// Entries fetches log entries from node to: a group asks its leader
	// for the entries a snapshot needs; the node routes the rpc to that
	// leader's ServeEntries.
	Entries(ctx context.Context, to uint64, req *clusterv1.EntriesRequest) (*clusterv1.EntriesResponse, error)
	// Readd asks node to, a group's leader, to re-add this node's rebuilt
	// replica; the node routes the rpc to that leader's ServeReadd.
	Readd(ctx context.Context, to uint64, req *clusterv1.ReaddRequest) (*clusterv1.ReaddResponse, error)
}

// StorageConfig is how a node keeps its groups' data on disk: the
// settings an operator tunes (herald serve's flags) and benchmarks compare.
// It is declared once, here; node.Config embeds it and hands it down
// whole. Zero values take the defaults shown.
type StorageConfig struct {
	SnapshotEntries uint64 // DefaultSnapshotEntries applied entries since the last snapshot
	SnapshotBytes   int64  // 64 MiB of entries since the last snapshot
	SyncSnapshots   bool   // write snapshots on the apply loop (for comparison benchmarks)
	SegmentSize     int64  // log segment size; 0 is the log's default
	// WALSegmentSize is the size of each WAL file; 0 is the log's default.
	WALSegmentSize int64
	// WriteBehind is how many bytes of its newest entries a group keeps
	// in memory, under the WAL, before writing them to its segment files
	// (raftstore.Options.WriteBehind): 0 means 256 KiB, -1 writes each
	// Ready's entries at once.
	WriteBehind int64
	// OpenSegmentFiles bounds the groups' log segment files open at once
	// (the least recently used idle ones are closed, and opened again
	// when needed); 0 means half the process's open-files limit, leaving
	// the rest to sockets and other files; -1 means no bound.
	OpenSegmentFiles int
	BootParallelism  int // groups opened at once by AddGroups: 4 per CPU (GOMAXPROCS), 4 to 64
}

// Config configures a Host. Zero values take the defaults shown.
type Config struct {
	NodeID         uint64        // 1
	Dir            string        // required: see GroupConfig.Dir for the layout
	TickInterval   time.Duration // 100ms
	ElectionTicks  int           // 10
	HeartbeatTicks int           // 1
	StorageConfig
	ReplayTimeout time.Duration // 5m: AddGroup waits this long for a reopened group to replay its log
	// Workers is how many goroutines run the groups' turns (scheduler.go):
	// 0 means one per two CPUs the Go runtime uses (GOMAXPROCS), at least
	// one (defaultWorkers says why).
	Workers   int
	Transport Transport    // nil: no other nodes
	Logger    *slog.Logger // slog.Default()
	FS        vfs.FS       // vfs.OS: where the groups' files live (tests simulate crashes with vfs.MemFS)
	BootID    string       // the machine's: identifies this boot for log recovery
	// PeerAlive says whether a node answers the node-level liveness
	// checks; a follower whose leader's node does not wakes from
	// quiescence. nil counts no peer alive: only groups of this node alone
	// quiesce.
	PeerAlive func(node uint64) bool
	// Registerer receives the host's metrics (fsync and snapshot
	// durations); nil keeps them unregistered.
	Registerer prometheus.Registerer
	// Archive holds the entries of Tiered state machines that are no
	// longer in their local logs; Entry reads them there. nil: none.
	Archive Archive
}

func (c *Config) setDefaults() {
	if c.NodeID == 0 {
		c.NodeID = 1
	}
	if c.TickInterval <= 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks <= 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks <= 0 {
		c.HeartbeatTicks = 1
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = DefaultSnapshotEntries
	}
	if c.SnapshotBytes <= 0 {
		c.SnapshotBytes = 64 << 20
	}
	if c.OpenSegmentFiles == 0 {
		c.OpenSegmentFiles = defaultOpenSegmentFiles()
	}
	if c.BootParallelism <= 0 {
		// Opening a group is CPU work (reading its files) and waits for
		// fsyncs (its first election); a few per CPU keep both busy.
		// Measured with 10,000 shards on 2 CPUs: 1 at a time 21 s, 8 (this)
		// 11 s, 32 14 s (BENCHMARKS.md, "Shards on one node"; its history in docs/bench/results).
		c.BootParallelism = min(max(4*runtime.GOMAXPROCS(0), 4), 64)
	}
	if c.ReplayTimeout <= 0 {
		c.ReplayTimeout = 5 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.FS == nil {
		c.FS = vfs.OS
	}
	if c.BootID == "" {
		// Read once, not by each of the thousands of logs opened.
		c.BootID = vfs.BootID()
	}
}

// defaultOpenSegmentFiles is half the process's limit of open files. Go
// raises the soft limit to the hard one when a program starts, so this
// is what the process may really use.
func defaultOpenSegmentFiles() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 {
		return 512
	}
	return int(min(lim.Cur/2, 1<<30))
}

// DefaultSnapshotEntries is how many applied entries trigger a snapshot
// unless StorageConfig.SnapshotEntries says otherwise.
const DefaultSnapshotEntries = 10000

// GroupConfig describes one Raft group.
type GroupConfig struct {
	ID   uint64 // unique on the host, never 0
	Name string // for logs and errors, and part of the default directory
	// Dir is the group's directory, relative to Config.Dir. Empty puts
	// the group beside the others, in groupsDir/<ID>-<Name>, where
	// SweepGroupDirs can tell by the id whether it still belongs to a
	// group.
	Dir   string
	Peers []uint64 // voters, used when the group is created for the first time
	// Campaign makes this node stand for election as soon as the group is
	// created (not when it is reopened): how the preferred leader of a new
	// shard takes the lead without waiting an election timeout.
	Campaign bool
	// StateMachine is the group's state machine, in its initial state.
	StateMachine StateMachine
	// RepairFromPeers rebuilds the replica from the group's other replicas
	// when its files turn out to be damaged at open, instead of failing:
	// the damaged directory is moved to <dir>.damaged and an empty replica
	// catches up in its place (see rebuild.go). It needs other Peers.
	RepairFromPeers bool
	// Rejoin creates a group that does not exist yet as a rebuilt replica,
	// which stays out of elections until it has caught up: for a node that
	// lost its data directory and rejoins its cluster.
	Rejoin bool
}

var (
	// ErrNoLeader means the group has no leader right now (an election is
	// running); the request can be retried shortly.
	ErrNoLeader = errors.New("no raft leader for the group yet; retry shortly")
	// ErrUnknownGroup means the host does not run the group.
	ErrUnknownGroup = errors.New("group is not hosted on this node")
	// ErrClosed means the host or group is shutting down.
	ErrClosed = errors.New("raft group is shut down")
	// ErrOverloaded means too many proposals are waiting to be committed.
	ErrOverloaded = errors.New("raft group has too many uncommitted proposals; retry later")
	// ErrOutcomeUnknown means the group's leader changed, or could not be
	// reached, while a proposal was in flight: it may or may not be
	// applied. Retrying may apply it twice unless the command is
	// idempotent.
	ErrOutcomeUnknown = errors.New("the raft leader changed, or could not be reached, while the request was in flight, so it may or may not have been applied")
	// ErrNotApplied means a proposal's entry was replaced in the log by
	// a new leader's before it committed: it was not applied, and may be
	// made again. Wait makes it again itself, within its deadline, unless
	// it is leader-only.
	ErrNotApplied = errors.New("the raft leader changed before the request committed, and it was not applied; retry")
)

// Host runs Raft groups.
type Host struct {
	cfg     Config
	wal     *wal.WAL      // the node's write-ahead log
	files   *hlog.Files   // the bound of the groups' open segment files
	nextID  atomic.Uint64 // proposal ids; random start so ids from before a restart never match
	stats   Stats
	metrics *metrics
	leaders leadershipWatchers
	sched   *scheduler

	mu     sync.RWMutex
	groups map[uint64]*group
	closed bool

	// ticking holds the groups the ticker visits: every group but the
	// quiesced leaders, which have nothing to time (quiesce.go), so that
	// an idle node's ticks cost nothing per group. Taken after mu.
	tickMu  sync.Mutex
	ticking map[uint64]*group

	stopTicker chan struct{}
	tickerDone chan struct{}
}

// New starts a host with no groups.
func New(cfg Config) (*Host, error) {
	cfg.setDefaults()
	if cfg.Dir == "" {
		return nil, errors.New("host: no data directory configured")
	}
	if err := vfs.MkdirDurable(cfg.FS, cfg.Dir); err != nil {
		return nil, fmt.Errorf("create data directory %s: %w", cfg.Dir, err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	h := &Host{
		cfg:        cfg,
		metrics:    m,
		files:      hlog.NewFiles(cfg.OpenSegmentFiles),
		groups:     make(map[uint64]*group),
		ticking:    make(map[uint64]*group),
		stopTicker: make(chan struct{}),
		tickerDone: make(chan struct{}),
	}
	// Every group appends to the node's one WAL as well as to its own
	// log, and one fdatasync of the WAL makes every group's appends
	// durable.
	h.wal, err = wal.Open(filepath.Join(cfg.Dir, walDir), wal.Options{
		SegmentSize: cfg.WALSegmentSize, FS: cfg.FS, BootID: cfg.BootID, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	if err := registerWALMetrics(cfg.Registerer, h.wal); err != nil {
		h.wal.Close()
		return nil, err
	}
	h.nextID.Store(rand.Uint64() >> 1)
	h.sched = newScheduler(cfg.Workers, h.round)
	go h.tick()
	return h, nil
}

// walDir, under Config.Dir, holds the node's write-ahead log.
const walDir = "wal"

// replayWAL replays what the WAL still holds into the groups in
// groupsDir that were not added (a replica the node's controller did not
// know of yet at the start), so that their logs are whole before anything
// opens them: each group's storage is opened, which replays and flushes,
// and closed. A group that fails to open is logged here and fails again,
// named, when it is added.
func (h *Host) replayWAL() {
	pending := h.wal.RecoveredGroups()
	if len(pending) == 0 {
		return
	}
	dirs := h.groupDirs()
	var eg errgroup.Group
	eg.SetLimit(h.cfg.BootParallelism)
	for _, id := range pending {
		dir, ok := dirs[id]
		if !ok {
			continue
		}
		eg.Go(func() error {
			st, err := raftstore.Open(dir, h.storageOptions(id))
			if err == nil {
				err = st.Close()
			}
			if err != nil {
				h.cfg.Logger.Error("replay the write-ahead log into a group", "group", id, "dir", dir, "err", err)
			}
			return nil
		})
	}
	eg.Wait()
}

// groupDirs maps the ids of the groups in groupsDir to their directories.
func (h *Host) groupDirs() map[uint64]string {
	dir := filepath.Join(h.cfg.Dir, groupsDir)
	names, err := h.cfg.FS.ReadDir(dir)
	if err != nil {
		return nil
	}
	dirs := make(map[uint64]string, len(names))
	for _, name := range names {
		if id, ok := groupDirID(name); ok && !strings.HasSuffix(name, damagedSuffix) {
			dirs[id] = filepath.Join(dir, name)
		}
	}
	return dirs
}

// groupDirID parses the group id a directory in groupsDir is named after.
func groupDirID(name string) (uint64, bool) {
	idStr, _, ok := strings.Cut(name, "-")
	id, err := strconv.ParseUint(idStr, 10, 64)
	return id, ok && err == nil
}

// Booted says that the groups this node runs after its restart have been
// added (AddGroup), failed or not, each taking what the WAL held for it.
// The WAL's records of other groups in groupsDir are replayed into them;
// what is left, of groups that no longer exist here, is dropped, and the
// WAL may delete the files holding it.
func (h *Host) Booted() {
	h.replayWAL()
	if err := h.wal.Booted(); err != nil {
		// The note stays, and the next start accepts the loss again.
		h.cfg.Logger.Error("finish the repair of the write-ahead log", "err", err)
	}
}

// tick drives every group's logical clock from one timer: a ticker per
// group would cost thousands of timers on a node with thousands of shards.
func (h *Host) tick() {
	defer close(h.tickerDone)
	t := time.NewTicker(h.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stopTicker:
			return
		case <-t.C:
			h.tickMu.Lock()
			for _, g := range h.ticking {
				select {
				case g.tickc <- struct{}{}:
					g.post()
				default: // the group is busy; a missed tick only delays timeouts
				}
			}
			h.tickMu.Unlock()
		}
	}
}

// AddGroup opens (or creates) a group, starts running it and returns once
// it has replayed the log it already had, so callers never see it half
// recovered.
func (h *Host) AddGroup(gc GroupConfig) error {
	g, err := h.startGroup(gc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.ReplayTimeout)
	defer cancel()
	return g.waitCaughtUp(ctx)
}

// startGroup opens (or creates) a group and starts running it.
func (h *Host) startGroup(gc GroupConfig) (*group, error) {
	if gc.ID == 0 || gc.Name == "" || gc.StateMachine == nil {
		return nil, fmt.Errorf("add group: id, name and state machine are required")
	}
	if gc.Dir == "" && strings.ContainsRune(gc.Name, filepath.Separator) {
		return nil, fmt.Errorf("add group %s: a name with a path separator needs a Dir of its own", gc.Name)
	}
	h.mu.RLock()
	_, exists := h.groups[gc.ID]
	closed := h.closed
	h.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if exists {
		return nil, fmt.Errorf("add group %s: id %d is already hosted", gc.Name, gc.ID)
	}
	g, err := openGroup(h, gc, false)
	if err != nil && h.mayRebuild(gc, err) {
		g, err = h.rebuild(gc, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open group %s: %w", gc.Name, err)
	}
	if err := h.register(g); err != nil {
		g.storage.Close()
		return nil, err
	}
	h.sched.schedule(g) // its first turn, which may campaign
	return g, nil
}

func (h *Host) register(g *group) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	if _, ok := h.groups[g.id]; ok {
		return fmt.Errorf("add group %s: id %d is already hosted", g.name, g.id)
	}
	h.groups[g.id] = g
	h.tickMu.Lock()
	h.ticking[g.id] = g
	h.tickMu.Unlock()
	return nil
}

// PeerDown tells the host that node stopped answering the node-level
// liveness checks. Quiesced leaders, which the ticker does not visit,
// are visited again: those with a follower on that node wake and tick,
// and step down if they have lost their quorum (CheckQuorum); the others
// leave the ticker's set at their next tick.
func (h *Host) PeerDown(node uint64) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	h.tickMu.Lock()
	defer h.tickMu.Unlock()
	for id, g := range h.groups {
		if g.quiet.now.Load() && g.lead.leads() {
			h.ticking[id] = g
		}
	}
}

// setTicking adds a group that is still hosted to the groups the ticker
// visits, or removes it.
func (h *Host) setTicking(g *group, on bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	h.tickMu.Lock()
	defer h.tickMu.Unlock()
	if on && h.groups[g.id] == g {
		h.ticking[g.id] = g
	} else if !on {
		delete(h.ticking, g.id)
	}
}

// AddGroups opens many groups in parallel on a temporary, bounded set of
// workers that exists only for this call (boot-time recovery must not
// borrow a pool other work depends on). It returns one error per group
// that failed, keyed by group id; the others run.
func (h *Host) AddGroups(ctx context.Context, gcs []GroupConfig) map[uint64]error {
	return h.AddGroupsFunc(ctx, gcs, nil)
}

// AddGroupsFunc is AddGroups that also calls opened, unless it is nil, as
// each group is added (has caught up, as AddGroup returns) or fails: a
// caller can serve each group as soon as it runs instead of waiting for
// them all. opened is called concurrently.
//
// A worker opens a group and waits while it applies what it knew was
// committed (reading its files and its log is the boot's CPU and memory,
// which the workers bound); what remains, a group of one electing itself
// and applying what that commits, waits for an fdatasync of the WAL, and
// is waited for off the workers, so that the elections of every group
// opened meanwhile share one.
func (h *Host) AddGroupsFunc(ctx context.Context, gcs []GroupConfig, opened func(id uint64, err error)) map[uint64]error {
	var mu sync.Mutex
	failed := make(map[uint64]error)
	done := func(id uint64, err error) {
		if err != nil {
			mu.Lock()
			failed[id] = err
			mu.Unlock()
		}
		if opened != nil {
			opened(id, err)
		}
	}
	var waits sync.WaitGroup
	var eg errgroup.Group
	eg.SetLimit(h.cfg.BootParallelism)
	for _, gc := range gcs {
		eg.Go(func() error {
			err := ctx.Err()
			var g *group
			if err == nil {
				g, err = h.startGroup(gc)
			}
			if err != nil {
				done(gc.ID, err)
				return nil // one broken group must not stop the others
			}
			// Each group has ReplayTimeout, as with AddGroup.
			gctx, cancel := context.WithTimeout(ctx, h.cfg.ReplayTimeout)
			if err := g.waitAppliedOld(gctx); err != nil {
				cancel()
				done(gc.ID, err)
				return nil
			}
			waits.Go(func() {
				defer cancel()
				done(gc.ID, g.waitCaughtUp(gctx))
			})
			return nil
		})
	}
	eg.Wait()
	waits.Wait()
	return failed
}

// RemoveGroup stops a group; with deleteData it also removes its directory.
func (h *Host) RemoveGroup(id uint64, deleteData bool) error {
	h.mu.Lock()
	g, ok := h.groups[id]
	delete(h.groups, id)
	h.tickMu.Lock()
	delete(h.ticking, id)
	h.tickMu.Unlock()
	h.mu.Unlock()
	if !ok {
		return ErrUnknownGroup
	}
	g.stop()
	if deleteData {
		h.wal.Remove(id)
		if err := vfs.RemoveAllDurable(h.cfg.FS, g.dir); err != nil {
			return fmt.Errorf("remove data of group %s: %w", g.name, err)
		}
	}
	return nil
}

func (h *Host) group(id uint64) (*group, error) {
	h.mu.RLock()
	g, ok := h.groups[id]
	h.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("group %d: %w", id, ErrUnknownGroup)
	}
	return g, nil
}

// A Command is what a group's state machine applies. AppendBinary appends
// its encoding to b, growing b at most once: the host encodes a proposal
// straight after its own envelope, so a command is copied once on its way
// into raft, not twice.
type Command interface {
	AppendBinary(b []byte) []byte
}

// Bytes is a Command already encoded.
type Bytes []byte

// AppendBinary appends c to b.
func (c Bytes) AppendBinary(b []byte) []byte { return append(b, c...) }

// Propose replicates cmd through the group's log and returns the state
// machine's result once the entry is committed and applied.
func (h *Host) Propose(ctx context.Context, id uint64, cmd Command) (any, error) {
	g, err := h.group(id)
	if err != nil {
		return nil, err
	}
	return g.propose(ctx, proposal{cmd: cmd})
}

// Start is Propose without the wait: it hands cmd to the group and
// returns at once, and the Proposal's Wait gives the result. Proposals to
// several groups started before any is waited for commit in parallel,
// with no goroutine per group.
func (h *Host) Start(ctx context.Context, id uint64, cmd Command) *Proposal {
	g, err := h.group(id)
	if err != nil {
		return &Proposal{err: err}
	}
	return g.start(ctx, proposal{cmd: cmd})
}

// ProposeAsLeader is Propose for a command whose meaning depends on what
// only the leader knows (its memory, checked before proposing): raft takes
// it only if this replica still leads the group when the proposal reaches
// the group's loop, and does not pass it on to another leader. Otherwise it
// fails with ErrNotLeader. Taken, it commits in this leader's term or
// never: any later leader applies it before it serves (see
// publishLeader), or never sees it.
func (h *Host) ProposeAsLeader(ctx context.Context, id uint64, cmd Command) (any, error) {
	g, err := h.group(id)
	if err != nil {
		return nil, err
	}
	return g.propose(ctx, proposal{cmd: cmd, leaderOnly: true})
}

// View runs fn on the group's loop, between applies, so fn sees a
// consistent state machine. fn must be quick and must not keep sm.
func (h *Host) View(ctx context.Context, id uint64, fn func(sm StateMachine, applied uint64)) error {
	g, err := h.group(id)
	if err != nil {
		return err
	}
	return g.view(ctx, fn)
}

// Entry returns the command stored at index in the group's log.
func (h *Host) Entry(id, index uint64) ([]byte, error) {
	g, err := h.group(id)
	if err != nil {
		return nil, err
	}
	ents, err := g.storage.Entries(index, index+1, 0)
	if errors.Is(err, raft.ErrCompacted) && h.cfg.Archive != nil {
		ents, err = h.archived(g, index)
	}
	if err != nil {
		return nil, fmt.Errorf("read entry %d of group %s: %w", index, g.name, err)
	}
	if len(ents) == 0 {
		return nil, fmt.Errorf("read entry %d of group %s: not found", index, g.name)
	}
	_, cmd := decodeEnvelope(ents[0].Data)
	return cmd, nil
}

// Receive delivers a message from another node to a group without
// waiting: a group whose inbox is full drops it (raft resends what
// matters), as does a node that does not run the group (yet).
func (h *Host) Receive(id uint64, m pb.Message) error {
	g, err := h.group(id)
	if err != nil {
		return err
	}
	if !g.inbox.put(m) {
		return fmt.Errorf("group %s: %w", g.name, ErrOverloaded)
	}
	h.sched.schedule(g)
	return nil
}

// ReportUnreachable tells a group that a message it sent to node to was
// lost, so that raft probes the node instead of streaming to it.
func (h *Host) ReportUnreachable(id, to uint64) {
	h.report(id, report{to: to, unreachable: true})
}

// ReportSnapshot tells a group whether the snapshot it sent to node to
// went out, so that raft resumes replicating to the node, or retries.
func (h *Host) ReportSnapshot(id, to uint64, failed bool) {
	h.report(id, report{to: to, snapshot: true, failed: failed})
}

// report never blocks: the transport may call it from the group's own
// goroutine (a message that does not fit in a peer's queue). A report
// that does not fit is dropped; raft then learns of the peer's state from
// its next response, or its absence.
func (h *Host) report(id uint64, r report) {
	g, err := h.group(id)
	if err != nil {
		return
	}
	select {
	case g.reportc <- r:
		g.post()
	default:
	}
}

// Status describes a group as seen from this node.
type Status struct {
	Name        string
	Leader      uint64
	IsLeader    bool
	Applied     uint64
	SnapIndex   uint64
	FirstIndex  uint64
	LastIndex   uint64
	LogBytes    int64
	LogSegments int
	// Rebuilding means the replica was rebuilt empty and has not caught
	// up with a leader yet (see rebuild.go).
	Rebuilding bool
	// Quiesced means the group is idle and does not tick (see quiesce.go).
	Quiesced bool
	// WaitingForSpace means the disk is full and the group waits to make
	// its latest entries durable, taking nothing new meanwhile.
	WaitingForSpace bool
	Err             error // set when the group stopped on a storage failure
}

// Leader returns the node that leads a group as this node knows it (0
// while an election runs), or why the group cannot say: it is not hosted
// here, or it stopped. Unlike GroupStatus it reads no log statistics, so
// request paths may ask it on every call.
func (h *Host) Leader(id uint64) (uint64, error) {
	g, err := h.group(id)
	if err != nil {
		return 0, err
	}
	select {
	case <-g.life.done:
		return 0, g.life.closedErr()
	default:
		return g.lead.leader(), nil
	}
}

// Applied returns the index a group has applied up to: its state machine
// changes only when this does. Like Leader it reads no log statistics.
func (h *Host) Applied(id uint64) (uint64, error) {
	g, err := h.group(id)
	if err != nil {
		return 0, err
	}
	return g.appliedAt.Load(), nil
}

// GroupStatus reports on a group.
func (h *Host) GroupStatus(id uint64) (Status, error) {
	g, err := h.group(id)
	if err != nil {
		return Status{}, err
	}
	return g.status(), nil
}

// Stats returns host-wide counters.
func (h *Host) Stats() *Stats { return &h.stats }

// Close stops every group and the ticker.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	groups := h.groups
	h.groups = map[uint64]*group{}
	h.mu.Unlock()
	close(h.stopTicker)
	<-h.tickerDone
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Go(g.stop)
	}
	wg.Wait()
	h.sched.stop()
	if err := h.wal.Close(); err != nil {
		return fmt.Errorf("close host: %w", err)
	}
	return nil
}

// groupsDir, under Config.Dir, holds the directories of the groups that
// have no Dir of their own, each named <id>-<name>. (The name is that of
// the directory herald's shards have always lived in.)
const groupsDir = "shards"

// groupDir returns the directory of a group.
func groupDir(cfg *Config, gc GroupConfig) string {
	if gc.Dir != "" {
		return filepath.Join(cfg.Dir, gc.Dir)
	}
	return filepath.Join(cfg.Dir, groupsDir, fmt.Sprintf("%d-%s", gc.ID, gc.Name))
}

// SweepGroupDirs removes, with their data, the group directories in
// groupsDir whose group is neither hosted nor wanted by keep: what a crash
// left behind between deleting a group and its data, or the data of a
// group that could not be opened and is no longer wanted. Entries whose
// name does not start with a group id are left alone.
func (h *Host) SweepGroupDirs(keep func(id uint64) bool) error {
	dir := filepath.Join(h.cfg.Dir, groupsDir)
	names, err := h.cfg.FS.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list group directories: %w", err)
	}
	for _, name := range names {
		id, ok := groupDirID(name)
		if !ok || keep(id) {
			continue
		}
		h.mu.RLock()
		_, hosted := h.groups[id]
		h.mu.RUnlock()
		if hosted {
			continue
		}
		if err := vfs.RemoveAllDurable(h.cfg.FS, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("remove the directory of group %d: %w", id, err)
		}
	}
	return nil
}

func (h *Host) storageOptions(group uint64) raftstore.Options {
	return raftstore.Options{SegmentSize: h.cfg.SegmentSize, FS: h.cfg.FS, BootID: h.cfg.BootID, WAL: h.wal, Group: group, Files: h.files, WriteBehind: h.cfg.WriteBehind}
}

// groupFailed reports whether the group stopped on a failure.
func (h *Host) groupFailed(id uint64) bool {
	g, err := h.group(id)
	if err != nil {
		return false
	}
	select {
	case <-g.life.done:
		return g.life.err != nil
	default:
		return false
	}
}
