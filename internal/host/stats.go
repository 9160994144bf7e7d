package host

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/wal"
)

// Stats are host-wide counters, safe to read at any time.
type Stats struct {
	Fsyncs        atomic.Uint64
	FsyncNanos    atomic.Uint64
	Snapshots     atomic.Uint64
	SnapshotNanos atomic.Uint64
	Applied       atomic.Uint64
	// Rounds are the scheduler's rounds, and Turns the groups' turns in
	// them (round.go), a second turn counted too: Turns/Rounds is about
	// how many groups share a round.
	Rounds atomic.Uint64
	Turns  atomic.Uint64
}

// metrics are the host's Prometheus series.
type metrics struct {
	fsync    prometheus.Histogram
	snapshot prometheus.Histogram
	// Snapshots sent to followers too far behind for the log, and
	// installed from a leader, with the log entries they carried.
	snapshotsSent, snapshotInstalls, snapshotEntries prometheus.Counter
	// The raft rounds the groups make and what each carries: entries per
	// Ready is how well proposals and appends are batched, which sets
	// the cost of an event more than anything else at one per request.
	readies, readyEntries, readyMessages prometheus.Counter
	// The scheduler's rounds and the groups' turns in them.
	rounds, turns prometheus.Counter
}

// durationBuckets span 50µs to about 1.6s: an fdatasync of a fast disk to
// a snapshot of a large shard.
var durationBuckets = prometheus.ExponentialBuckets(50e-6, 2, 16)

// newMetrics creates the host's series and registers them with reg, if
// not nil.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herald_fsync_duration_seconds", Help: "Time a group-committed batch waited to become durable: an fdatasync of the node's write-ahead log, which the groups persisting at once share.",
			Buckets: durationBuckets,
		}),
		snapshot: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herald_snapshot_duration_seconds", Help: "Duration of writing a snapshot and compacting the log.",
			Buckets: durationBuckets,
		}),
		snapshotsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_snapshots_sent_total", Help: "Snapshots this node's groups sent to followers that were too far behind for the log, and that went out.",
		}),
		snapshotInstalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_snapshot_installs_total", Help: "Snapshots from a leader that this node's groups installed, replacing their replica's state.",
		}),
		snapshotEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_snapshot_install_entries_total", Help: "Log entries fetched with installed snapshots: those from the delivery head up, which hold events not yet acknowledged.",
		}),
		readies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_raft_readies_total", Help: "Raft Readies the node's groups handled: each persists, sends and applies what raft has ready at once.",
		}),
		readyEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_raft_appended_entries_total", Help: "Log entries the node's groups persisted from Readies; divided by herald_raft_readies_total, how many share a round.",
		}),
		readyMessages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_raft_messages_sent_total", Help: "Raft messages the node's groups sent to other nodes (appends, their answers, heartbeats, votes, snapshots).",
		}),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_raft_rounds_total", Help: "Rounds of the node's Raft scheduler: a worker takes the groups with work, persists all their Readies with one WAL fdatasync, then applies.",
		}),
		turns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_raft_turns_total", Help: "Turns groups took in the scheduler's rounds, a group whose commit its followers must hear of in the same round taking two; divided by herald_raft_rounds_total, about how many groups share a round.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.fsync, m.snapshot, m.snapshotsSent, m.snapshotInstalls, m.snapshotEntries, m.readies, m.readyEntries, m.readyMessages, m.rounds, m.turns} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register host metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) countReady(entries, messages int) {
	m.readies.Inc()
	m.readyEntries.Add(float64(entries))
	m.readyMessages.Add(float64(messages))
}

// registerWALMetrics registers the WAL's series with reg, if not nil.
func registerWALMetrics(reg prometheus.Registerer, w *wal.WAL) error {
	if reg == nil {
		return nil
	}
	syncs := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "herald_wal_fsyncs_total", Help: "fdatasyncs of the node's write-ahead log; each makes every group's pending appends durable.",
	}, func() float64 { return float64(w.SyncCount()) })
	files := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "herald_wal_files", Help: "Files of the node's write-ahead log on disk; checkpoints delete those whose entries are in the shards' own logs.",
	}, func() float64 { return float64(w.Files()) })
	for _, c := range []prometheus.Collector{syncs, files} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register write-ahead log metrics: %w", err)
		}
	}
	return nil
}

func (h *Host) observeFsync(d time.Duration) {
	h.stats.Fsyncs.Add(1)
	h.stats.FsyncNanos.Add(uint64(d))
	h.metrics.fsync.Observe(d.Seconds())
}

func (h *Host) observeSnapshot(d time.Duration) {
	h.stats.Snapshots.Add(1)
	h.stats.SnapshotNanos.Add(uint64(d))
	h.metrics.snapshot.Observe(d.Seconds())
}

// raftLogger routes etcd raft's logging to slog. Raft's Info level is
// chatty (every election), so it maps to Debug.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)                   { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Debugf(format string, v ...any)   { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r raftLogger) Info(v ...any)                    { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Infof(format string, v ...any)    { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r raftLogger) Warning(v ...any)                 { r.l.Warn(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(format string, v ...any) { r.l.Warn(fmt.Sprintf(format, v...)) }
func (r raftLogger) Error(v ...any)                   { r.l.Error(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(format string, v ...any)   { r.l.Error(fmt.Sprintf(format, v...)) }
func (r raftLogger) Fatal(v ...any)                   { r.Panic(v...) }
func (r raftLogger) Fatalf(format string, v ...any)   { r.Panicf(format, v...) }
func (r raftLogger) Panic(v ...any) {
	s := fmt.Sprint(v...)
	r.l.Error(s)
	panic(s)
}
func (r raftLogger) Panicf(format string, v ...any) {
	s := fmt.Sprintf(format, v...)
	r.l.Error(s)
	panic(s)
}
