// Package tier is bench tier: it measures the LRO phase of tiering's
// reconciliation cycles, the time a cycle spends advancing the LROs of
// the shards a node leads, with the advances one by one against many at
// once (herald serve --tier-parallelism). It starts a cluster of herald
// serve processes on loopback, makes topics of many shards, publishes a
// trickle of events to every shard so that segments close and each cycle
// has an LRO to advance for most shards, and reads each cycle's figures
// from the debug line the reconciler logs per cycle: the LRO phase
// histogram (herald_tier_lro_phase_seconds) gives a mean, not a median.
// The herald command's "bench tier" parses the flags and calls Measure.
package tier

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"

	"herald/client"
	"herald/internal/testkit"
	"herald/internal/testkit/heraldproc"
)

// Config is what to measure, and how.
type Config struct {
	Binary      string        // the herald binary to run as the servers
	Nodes       int           // nodes of the cluster
	Topics      int           // topics, each of ShardsPerTopic shards
	TopicShards int           // shards per topic
	Parallelism []int         // --tier-parallelism settings, measured in turn each round
	Rounds      int           // rounds; each measures every setting
	Warmup      int           // cycles per node not counted after a start
	Cycles      int           // cycles per node counted per setting and round
	Interval    time.Duration // --tier-interval
	SegmentSize int           // --segment-size
	TierURL     string        // --tier-url ("": a directory under Dir)
	EventBytes  int           // payload bytes of the trickle's events
	Events      int           // events per topic per publish of the trickle
	Every       time.Duration // between the trickle's publishes to every topic (0: Interval/2)
	MinAdvanced float64       // a cycle counts if it advanced at least this fraction of its node's shards
	ServeArgs   []string      // more flags for herald serve
	Dir         string        // where to make the data directories ("": the system's)
	Keep        bool          // keep the data directories and logs
}

// Cycle is one reconciliation cycle of one node, as its log line says.
type Cycle struct {
	Node     int           `json:"node"`
	Shards   int           `json:"shards"`
	Objects  int           `json:"objects"`
	Bytes    int64         `json:"bytes"`
	Advanced int           `json:"advanced"`
	LROPhase time.Duration `json:"lro_phase"`
	Took     time.Duration `json:"took"`
}

// Summary is what the counted cycles of one setting say.
type Summary struct {
	Cycles         int           `json:"cycles"`  // counted
	Dropped        int           `json:"dropped"` // advanced too few LROs to count
	MedianLRO      time.Duration `json:"median_lro_phase"`
	MeanLRO        time.Duration `json:"mean_lro_phase"`
	MaxLRO         time.Duration `json:"max_lro_phase"`
	MedianPerLRO   time.Duration `json:"median_per_lro"`
	MedianAdvanced int           `json:"median_advanced"`
	MedianCycle    time.Duration `json:"median_cycle"`
	// HistogramMean is herald_tier_lro_phase_seconds' sum over count on
	// every node at the end of the run (warm-up cycles included): the
	// figure to check the log lines against.
	HistogramMean time.Duration `json:"histogram_mean_lro_phase"`
}

// Run is one setting measured in one round.
type Run struct {
	Round       int     `json:"round"`
	Parallelism int     `json:"parallelism"`
	Cycles      []Cycle `json:"cycles"` // counted or not, after the warm-up
	Summary     Summary `json:"summary"`
	Published   int64   `json:"published"` // the trickle's events
	PublishErrs int64   `json:"publish_errors"`
}

// Result is the whole measurement.
type Result struct {
	Shards  int             `json:"shards"`
	Nodes   int             `json:"nodes"`
	Runs    []Run           `json:"runs"`
	Overall map[int]Summary `json:"overall"` // per parallelism, every round's counted cycles together
}

// Measure runs cfg, writing its progress to progress.
func Measure(ctx context.Context, progress io.Writer, cfg Config) (*Result, error) {
	dir, err := os.MkdirTemp(cfg.Dir, "herald-bench-tier-")
	if err != nil {
		return nil, fmt.Errorf("make a data directory: %w", err)
	}
	if cfg.Keep {
		fmt.Fprintf(progress, "data directories and logs: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if cfg.TierURL == "" {
		store := filepath.Join(dir, "store")
		if err := os.Mkdir(store, 0o755); err != nil {
			return nil, err
		}
		cfg.TierURL = "file://" + store
	}
	if cfg.Every <= 0 {
		cfg.Every = cfg.Interval / 2
	}
	addrs := make([]string, cfg.Nodes)
	var peers []string
	for i := range addrs {
		if addrs[i], err = testkit.FreeLoopbackAddr(); err != nil {
			return nil, err
		}
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, addrs[i]))
	}
	c := &cluster{cfg: cfg, dir: dir, addrs: addrs, peers: strings.Join(peers, ",")}
	res := &Result{Shards: cfg.Topics * cfg.TopicShards, Nodes: cfg.Nodes, Overall: make(map[int]Summary)}
	for round := 1; round <= cfg.Rounds; round++ {
		order := slices.Clone(cfg.Parallelism)
		if round%2 == 0 {
			slices.Reverse(order) // alternate, so that a drift of the machine favours neither
		}
		for _, p := range order {
			run, err := c.measure(ctx, progress, round, p)
			if err != nil {
				return res, fmt.Errorf("round %d, --tier-parallelism %d: %w", round, p, err)
			}
			s := run.Summary
			fmt.Fprintf(progress, "round %d, parallelism %d: %d cycles counted (%d dropped), LRO phase median %s, mean %s, per LRO %s, %d advanced\n",
				round, p, s.Cycles, s.Dropped, ms(s.MedianLRO), ms(s.MeanLRO), ms(s.MedianPerLRO), s.MedianAdvanced)
			res.Runs = append(res.Runs, run)
		}
	}
	for _, p := range cfg.Parallelism {
		var all []Cycle
		var hist []time.Duration
		for _, r := range res.Runs {
			if r.Parallelism == p {
				all = append(all, r.Cycles...)
				hist = append(hist, r.Summary.HistogramMean)
			}
		}
		s := summarize(all, cfg.MinAdvanced)
		s.HistogramMean = median(hist)
		res.Overall[p] = s
	}
	return res, nil
}

// cluster is the cluster's fixed parts: its directories and addresses,
// which every start reuses, and whether its topics exist.
type cluster struct {
	cfg    Config
	dir    string
	addrs  []string
	peers  string
	made   bool
	starts int
}

// measure starts the cluster with --tier-parallelism p, makes the topics
// the first time, runs the trickle, collects Warmup+Cycles cycles of each
// node and stops the cluster.
func (c *cluster) measure(ctx context.Context, progress io.Writer, round, p int) (Run, error) {
	run := Run{Round: round, Parallelism: p}
	c.starts++
	lines := &cycleLog{}
	var servers []*heraldproc.Server
	defer func() {
		for _, s := range servers {
			s.Stop(30 * time.Second)
		}
	}()
	for i, addr := range c.addrs {
		logFile, err := os.Create(filepath.Join(c.dir, fmt.Sprintf("node%d-start%d.log", i+1, c.starts)))
		if err != nil {
			return run, err
		}
		defer logFile.Close()
		args := []string{
			"--node-id", strconv.Itoa(i + 1), "--peers", c.peers, "--log-level", "debug",
			"--segment-size", strconv.Itoa(c.cfg.SegmentSize),
			"--tier-url", c.cfg.TierURL, "--tier-parallelism", strconv.Itoa(p), "--tier-interval", c.cfg.Interval.String(),
		}
		s, err := heraldproc.Launch(heraldproc.Config{
			Binary: c.cfg.Binary, DataDir: filepath.Join(c.dir, fmt.Sprintf("node%d", i+1)), Listen: addr,
			Args: append(args, c.cfg.ServeArgs...), Output: io.MultiWriter(logFile, lines.node(i+1)),
			OutputTail: 64 << 10, Timeout: 10 * time.Minute,
		})
		if err != nil {
			return run, err
		}
		servers = append(servers, s)
	}
	start := time.Now()
	for _, s := range servers {
		if err := s.Wait(ctx); err != nil {
			return run, fmt.Errorf("herald serve --listen %s: %w\n%s", s.Addr(), err, s.Output())
		}
	}
	fmt.Fprintf(progress, "round %d, parallelism %d: %d nodes ready in %s\n", round, p, len(servers), time.Since(start).Round(time.Millisecond))
	var clients []*client.Client
	for _, s := range servers {
		cl := client.New(s.URL(), client.WithTimeout(time.Minute))
		defer cl.Close()
		clients = append(clients, cl)
	}
	if !c.made {
		start := time.Now()
		if err := makeTopics(ctx, clients[0], c.cfg.Topics, c.cfg.TopicShards); err != nil {
			return run, fmt.Errorf("create topics: %w", err)
		}
		c.made = true
		fmt.Fprintf(progress, "%d topics of %d shards made in %s\n", c.cfg.Topics, c.cfg.TopicShards, time.Since(start).Round(time.Millisecond))
	}
	tctx, stopTrickle := context.WithCancel(ctx)
	var tr trickle
	var wg sync.WaitGroup
	wg.Go(func() { tr.run(tctx, clients, c.cfg) })
	defer func() { stopTrickle(); wg.Wait() }()
	// Each node's cycles: Warmup not counted, then Cycles counted. A
	// cycle takes at least Interval; give it plenty more.
	want := c.cfg.Warmup + c.cfg.Cycles
	limit := time.Duration(want+2)*c.cfg.Interval*4 + 5*time.Minute
	deadline := time.Now().Add(limit)
	for !lines.each(len(servers), want) {
		if time.Now().After(deadline) {
			return run, fmt.Errorf("fewer than %d cycles per node within %s: %v", want, limit, lines.counts(len(servers)))
		}
		for _, s := range servers {
			select {
			case <-s.Done():
				return run, fmt.Errorf("herald serve --listen %s exited: %v\n%s", s.Addr(), s.Err(), s.Output())
			default:
			}
		}
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	stopTrickle()
	wg.Wait()
	run.Published, run.PublishErrs = tr.published.Load(), tr.failed.Load()
	for n := 1; n <= len(servers); n++ {
		run.Cycles = append(run.Cycles, lines.of(n)[c.cfg.Warmup:want]...)
	}
	run.Summary = summarize(run.Cycles, c.cfg.MinAdvanced)
	var sum, count float64
	for _, s := range servers {
		ms, mc, err := lroHistogram(ctx, s.URL())
		if err != nil {
			return run, err
		}
		sum, count = sum+ms, count+mc
	}
	if count > 0 {
		run.Summary.HistogramMean = time.Duration(sum / count * float64(time.Second))
	}
	return run, nil
}

// makeTopics creates topics topics of shards shards each, 16 at a time.
func makeTopics(ctx context.Context, c *client.Client, topics, shards int) error {
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(16)
	for i := range topics {
		eg.Go(func() error {
			_, err := c.CreateTopic(ctx, topicName(i), map[string]string{"shards": strconv.Itoa(shards)})
			if err != nil && client.IsAlreadyExists(err) {
				err = nil
			}
			return err
		})
	}
	return eg.Wait()
}

func topicName(i int) string { return fmt.Sprintf("tier-%04d", i) }

// trickle publishes a few events to every topic every Every, through the
// nodes in turn, so that every shard closes segments between cycles.
type trickle struct {
	published, failed atomic.Int64
}

func (t *trickle) run(ctx context.Context, clients []*client.Client, cfg Config) {
	payload := make([]byte, cfg.EventBytes)
	rand.Read(payload)
	tick := time.NewTicker(cfg.Every)
	defer tick.Stop()
	for k := 0; ; k++ {
		eg, ectx := errgroup.WithContext(ctx)
		eg.SetLimit(8)
		for i := range cfg.Topics {
			eg.Go(func() error {
				events := make([]client.Event, cfg.Events)
				for j := range events {
					// Keys new each round, so that the events fall on every shard.
					events[j] = client.Event{Key: fmt.Sprintf("%d-%d-%d", k, i, j), Payload: payload}
				}
				if _, err := clients[(i+k)%len(clients)].Publish(ectx, topicName(i), events...); err != nil {
					t.failed.Add(1)
				} else {
					t.published.Add(int64(len(events)))
				}
				return nil
			})
		}
		eg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// cycleLog collects the "tiering cycle" lines of every node's output.
type cycleLog struct {
	mu     sync.Mutex
	cycles map[int][]Cycle
}

// node returns a writer of node's output.
func (l *cycleLog) node(n int) io.Writer { return &lineWriter{log: l, node: n} }

func (l *cycleLog) add(c Cycle) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cycles == nil {
		l.cycles = make(map[int][]Cycle)
	}
	l.cycles[c.Node] = append(l.cycles[c.Node], c)
}

func (l *cycleLog) of(n int) []Cycle {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.cycles[n])
}

// each says whether each of nodes 1 to nodes has logged at least n cycles.
func (l *cycleLog) each(nodes, n int) bool {
	for i := 1; i <= nodes; i++ {
		if len(l.of(i)) < n {
			return false
		}
	}
	return true
}

func (l *cycleLog) counts(nodes int) []int {
	var out []int
	for i := 1; i <= nodes; i++ {
		out = append(out, len(l.of(i)))
	}
	return out
}

// lineWriter splits a node's output into lines and parses those of
// cycles.
type lineWriter struct {
	log  *cycleLog
	node int
	buf  []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		if c, ok := ParseCycle(string(w.buf[:i])); ok {
			c.Node = w.node
			w.log.add(c)
		}
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 1<<20 { // no newline in a megabyte: not a log line
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

// ParseCycle parses the reconciler's debug line of a cycle, as herald
// serve's text log writes it:
//
//	time=... level=DEBUG msg="tiering cycle" shards=333 objects=1 bytes=5120 advanced=333 lro_phase=1.2s took=1.5s ...
func ParseCycle(line string) (Cycle, bool) {
	var c Cycle
	if !strings.Contains(line, `msg="tiering cycle"`) {
		return c, false
	}
	seen := 0
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		var err error
		switch k {
		case "shards":
			c.Shards, err = strconv.Atoi(v)
		case "objects":
			c.Objects, err = strconv.Atoi(v)
		case "bytes":
			c.Bytes, err = strconv.ParseInt(v, 10, 64)
		case "advanced":
			c.Advanced, err = strconv.Atoi(v)
		case "lro_phase":
			c.LROPhase, err = time.ParseDuration(v)
		case "took":
			c.Took, err = time.ParseDuration(v)
		default:
			continue
		}
		if err != nil {
			return c, false
		}
		seen++
	}
	return c, seen == 6
}

// summarize summarizes the cycles that advanced at least minAdvanced of
// their node's shards: those of a node that led hardly any shard, or of
// a trickle that missed a beat, would flatter either setting.
func summarize(cycles []Cycle, minAdvanced float64) Summary {
	var s Summary
	var lro, per, cyc []time.Duration
	var adv []int
	var total time.Duration
	for _, c := range cycles {
		if c.Advanced == 0 || float64(c.Advanced) < minAdvanced*float64(c.Shards) {
			s.Dropped++
			continue
		}
		lro = append(lro, c.LROPhase)
		per = append(per, c.LROPhase/time.Duration(c.Advanced))
		cyc = append(cyc, c.Took)
		adv = append(adv, c.Advanced)
		total += c.LROPhase
		s.MaxLRO = max(s.MaxLRO, c.LROPhase)
	}
	s.Cycles = len(lro)
	if s.Cycles == 0 {
		return s
	}
	s.MedianLRO, s.MedianPerLRO, s.MedianCycle = median(lro), median(per), median(cyc)
	s.MeanLRO = total / time.Duration(s.Cycles)
	slices.Sort(adv)
	s.MedianAdvanced = adv[len(adv)/2]
	return s
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	if len(d)%2 == 1 {
		return d[len(d)/2]
	}
	return (d[len(d)/2-1] + d[len(d)/2]) / 2
}

// lroHistogram reads the sum and count of herald_tier_lro_phase_seconds
// from a node's /metrics.
func lroHistogram(ctx context.Context, url string) (sum, count float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("read %s/metrics: %w", url, err)
	}
	defer resp.Body.Close()
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "herald_tier_lro_phase_seconds_sum":
			sum, err = strconv.ParseFloat(v, 64)
		case "herald_tier_lro_phase_seconds_count":
			count, err = strconv.ParseFloat(v, 64)
		default:
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%s/metrics: %s: %w", url, name, err)
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("read %s/metrics: %w", url, err)
	}
	if found != 2 {
		return 0, 0, errors.New(url + "/metrics has no herald_tier_lro_phase_seconds histogram")
	}
	return sum, count, nil
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) + " ms" }

// WriteTable writes each run and, per setting, all rounds together, with
// the speed-up of each setting over the first.
func WriteTable(w io.Writer, res *Result, parallelism []int) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%d shards, %d nodes\n", res.Shards, res.Nodes)
	fmt.Fprintln(tw, "round\tparallelism\tcycles (dropped)\tLRO phase median\tmean\tmax\tper LRO median\tadvanced median\tcycle median\thistogram mean\tevents published (errors)")
	row := func(round string, p int, s Summary, extra string) {
		fmt.Fprintf(tw, "%s\t%d\t%d (%d)\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", round, p, s.Cycles, s.Dropped,
			ms(s.MedianLRO), ms(s.MeanLRO), ms(s.MaxLRO), ms(s.MedianPerLRO), s.MedianAdvanced, ms(s.MedianCycle), ms(s.HistogramMean), extra)
	}
	for _, r := range res.Runs {
		row(strconv.Itoa(r.Round), r.Parallelism, r.Summary, fmt.Sprintf("%d (%d)", r.Published, r.PublishErrs))
	}
	for _, p := range parallelism {
		row("all", p, res.Overall[p], "")
	}
	if len(parallelism) > 1 {
		base := res.Overall[parallelism[0]]
		for _, p := range parallelism[1:] {
			s := res.Overall[p]
			if s.MedianLRO > 0 && s.MeanLRO > 0 {
				fmt.Fprintf(tw, "speed-up of %d over %d: median %.1fx, mean %.1fx\n", p, parallelism[0],
					float64(base.MedianLRO)/float64(s.MedianLRO), float64(base.MeanLRO)/float64(s.MeanLRO))
			}
		}
	}
	return tw.Flush()
}
