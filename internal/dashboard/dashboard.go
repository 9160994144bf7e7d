// Package dashboard is herald's web dashboard, served by the node itself
// at /dashboard/: its topics and shards, their backlog (events, bytes,
// age of the oldest event), publish and delivery rates, retries, and dead
// letters with buttons to replay or purge them, with charts of the last
// minutes; each topic's subscriptions with their lag, delivery rate,
// health and dead letters, and buttons to disable and enable them; and
// the cluster's nodes with, per shard, its replicas, preferred leader and
// leader.
//
// The page is one server-rendered HTML document with a small script and
// style sheet, embedded in the binary; nothing is loaded from elsewhere.
// The page itself holds no data. The script polls data/state, which the
// API's token check lets any valid token read, and lists, replays and
// purges dead letters, enables and disables subscriptions and reads the
// cluster's status (ClusterStatus) through the API's JSON procedures,
// which need the admin scope. The token is asked for when the server
// wants one and kept in the browser's session storage.
//
// The charts come from the node's own counters: Run samples every topic's
// statistics at an interval and keeps the last samples in memory, and
// each subscription's delivered count for its rate.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"herald/internal/node"
	"herald/internal/topic"
)

//go:embed assets
var assets embed.FS

var page = template.Must(template.ParseFS(assets, "assets/index.html"))

// Config configures a Dashboard. Zero values take the defaults.
type Config struct {
	// Interval is the time between samples of the counters: 5 s.
	Interval time.Duration
	// Keep is how many samples each chart shows: 120 (10 minutes at 5 s).
	Keep int
	// Logger receives sampling failures: slog.Default().
	Logger *slog.Logger
}

// Dashboard serves the dashboard of one node.
type Dashboard struct {
	node *node.Node
	cfg  Config

	mu      sync.Mutex
	history map[string]*series // by topic name
	// subRates are the last two samples of each subscription's delivered
	// count, by topic and id: ids are never reused, so a subscription
	// deleted and created again under its name starts afresh.
	subRates map[subKey]*[2]subSample
}

type subKey struct {
	topic string
	id    uint64
}

// subSample is a subscription's delivered count at one moment.
type subSample struct {
	at        time.Time
	delivered uint64
}

// New returns the dashboard of n. Call Run to record the charts' history.
func New(n *node.Node, cfg Config) *Dashboard {
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Keep <= 0 {
		cfg.Keep = 120
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Dashboard{node: n, cfg: cfg, history: make(map[string]*series), subRates: make(map[subKey]*[2]subSample)}
}

// series are the samples of one topic, oldest first.
type series struct {
	samples []sample
	// version is the node's StatsVersion of the topic when its counters
	// were last read, delivered its subscriptions' delivered counts then,
	// and stale the samples taken since without reading them.
	version   uint64
	delivered map[uint64]uint64
	stale     int
}

// rereadEvery bounds how many samples in a row repeat a topic's counters
// because its StatsVersion held: a read that failed in part (a shard
// busy, a shard of another node) is not repeated for longer than that.
const rereadEvery = 12

// sample is a topic's counters at one moment.
type sample struct {
	at                                   time.Time
	published, delivered, retried, dead  uint64 // counters since creation
	backlogEvents, backlogBytes, letters int64
}

// Run samples the counters every Interval until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	for {
		d.sample(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample records one sample of every topic and subscription, and forgets
// deleted ones. A topic whose counters have not changed since they were
// last read (node.StatsVersion) is not read again, up to rereadEvery
// samples: its last sample and its subscriptions' are repeated, so that
// an idle node of many shards costs next to nothing to chart.
func (d *Dashboard) sample(ctx context.Context, now time.Time) {
	topics := d.node.TopicNames()
	reads := make(map[string]*topicRead, len(topics))
	taken := make(map[string]sample, len(topics))
	var toRead []string
	d.mu.Lock()
	for _, name := range topics {
		v, err := d.node.StatsVersion(name)
		if err != nil {
			continue // deleted since the list
		}
		h := d.history[name]
		if h == nil || h.version != v || h.stale >= rereadEvery || len(h.samples) == 0 {
			reads[name] = &topicRead{version: v, delivered: make(map[uint64]uint64)}
			toRead = append(toRead, name)
			continue
		}
		h.stale++
		s := h.samples[len(h.samples)-1]
		s.at = now
		taken[name] = s
	}
	d.mu.Unlock()

	for _, name := range toRead {
		st, err := d.node.TopicStats(ctx, name)
		if err != nil {
			if ctx.Err() == nil {
				d.cfg.Logger.Debug("dashboard: sample topic statistics", "topic", name, "err", err)
			}
			delete(reads, name)
			continue
		}
		taken[name] = sampleOf(now, st.Total.Stats)
	}
	d.sampleSubscriptions(ctx, toRead, reads)

	d.mu.Lock()
	defer d.mu.Unlock()
	for name := range d.history {
		if _, ok := taken[name]; !ok && !slices.Contains(topics, name) {
			delete(d.history, name)
		}
	}
	subs := make(map[subKey]subSample)
	for name, s := range taken {
		h := d.history[name]
		if h == nil {
			// Topics first charted together are read again at different
			// samples, not all at once.
			h = &series{stale: rand.IntN(rereadEvery)}
			d.history[name] = h
		}
		h.samples = append(h.samples, s)
		if over := len(h.samples) - d.cfg.Keep; over > 0 {
			h.samples = slices.Delete(h.samples, 0, over)
		}
		if r := reads[name]; r != nil {
			h.version, h.delivered, h.stale = r.version, r.delivered, 0
			if r.failed {
				h.stale = rereadEvery // read again at the next sample
			}
		}
		for id, n := range h.delivered {
			subs[subKey{name, id}] = subSample{at: now, delivered: n}
		}
	}
	d.recordSubscriptions(subs)
}

// topicRead is what one sample read of a topic's counters.
type topicRead struct {
	version   uint64            // the topic's StatsVersion before the read
	delivered map[uint64]uint64 // by subscription id
	failed    bool              // the subscriptions could not be read
}

// sampleSubscriptions reads the delivered count of every subscription of
// topics into reads, reading each topic's shards once for all its
// subscriptions.
func (d *Dashboard) sampleSubscriptions(ctx context.Context, topics []string, reads map[string]*topicRead) {
	for _, name := range topics {
		r := reads[name]
		if r == nil {
			continue
		}
		subs, stats, err := d.subscriptionStats(ctx, name)
		if err != nil {
			if ctx.Err() == nil {
				d.cfg.Logger.Debug("dashboard: sample subscription statistics", "topic", name, "err", err)
			}
			r.failed = true
			continue
		}
		for i, sub := range subs {
			if stats[i].Total.Err == nil {
				r.delivered[sub.ID] = stats[i].Total.Stats.Delivered
			}
		}
	}
}

// subscriptionStats returns a topic's subscriptions and their statistics.
func (d *Dashboard) subscriptionStats(ctx context.Context, topicName string) ([]node.Subscription, []node.TopicStats, error) {
	subs, err := d.node.ListSubscriptions(ctx, topicName)
	if err != nil {
		return nil, nil, fmt.Errorf("list the subscriptions of %s: %w", topicName, err)
	}
	stats, err := d.node.SubscriptionsStats(ctx, topicName, subs)
	if err != nil {
		return nil, nil, fmt.Errorf("statistics of the subscriptions of %s: %w", topicName, err)
	}
	return subs, stats, nil
}

// recordSubscriptions keeps the new samples after the previous ones and
// forgets the subscriptions that were not sampled. The caller holds d.mu.
func (d *Dashboard) recordSubscriptions(taken map[subKey]subSample) {
	for k := range d.subRates {
		if _, ok := taken[k]; !ok {
			delete(d.subRates, k)
		}
	}
	for k, s := range taken {
		last := d.subRates[k]
		if last == nil {
			last = &[2]subSample{}
			d.subRates[k] = last
		}
		last[0], last[1] = last[1], s
	}
}

// subscriptionRate is a subscription's deliveries per second over the
// last sampling interval; 0 until it has two samples.
func (d *Dashboard) subscriptionRate(k subKey) float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	last := d.subRates[k]
	if last == nil || last[0].at.IsZero() {
		return 0
	}
	secs := last[1].at.Sub(last[0].at).Seconds()
	if secs <= 0 {
		return 0
	}
	return rate(last[0].delivered, last[1].delivered, secs)
}

func sampleOf(at time.Time, st node.QueueStats) sample {
	return sample{
		at: at, published: st.Published, delivered: st.Delivered, retried: st.Retried, dead: st.DeadLettered,
		backlogEvents: st.Events, backlogBytes: st.Bytes, letters: st.DeadLetters,
	}
}

// ServeHTTP serves the page at / and the data at data/state, relative to
// where the handler is mounted (the API mounts it at /dashboard/).
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the dashboard is read with GET", http.StatusMethodNotAllowed)
		return
	}
	base, rest := splitMount(r.URL.Path)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch rest {
	case "":
		d.servePage(w, base)
	case "data/state":
		d.serveState(w, r)
	case "app.js", "app.css":
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, assetFiles(), rest)
	default:
		http.NotFound(w, r)
	}
}

// splitMount splits a path under /dashboard/ into the mount point and the
// rest.
func splitMount(p string) (base, rest string) {
	const mount = "/dashboard/"
	if len(p) >= len(mount) && p[:len(mount)] == mount {
		return mount, p[len(mount):]
	}
	return mount, ""
}

func assetFiles() fs.FS {
	sub, _ := fs.Sub(assets, "assets") // the directory is embedded: no error
	return sub
}

func (d *Dashboard) servePage(w http.ResponseWriter, base string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// Nothing but the page's own script and styles may run or load.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	page.Execute(w, struct {
		Base     string
		Interval float64
	}{base, d.cfg.Interval.Seconds()})
}

// state is what data/state answers: every topic with its shards and the
// history of its counters.
type state struct {
	Time     time.Time    `json:"time"`
	Interval float64      `json:"interval_seconds"`
	Topics   []topicState `json:"topics"`
}

type topicState struct {
	Name          string              `json:"name"`
	PushEndpoint  string              `json:"push_endpoint,omitempty"` // redacted, as the API shows it
	Persistent    bool                `json:"persistent"`
	Total         shardState          `json:"total"`
	Shards        []shardState        `json:"shards"`
	History       history             `json:"history"`
	Subscriptions []subscriptionState `json:"subscriptions"`
}

// subscriptionState is one subscription of a topic: what it delivers
// where, its lag and rate, its health and whether it is disabled.
type subscriptionState struct {
	Name         string `json:"name"`
	ID           uint64 `json:"id"`
	PushEndpoint string `json:"push_endpoint,omitempty"` // redacted, as the API shows it
	Filter       string `json:"filter,omitempty"`
	// Events and OldestAge are its lag; the counters are its own.
	Events       int64   `json:"events"`
	OldestAge    float64 `json:"oldest_age_seconds"`
	Delivered    uint64  `json:"delivered"`
	Skipped      uint64  `json:"skipped"`
	Retried      uint64  `json:"retried"`
	DeadLetters  int64   `json:"dead_letters"`
	DeliveryRate float64 `json:"delivery_rate"` // per second, over the last interval
	Error        string  `json:"error,omitempty"`
	// Delivery is its push health on the shards this node leads; Partial
	// says other nodes lead some of its shards.
	Delivery       *healthState `json:"delivery,omitempty"`
	Partial        bool         `json:"partial,omitempty"`
	Disabled       bool         `json:"disabled"`
	DisabledReason string       `json:"disabled_reason,omitempty"`
	DisabledAge    float64      `json:"disabled_age_seconds,omitempty"`
}

type shardState struct {
	Name         string  `json:"name"`
	Events       int64   `json:"events"`
	Bytes        int64   `json:"bytes"`
	OldestAge    float64 `json:"oldest_age_seconds"`
	Published    uint64  `json:"published"`
	Delivered    uint64  `json:"delivered"`
	Retried      uint64  `json:"retried"`
	DeadLettered uint64  `json:"dead_lettered"`
	DeadLetters  int64   `json:"dead_letters"`
	Leased       int     `json:"leased"`
	Error        string  `json:"error,omitempty"`
	PublishRate  float64 `json:"publish_rate"`  // per second, over the last interval
	DeliveryRate float64 `json:"delivery_rate"` // per second, over the last interval
	// Delivery is how pushes are going, from this node's memory: only for
	// shards it leads (node.ShardStats.Delivery).
	Delivery *healthState `json:"delivery,omitempty"`
	// Tiering: the bytes of the log on this node's disk and in the object
	// store, and why the last cycle failed (node.ShardStats).
	LocalBytes  int64  `json:"local_bytes"`
	TieredBytes int64  `json:"tiered_bytes"`
	TierError   string `json:"tier_error,omitempty"`
}

// healthState is node.DeliveryHealth with times as ages, so that the page
// does not depend on the browser's clock; an age of -1 means never.
type healthState struct {
	ConsecutiveFailures uint64  `json:"consecutive_failures"`
	LastError           string  `json:"last_error,omitempty"`
	LastErrorAge        float64 `json:"last_error_age_seconds"`
	LastSuccessAge      float64 `json:"last_success_age_seconds"`
	FailingFor          float64 `json:"failing_for_seconds"` // 0 unless failing
	PausedFor           float64 `json:"paused_for_seconds"`  // 0 unless the endpoint asked to wait
}

func healthStateOf(h *node.DeliveryHealth, now time.Time) *healthState {
	if h == nil {
		return nil
	}
	age := func(t time.Time) float64 {
		if t.IsZero() {
			return -1
		}
		return max(0, now.Sub(t).Seconds())
	}
	out := &healthState{ConsecutiveFailures: h.ConsecutiveFailures, LastError: h.LastError,
		LastErrorAge: age(h.LastErrorTime), LastSuccessAge: age(h.LastSuccess)}
	if !h.FailingSince.IsZero() {
		out.FailingFor = max(0, now.Sub(h.FailingSince).Seconds())
	}
	if h.PausedUntil.After(now) {
		out.PausedFor = h.PausedUntil.Sub(now).Seconds()
	}
	return out
}

// history are a topic's charts: at each sample time, the rates over the
// interval before it and the backlog then.
type history struct {
	Time         []int64   `json:"time"` // Unix milliseconds
	PublishRate  []float64 `json:"publish_rate"`
	DeliveryRate []float64 `json:"delivery_rate"`
	RetryRate    []float64 `json:"retry_rate"`
	Backlog      []int64   `json:"backlog"`
	DeadLetters  []int64   `json:"dead_letters"`
}

func (d *Dashboard) serveState(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	st := state{Time: now, Interval: d.cfg.Interval.Seconds(), Topics: []topicState{}}
	for _, t := range d.node.ListTopics() {
		ts, err := d.node.TopicStats(r.Context(), t.Name)
		if err != nil {
			continue // deleted meanwhile
		}
		out := topicState{
			Name: t.Name, PushEndpoint: t.Attributes["push_endpoint"], Persistent: t.Attributes["persistent"] != "false",
			Total: shardStateOf(ts.Total, now),
		}
		for _, s := range ts.Shards {
			out.Shards = append(out.Shards, shardStateOf(s, now))
		}
		out.History = d.historyOf(t.Name, &out.Total)
		out.Subscriptions = d.subscriptionStates(r.Context(), t.Name, now)
		st.Topics = append(st.Topics, out)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(st)
}

// subscriptionStates returns a topic's subscriptions as the page shows
// them; none if they cannot be read now (the topic was deleted meanwhile,
// say): the next poll tries again.
func (d *Dashboard) subscriptionStates(ctx context.Context, topicName string, now time.Time) []subscriptionState {
	out := []subscriptionState{}
	subs, stats, err := d.subscriptionStats(ctx, topicName)
	if err != nil {
		d.cfg.Logger.Debug("dashboard: subscriptions", "topic", topicName, "err", err)
		return out
	}
	for i, sub := range subs {
		out = append(out, d.subscriptionStateOf(sub, stats[i], now))
	}
	return out
}

func (d *Dashboard) subscriptionStateOf(sub node.Subscription, st node.TopicStats, now time.Time) subscriptionState {
	total := shardStateOf(st.Total, now)
	out := subscriptionState{
		Name: sub.Name, ID: sub.ID, PushEndpoint: sub.Attributes["push_endpoint"], Filter: filterText(sub.Attributes),
		Events: total.Events, OldestAge: total.OldestAge, Delivered: total.Delivered, Skipped: st.Total.Stats.Skipped,
		Retried: total.Retried, DeadLetters: total.DeadLetters, Error: total.Error, Delivery: total.Delivery,
		DeliveryRate: d.subscriptionRate(subKey{sub.Topic, sub.ID}),
		Disabled:     sub.Disabled, DisabledReason: sub.DisabledReason,
	}
	out.Partial = slices.ContainsFunc(st.Shards, func(s node.ShardStats) bool { return s.Delivery == nil && s.Err == nil })
	if sub.Disabled {
		out.DisabledAge = max(0, now.Sub(sub.DisabledAt).Seconds())
	}
	return out
}

// filterText is a subscription's filter on one line: its filter policy
// and key prefix, if it has them.
func filterText(attrs map[string]string) string {
	parts := []string{}
	if p := attrs["filter_policy"]; p != "" {
		text := strings.Join(strings.Fields(p), " ")
		if attrs["filter_policy_scope"] == topic.ScopeBody {
			text += " (on the body)"
		}
		parts = append(parts, text)
	}
	if k := attrs["key_prefix"]; k != "" {
		parts = append(parts, "key prefix "+k)
	}
	return strings.Join(parts, "; ")
}

func shardStateOf(s node.ShardStats, now time.Time) shardState {
	st := s.Stats
	out := shardState{
		Name: s.Name, Events: st.Events, Bytes: st.Bytes, Published: st.Published, Delivered: st.Delivered,
		Retried: st.Retried, DeadLettered: st.DeadLettered, DeadLetters: st.DeadLetters, Leased: s.Leased,
		Delivery:   healthStateOf(s.Delivery, now),
		LocalBytes: s.LocalBytes, TieredBytes: s.TieredBytes, TierError: s.TierError,
	}
	if st.OldestEventTime != 0 {
		out.OldestAge = max(0, now.Sub(time.Unix(0, st.OldestEventTime)).Seconds())
	}
	if s.Err != nil {
		out.Error = s.Err.Error()
	}
	return out
}

// historyOf returns the charts of a topic, and sets total's rates to the
// latest.
func (d *Dashboard) historyOf(name string, total *shardState) history {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := history{Time: []int64{}, PublishRate: []float64{}, DeliveryRate: []float64{}, RetryRate: []float64{}, Backlog: []int64{}, DeadLetters: []int64{}}
	s := d.history[name]
	if s == nil {
		return h
	}
	for i := 1; i < len(s.samples); i++ {
		prev, cur := s.samples[i-1], s.samples[i]
		secs := cur.at.Sub(prev.at).Seconds()
		if secs <= 0 {
			continue
		}
		h.Time = append(h.Time, cur.at.UnixMilli())
		h.PublishRate = append(h.PublishRate, rate(prev.published, cur.published, secs))
		h.DeliveryRate = append(h.DeliveryRate, rate(prev.delivered, cur.delivered, secs))
		h.RetryRate = append(h.RetryRate, rate(prev.retried, cur.retried, secs))
		h.Backlog = append(h.Backlog, cur.backlogEvents)
		h.DeadLetters = append(h.DeadLetters, cur.letters)
	}
	if n := len(h.Time); n > 0 {
		total.PublishRate, total.DeliveryRate = h.PublishRate[n-1], h.DeliveryRate[n-1]
	}
	return h
}

// rate is the change of a counter per second; a counter that went down
// (the topic was recreated) counts from zero.
func rate(prev, cur uint64, secs float64) float64 {
	if cur < prev {
		prev = 0
	}
	return float64(cur-prev) / secs
}
