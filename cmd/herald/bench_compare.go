package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"herald/bench/load"
	"herald/client"
)

// benchSide is one of the two settings a scenario compares.
type benchSide struct {
	label string
	// syncSnapshots runs the side on the server started with
	// --sync-snapshots.
	syncSnapshots bool
	// push makes the topic non-persistent, pushing to the bench's sink.
	push       bool
	shards     int // 0: the --shards flag
	batch      int
	eventBytes int
}

type benchScenario struct {
	name  string // also names its topics
	group string // what the command line selects it by
	title string
	sides [2]benchSide
}

// benchScenarios lists every comparison bench compare knows, by group.
func benchScenarios() []benchScenario {
	var list []benchScenario
	for _, size := range []int{1024, 4096} {
		kib := strconv.Itoa(size/1024) + "KiB"
		list = append(list, benchScenario{
			name: "shards-" + kib, group: "shards",
			title: "1 shard vs 11 shards, " + kib + " events",
			sides: [2]benchSide{
				{label: "1 shard", shards: 1, batch: 1, eventBytes: size},
				{label: "11 shards", shards: 11, batch: 1, eventBytes: size},
			},
		})
	}
	for _, batch := range []int{1, 500} {
		n := strconv.Itoa(batch)
		list = append(list, benchScenario{
			name: "snapshots-batch" + n, group: "snapshots",
			title: "snapshots on the apply loop vs in the background, batch " + n,
			sides: [2]benchSide{
				{label: "sync snapshots", syncSnapshots: true, batch: batch, eventBytes: 1024},
				{label: "async snapshots", batch: batch, eventBytes: 1024},
			},
		})
	}
	list = append(list, benchScenario{
		name: "persistence", group: "persistence",
		title: "persistent (fsync) vs non-persistent (synchronous push to a local HTTP sink)",
		sides: [2]benchSide{
			{label: "persistent", batch: 1, eventBytes: 1024},
			{label: "non-persistent", push: true, batch: 1, eventBytes: 1024},
		},
	})
	return list
}

type benchCompareFlags struct {
	rounds          int
	producers       int
	keys            int
	shards          int
	duration        time.Duration
	warmup          time.Duration
	snapshotEntries uint64
	results         string
	binary          string
}

func newBenchCompareCommand(g *globals) *cobra.Command {
	p := benchCompareFlags{rounds: 3, producers: 64, keys: 1024, shards: 11, duration: 10 * time.Second, warmup: time.Second}
	cmd := &cobra.Command{
		Use:   "compare [SCENARIO...]",
		Short: "Compare two settings side by side on servers of its own",
		Long: `Compare two settings side by side. bench compare starts its own herald
servers (this binary, "herald serve", with temporary data directories on free
loopback ports; --server is not used), runs the two settings of each
scenario one after the other, alternating which goes first, for --rounds
rounds, and prints the median of each figure over the rounds. Every run
publishes to a freshly created topic, deleted afterwards.

Scenarios (all of them without arguments):

  shards       1 shard vs 11 shards, with 1 KiB and with 4 KiB events, batch 1
  snapshots    --sync-snapshots (snapshots written on the apply loop) vs the
               default background snapshots, one server each, batch 1 and
               batch 500: look at p99.9 and max
  persistence  a persistent topic (fsync before the ack) vs a non-persistent
               one, which pushes each event synchronously to an HTTP sink
               that bench compare serves on 127.0.0.1 and stores nothing

Events are 1 KiB unless the scenario says otherwise; --producers, --keys,
--duration and --warmup apply to every run. With --output json the report
(medians and every run) is printed as JSON; --results FILE writes it too.
Progress goes to standard error.`,
		Example: `  herald bench compare
  herald bench compare shards --rounds 5 --duration 20s
  herald bench compare snapshots --snapshot-entries 1000 -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			scenarios, err := selectScenarios(args)
			if err != nil {
				return err
			}
			if err := p.validate(); err != nil {
				return err
			}
			return g.benchCompare(cmd, &p, scenarios)
		},
	}
	f := cmd.Flags()
	f.IntVar(&p.rounds, "rounds", p.rounds, "rounds; each runs both settings once")
	f.IntVar(&p.producers, "producers", p.producers, "concurrent producers")
	f.IntVar(&p.keys, "keys", p.keys, "key cardinality")
	f.IntVar(&p.shards, "shards", p.shards, "shards of the topics of the snapshots and persistence scenarios")
	f.DurationVar(&p.duration, "duration", p.duration, "measured length of each run")
	f.DurationVar(&p.warmup, "warmup", p.warmup, "load before each measured run, not counted")
	f.Uint64Var(&p.snapshotEntries, "snapshot-entries", 0, "--snapshot-entries of the servers (0: the server default)")
	f.StringVar(&p.results, "results", "", "also write the report as JSON to this file")
	f.StringVar(&p.binary, "herald-binary", "", "herald binary to run the servers with (default: this one)")
	f.MarkHidden("herald-binary")
	return cmd
}

func (p *benchCompareFlags) validate() error {
	cfg := load.Config{Producers: p.producers, Batch: 1, Keys: p.keys, Duration: p.duration, Warmup: p.warmup}
	if err := cfg.Validate(); err != nil {
		return err
	}
	switch {
	case p.rounds < 1:
		return fmt.Errorf("--rounds %d: want at least 1", p.rounds)
	case p.shards < 1:
		return fmt.Errorf("--shards %d: want at least 1", p.shards)
	case p.duration == 0:
		return errors.New("--duration must be positive")
	}
	return nil
}

func selectScenarios(args []string) ([]benchScenario, error) {
	all := benchScenarios()
	if len(args) == 0 || slices.Contains(args, "all") {
		return all, nil
	}
	var groups []string
	for _, s := range all {
		if !slices.Contains(groups, s.group) {
			groups = append(groups, s.group)
		}
	}
	var out []benchScenario
	for _, s := range all {
		if slices.Contains(args, s.group) {
			out = append(out, s)
		}
	}
	for _, a := range args {
		if !slices.Contains(groups, a) {
			return nil, fmt.Errorf("unknown scenario %q: want one of %s, or all", a, strings.Join(groups, ", "))
		}
	}
	return out, nil
}

// compareReport is the JSON form of a bench compare run.
type compareReport struct {
	Rounds    int               `json:"rounds"`
	Scenarios []compareScenario `json:"scenarios"`
}

type compareScenario struct {
	Name  string         `json:"name"`
	Title string         `json:"title"`
	Sides [2]compareSide `json:"sides"`
}

type compareSide struct {
	Label  string        `json:"label"`
	Median load.Result   `json:"median"`
	Runs   []load.Result `json:"runs"`
}

func (g *globals) benchCompare(cmd *cobra.Command, p *benchCompareFlags, scenarios []benchScenario) (err error) {
	ctx := cmd.Context()
	progress := cmd.ErrOrStderr()
	bin := p.binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("find the herald binary to start servers with: %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "herald-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var extra []string
	if p.snapshotEntries > 0 {
		extra = append(extra, "--snapshot-entries", strconv.FormatUint(p.snapshotEntries, 10))
	}
	servers := map[bool]*benchServer{} // by syncSnapshots
	defer func() {
		for _, s := range servers {
			if serr := s.stop(); err == nil {
				err = serr
			}
		}
	}()
	var sink *pushSink
	defer func() {
		if sink != nil {
			sink.close()
		}
	}()
	for _, sc := range scenarios {
		for _, side := range sc.sides {
			if servers[side.syncSnapshots] != nil {
				continue
			}
			args := slices.Clone(extra)
			name := "herald"
			if side.syncSnapshots {
				args = append(args, "--sync-snapshots")
				name = "herald --sync-snapshots"
			}
			fmt.Fprintf(progress, "starting %s\n", name)
			s, err := startBenchServer(ctx, bin, dir, args...)
			if err != nil {
				return err
			}
			servers[side.syncSnapshots] = s
		}
		if sink == nil && (sc.sides[0].push || sc.sides[1].push) {
			if sink, err = startPushSink(); err != nil {
				return err
			}
		}
	}

	report := compareReport{Rounds: p.rounds}
	for _, sc := range scenarios {
		out := compareScenario{Name: sc.name, Title: sc.title}
		for i := range sc.sides {
			out.Sides[i].Label = sc.sides[i].label
		}
		for round := range p.rounds {
			order := []int{0, 1}
			if round%2 == 1 {
				order = []int{1, 0}
			}
			for _, i := range order {
				side := sc.sides[i]
				fmt.Fprintf(progress, "%s, round %d of %d: %s ... ", sc.name, round+1, p.rounds, side.label)
				res, err := runSide(ctx, p, sc, i, servers[side.syncSnapshots], sink)
				if err != nil {
					fmt.Fprintln(progress, "failed")
					return g.explain(fmt.Errorf("%s, %s: %w%s", sc.name, side.label, err,
						servers[side.syncSnapshots].logTail()))
				}
				fmt.Fprintf(progress, "%.0f events/s, p99 %s ms\n", res.EventsPerSecond, load.FormatMS(res.Latency.P99))
				out.Sides[i].Runs = append(out.Sides[i].Runs, *res)
			}
		}
		for i := range out.Sides {
			out.Sides[i].Median = load.Median(out.Sides[i].Runs)
		}
		report.Scenarios = append(report.Scenarios, out)
	}

	if p.results != "" {
		if err := writeJSONFile(p.results, report); err != nil {
			return err
		}
	}
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), report)
	}
	return printCompare(cmd.OutOrStdout(), &report)
}

// runSide runs one side of a scenario once on a fresh topic of server s.
func runSide(ctx context.Context, p *benchCompareFlags, sc benchScenario, i int, s *benchServer, sink *pushSink) (*load.Result, error) {
	side := sc.sides[i]
	shards := side.shards
	if shards == 0 {
		shards = p.shards
	}
	attrs := map[string]string{"shards": strconv.Itoa(shards)}
	if side.push {
		attrs["persistent"] = "false"
		attrs["push_endpoint"] = sink.url
	}
	cfg := load.Config{
		Producers: p.producers, Batch: side.batch, EventBytes: side.eventBytes, Keys: p.keys,
		Duration: p.duration, Warmup: p.warmup,
	}
	c, closeIdle := benchClient(s.url, p.producers, false, 0, nil)
	defer closeIdle()
	name := fmt.Sprintf("bench-%s-%c", sc.name, 'a'+i)
	t, err := prepareBenchTopic(ctx, c, name, attrs, true)
	if err != nil {
		return nil, err
	}
	res, err := runHeraldLoad(ctx, c, t, cfg)
	// Free the disk for the next run; a failure here only costs space.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	c.DeleteTopic(dctx, name)
	cancel()
	if err != nil {
		return nil, err
	}
	res.Label = side.label
	res.Settings["sync_snapshots"] = strconv.FormatBool(side.syncSnapshots)
	return res, nil
}

func printCompare(w io.Writer, r *compareReport) error {
	for n, sc := range r.Scenarios {
		if n > 0 {
			fmt.Fprintln(w)
		}
		m := sc.Sides[0].Median
		fmt.Fprintf(w, "%s: %s\n%s; median of %d rounds\n", sc.Name, sc.Title, m.Config.Describe(), r.Rounds)
		tw := newTable(w)
		row(tw, "SETTING", "EVENTS/S", "MB/S", "P50 MS", "P90 MS", "P99 MS", "P99.9 MS", "MAX MS", "ERRORS")
		for _, side := range sc.Sides {
			m := side.Median
			l := m.Latency
			row(tw, side.Label, fmt.Sprintf("%.0f", m.EventsPerSecond), fmt.Sprintf("%.2f", m.MBPerSecond),
				load.FormatMS(l.P50), load.FormatMS(l.P90), load.FormatMS(l.P99), load.FormatMS(l.P999),
				load.FormatMS(l.Max), m.Errors)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		a, b := sc.Sides[0].Median, sc.Sides[1].Median
		fmt.Fprintf(w, "%s vs %s: %s events/s, p99 %s, p99.9 %s\n", sc.Sides[1].Label, sc.Sides[0].Label,
			ratio(b.EventsPerSecond, a.EventsPerSecond), ratio(b.Latency.P99, a.Latency.P99),
			ratio(b.Latency.P999, a.Latency.P999))
	}
	return nil
}

func ratio(b, a float64) string {
	if a == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", b/a)
}

// benchServer is a herald server started by bench compare.
type benchServer struct {
	cmd  *exec.Cmd
	url  string
	log  *tailWriter
	done chan struct{}
	err  error // set when done is closed
	once sync.Once
}

// startBenchServer starts "bin serve" on a free loopback port with a data
// directory under dir, and waits until it answers.
func startBenchServer(ctx context.Context, bin, dir string, extra ...string) (*benchServer, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	data, err := os.MkdirTemp(dir, "data-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--data-dir", data, "--listen", addr, "--log-level", "warn"}, extra...)
	s := &benchServer{cmd: exec.Command(bin, args...), url: "http://" + addr, log: &tailWriter{max: 16 << 10}, done: make(chan struct{})}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", bin, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	c := client.New(s.url)
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.ListTopics(cctx)
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("herald serve %s exited: %v%s", strings.Join(args[1:], " "), s.err, s.logTail())
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("herald serve did not answer within a minute: %v%s", err, s.logTail())
		}
	}
}

// stop ends the server with SIGTERM, or SIGKILL if it takes over 30s.
func (s *benchServer) stop() error {
	var err error
	s.once.Do(func() {
		select {
		case <-s.done:
			return
		default:
		}
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
			err = fmt.Errorf("herald serve at %s did not stop within 30s of SIGTERM and was killed", s.url)
		}
	})
	return err
}

// logTail returns the end of the server's log as a suffix for an error.
func (s *benchServer) logTail() string {
	if s == nil {
		return ""
	}
	t := strings.TrimSpace(s.log.String())
	if t == "" {
		return ""
	}
	return "\nserver log:\n" + t
}

func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// tailWriter keeps about the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = slices.Clone(t.buf[len(t.buf)-t.max:])
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) > t.max {
		return "…" + string(t.buf[len(t.buf)-t.max:])
	}
	return string(t.buf)
}

// pushSink is the push endpoint of non-persistent bench topics: an HTTP
// server on loopback that reads each request and answers 200.
type pushSink struct {
	srv      *http.Server
	url      string
	received atomic.Int64
}

func startPushSink() (*pushSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start the push sink: %w", err)
	}
	s := &pushSink{url: "http://" + ln.Addr().String() + "/"}
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			s.received.Add(1)
			w.WriteHeader(http.StatusOK)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *pushSink) close() { s.srv.Close() }
