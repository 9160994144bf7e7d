package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"herald/client"
)

// bench shards measures what many shards cost one node: how long a node
// takes to be ready again after a SIGKILL, and what it costs while idle.
// It runs herald serve as a child process (this binary, or --binary), so
// that the boot is measured from exec, as an operator sees it, and the
// process's CPU and memory are its own, not the benchmark's.

type benchShardsFlags struct {
	shards     []int
	runs       int
	settle     time.Duration
	idleWindow time.Duration
	binary     string
	serveArgs  []string
	dir        string
	keep       bool
}

func newBenchShardsCommand(g *globals) *cobra.Command {
	p := benchShardsFlags{shards: []int{1000, 10000}, runs: 3, settle: 5 * time.Second, idleWindow: 20 * time.Second}
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "Measure boot time, idle CPU and memory of a node with many shards",
		Long: `Measure what many shards cost one node. For each count in --shards, bench
shards starts herald serve on a new data directory (loopback, a free port),
creates count/10 topics of 10 shards each, publishes a few events, and then,
--runs times: SIGKILLs the server, starts it again and measures

  boot       from exec to /readyz answering ready (every shard open);
  serving    from exec to the first /readyz answer from the node itself
             (shards may still be opening);
  idle CPU   the server's user+system CPU over --idle-window, starting
             --settle after it was ready, in cores (0.01 = 1% of a core);
  RSS        the server's resident memory at the end of the window;
  files      the files the server has open then (/proc/PID/fd).

It prints the median of the runs, and each run. The server is this binary
(or --binary); --serve-arg passes flags to it, e.g. --serve-arg
--boot-parallelism=1. It reads /proc, so it runs on Linux only. The server
keeps at most half its open-files limit of shard log files open, closing the
least recently used idle ones, so any number of shards fits in the limit.`,
		Example: `  herald bench shards --shards 1000,10000 --runs 3
  herald bench shards --shards 10000 --runs 1 --serve-arg --boot-parallelism=1`,
		Args: nArgs(0, false),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := p.check(); err != nil {
				return err
			}
			return g.benchShards(cmd, &p)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&p.shards, "shards", p.shards, "shard counts to measure, each a multiple of 10 (count/10 topics of 10 shards)")
	f.IntVar(&p.runs, "runs", p.runs, "SIGKILL-and-restart runs per shard count; the table shows their median")
	f.DurationVar(&p.settle, "settle", p.settle, "wait this long after the server is ready before measuring idle CPU (idle groups quiesce after a few seconds)")
	f.DurationVar(&p.idleWindow, "idle-window", p.idleWindow, "how long to measure idle CPU for")
	f.StringVar(&p.binary, "binary", "", "herald binary to run as the server (default: this one)")
	f.StringArrayVar(&p.serveArgs, "serve-arg", nil, "extra flag for herald serve (repeatable)")
	f.StringVar(&p.dir, "dir", "", "where to make the data directories (default: the system's temporary directory)")
	f.BoolVar(&p.keep, "keep", false, "keep the data directories")
	return cmd
}

func (p *benchShardsFlags) check() error {
	if len(p.shards) == 0 {
		return errors.New("--shards: give at least one shard count")
	}
	for _, n := range p.shards {
		if n < 10 || n%10 != 0 {
			return fmt.Errorf("--shards %d: want a multiple of 10, at least 10 (the benchmark makes topics of 10 shards)", n)
		}
	}
	if p.runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", p.runs)
	}
	if p.idleWindow <= 0 {
		return fmt.Errorf("--idle-window %s: want a positive duration", p.idleWindow)
	}
	if p.settle < 0 {
		return fmt.Errorf("--settle %s: want zero or a positive duration", p.settle)
	}
	return nil
}

// shardsRun is one restart of the server.
type shardsRun struct {
	Boot    time.Duration `json:"boot"`
	Serving time.Duration `json:"serving"`
	IdleCPU float64       `json:"idle_cpu_cores"`
	RSS     int64         `json:"rss_bytes"`
	Files   int           `json:"open_files"`
}

// shardsResult is what bench shards measured for one shard count.
type shardsResult struct {
	Shards int           `json:"shards"`
	Setup  time.Duration `json:"setup"`
	Runs   []shardsRun   `json:"runs"`
	Median shardsRun     `json:"median"`
}

func (g *globals) benchShards(cmd *cobra.Command, p *benchShardsFlags) error {
	bin := p.binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("find this binary to run as the server: %w; pass --binary", err)
		}
	}
	var results []shardsResult
	for _, n := range p.shards {
		res, err := benchShardCount(cmd.Context(), cmd.ErrOrStderr(), bin, p, n)
		if err != nil {
			return fmt.Errorf("%d shards: %w", n, err)
		}
		results = append(results, res)
	}
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), results)
	}
	return writeShardsTable(cmd.OutOrStdout(), results)
}

func benchShardCount(ctx context.Context, progress io.Writer, bin string, p *benchShardsFlags, n int) (shardsResult, error) {
	res := shardsResult{Shards: n}
	dir, err := os.MkdirTemp(p.dir, "herald-bench-shards-")
	if err != nil {
		return res, fmt.Errorf("make a data directory: %w", err)
	}
	if p.keep {
		fmt.Fprintf(progress, "data directory: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		return res, err
	}
	srv, err := startBenchServer(bin, dir, addr, p.serveArgs)
	if err != nil {
		return res, err
	}
	defer func() { srv.kill() }()
	if _, _, err := srv.waitReady(ctx, 10*time.Minute); err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "%d shards: creating %d topics\n", n, n/10)
	start := time.Now()
	if err := makeShards(ctx, "http://"+addr, n/10); err != nil {
		return res, fmt.Errorf("create topics: %w\n%s", err, srv.output())
	}
	res.Setup = time.Since(start)
	fmt.Fprintf(progress, "%d shards: made in %s\n", n, res.Setup.Round(time.Millisecond))
	for i := range p.runs {
		srv.kill()
		if srv, err = startBenchServer(bin, dir, addr, p.serveArgs); err != nil {
			return res, err
		}
		run, err := measureRestart(ctx, srv, p)
		if err != nil {
			return res, fmt.Errorf("run %d: %w", i+1, err)
		}
		fmt.Fprintf(progress, "%d shards, run %d: boot %s, serving %s, idle CPU %.3f cores, RSS %d MiB, %d files open\n",
			n, i+1, run.Boot.Round(time.Millisecond), run.Serving.Round(time.Millisecond), run.IdleCPU, run.RSS>>20, run.Files)
		res.Runs = append(res.Runs, run)
	}
	res.Median = medianRun(res.Runs)
	return res, nil
}

// makeShards creates topics topics of 10 shards each, then publishes a
// few events to the first hundred, so that some shards have a log to
// replay.
func makeShards(ctx context.Context, url string, topics int) error {
	c := client.New(url, client.WithTimeout(time.Minute))
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(16)
	for i := range topics {
		eg.Go(func() error {
			name := fmt.Sprintf("shards-%06d", i)
			if _, err := c.CreateTopic(ctx, name, map[string]string{"shards": "10"}); err != nil {
				return err
			}
			if i >= 100 {
				return nil
			}
			var events []client.Event
			for k := range 20 {
				events = append(events, client.Event{Key: "key-" + strconv.Itoa(k), Payload: []byte("bench shards")})
			}
			_, err := c.Publish(ctx, name, events...)
			return err
		})
	}
	return eg.Wait()
}

// measureRestart measures a server started a moment ago.
func measureRestart(ctx context.Context, srv *benchServer, p *benchShardsFlags) (shardsRun, error) {
	var run shardsRun
	boot, serving, err := srv.waitReady(ctx, 10*time.Minute)
	if err != nil {
		return run, err
	}
	run.Boot, run.Serving = boot, serving
	select {
	case <-time.After(p.settle):
	case <-ctx.Done():
		return run, ctx.Err()
	}
	before, err := cpuTime(srv.pid())
	if err != nil {
		return run, err
	}
	select {
	case <-time.After(p.idleWindow):
	case <-ctx.Done():
		return run, ctx.Err()
	}
	after, err := cpuTime(srv.pid())
	if err != nil {
		return run, err
	}
	run.IdleCPU = (after - before).Seconds() / p.idleWindow.Seconds()
	if run.RSS, err = residentBytes(srv.pid()); err != nil {
		return run, err
	}
	if run.Files, err = openFiles(srv.pid()); err != nil {
		return run, err
	}
	return run, nil
}

func medianRun(runs []shardsRun) shardsRun {
	med := func(f func(shardsRun) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return shardsRun{
		Boot:    time.Duration(med(func(r shardsRun) float64 { return float64(r.Boot) })),
		Serving: time.Duration(med(func(r shardsRun) float64 { return float64(r.Serving) })),
		IdleCPU: med(func(r shardsRun) float64 { return r.IdleCPU }),
		RSS:     int64(med(func(r shardsRun) float64 { return float64(r.RSS) })),
		Files:   int(med(func(r shardsRun) float64 { return float64(r.Files) })),
	}
}

func writeShardsTable(w io.Writer, results []shardsResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "shards\tsetup\tboot to ready\tserving\tidle CPU (cores)\tRSS (MiB)\tfiles open\truns")
	for _, r := range results {
		m := r.Median
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.3f\t%d\t%d\t%d\n", r.Shards, r.Setup.Round(100*time.Millisecond),
			m.Boot.Round(10*time.Millisecond), m.Serving.Round(10*time.Millisecond), m.IdleCPU, m.RSS>>20, m.Files, len(r.Runs))
	}
	return tw.Flush()
}

// freeLoopbackAddr returns a loopback address with a port free a moment
// ago.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free loopback port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// benchServer is a herald serve child process.
type benchServer struct {
	cmd   *exec.Cmd
	addr  string
	start time.Time
	done  chan struct{}
	mu    sync.Mutex
	out   bytes.Buffer // the server's output, for errors
}

func startBenchServer(bin, dir, addr string, extra []string) (*benchServer, error) {
	args := append([]string{"serve", "--data-dir", dir, "--listen", addr, "--log-level", "warn"}, extra...)
	s := &benchServer{addr: addr, done: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s, s
	// Should the benchmark die, its server dies with it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.start = time.Now()
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", bin, err)
	}
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// Write keeps the last 64 KiB of the server's output.
func (s *benchServer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out.Write(b)
	if extra := s.out.Len() - 64<<10; extra > 0 {
		s.out.Next(extra)
	}
	return len(b), nil
}

func (s *benchServer) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

func (s *benchServer) pid() int { return s.cmd.Process.Pid }

func (s *benchServer) kill() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// waitReady polls /readyz until it answers ready, and returns how long
// after the exec that was, and when the node itself first answered (a
// JSON body, ready or not: before that, the server answers that it is
// starting).
func (s *benchServer) waitReady(ctx context.Context, limit time.Duration) (ready, serving time.Duration, err error) {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for {
		status, body, err := getReadyz(ctx, hc, s.addr)
		now := time.Since(s.start)
		if err == nil && json.Valid(body) {
			if serving == 0 {
				serving = now
			}
			var r struct {
				Ready  bool              `json:"ready"`
				Broken map[string]string `json:"unavailable_shards"`
			}
			if json.Unmarshal(body, &r) == nil && r.Ready && status == http.StatusOK {
				if len(r.Broken) > 0 {
					return 0, 0, brokenShardsError(r.Broken)
				}
				return now, serving, nil
			}
		}
		select {
		case <-s.done:
			return 0, 0, fmt.Errorf("herald serve exited before it was ready:\n%s", s.output())
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("herald serve was not ready within %s:\n%s", limit, s.output())
		}
	}
}

// brokenShardsError says that shards could not be opened: the figures of
// a node serving only some of its shards would mean nothing.
func brokenShardsError(broken map[string]string) error {
	names := slices.Sorted(maps.Keys(broken))
	return fmt.Errorf("%d shards could not be opened, %s first: %s", len(names), names[0], broken[names[0]])
}

func getReadyz(ctx context.Context, hc *http.Client, addr string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// clockTicks is Linux's USER_HZ, the unit of the CPU times in
// /proc/PID/stat: 100 on every architecture Go supports.
const clockTicks = 100

// cpuTime returns the user plus system CPU time process pid has used.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read the server's CPU time (bench shards needs Linux's /proc): %w", err)
	}
	return parseCPUTime(string(b))
}

// parseCPUTime reads utime and stime, fields 14 and 15 of /proc/PID/stat.
// The command name, field 2, is in parentheses and may hold spaces, so
// fields are counted from the last ')'.
func parseCPUTime(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/PID/stat %q: no command name in parentheses", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/PID/stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] { // fields 14 and 15, counting the pid and the name as 1 and 2
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/PID/stat: CPU time %q: %w", s, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// openFiles returns how many files process pid has open.
func openFiles(pid int) (int, error) {
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return 0, fmt.Errorf("count the server's open files (bench shards needs Linux's /proc): %w", err)
	}
	return len(fds), nil
}

// residentBytes returns the resident memory of process pid.
func residentBytes(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, fmt.Errorf("read the server's memory (bench shards needs Linux's /proc): %w", err)
	}
	return parseVmRSS(string(b))
}

// parseVmRSS reads the VmRSS line of /proc/PID/status.
func parseVmRSS(status string) (int64, error) {
	for line := range strings.Lines(status) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("/proc/PID/status: VmRSS line %q, want a number of kB", strings.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/PID/status: VmRSS %q: %w", f[0], err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("/proc/PID/status has no VmRSS line")
}
