// Package shards is bench shards: it measures what many shards cost one
// node, how long a node takes to be ready again after a SIGKILL, and what
// it costs while idle. It runs herald serve as a child process, so that
// the boot is measured from exec, as an operator sees it, and the
// process's CPU and memory are its own, not the benchmark's. The herald
// command's "bench shards" parses the flags and calls Measure.
package shards

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"

	"herald/bench/proccpu"
	"herald/client"
	"herald/internal/testkit/heraldproc"
)

// Config is what to measure, and how.
type Config struct {
	Shards     []int         // shard counts, each a multiple of 10
	Runs       int           // SIGKILL-and-restart runs per shard count
	Settle     time.Duration // wait after ready before measuring idle CPU
	IdleWindow time.Duration // how long to measure idle CPU for
	Binary     string        // the herald binary to run as the server
	ServeArgs  []string      // more flags for herald serve
	Dir        string        // where to make the data directories ("": the system's)
	Keep       bool          // keep the data directories
}

// Run is one restart of the server.
type Run struct {
	Boot    time.Duration `json:"boot"`
	Serving time.Duration `json:"serving"`
	IdleCPU float64       `json:"idle_cpu_cores"`
	RSS     int64         `json:"rss_bytes"`
	Files   int           `json:"open_files"`
}

// Result is what bench shards measured for one shard count.
type Result struct {
	Shards int           `json:"shards"`
	Setup  time.Duration `json:"setup"`
	Runs   []Run         `json:"runs"`
	Median Run           `json:"median"`
}

// Measure measures each shard count of cfg in turn, writing its progress
// to progress.
func Measure(ctx context.Context, progress io.Writer, cfg Config) ([]Result, error) {
	var results []Result
	for _, n := range cfg.Shards {
		res, err := measureCount(ctx, progress, cfg, n)
		if err != nil {
			return results, fmt.Errorf("%d shards: %w", n, err)
		}
		results = append(results, res)
	}
	return results, nil
}

func measureCount(ctx context.Context, progress io.Writer, cfg Config, n int) (Result, error) {
	res := Result{Shards: n}
	dir, err := os.MkdirTemp(cfg.Dir, "herald-bench-shards-")
	if err != nil {
		return res, fmt.Errorf("make a data directory: %w", err)
	}
	if cfg.Keep {
		fmt.Fprintf(progress, "data directory: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	serve := heraldproc.Config{
		Binary:     cfg.Binary,
		DataDir:    dir,
		Args:       append([]string{"--log-level", "warn"}, cfg.ServeArgs...),
		OutputTail: 64 << 10,
	}
	srv, err := heraldproc.Launch(serve)
	if err != nil {
		return res, err
	}
	serve.Listen = srv.Addr() // the restarts reuse the port
	defer func() { srv.Kill() }()
	if _, err := waitReady(ctx, srv); err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "%d shards: creating %d topics\n", n, n/10)
	start := time.Now()
	if err := makeShards(ctx, srv.URL(), n/10); err != nil {
		return res, fmt.Errorf("create topics: %w\n%s", err, srv.Output())
	}
	res.Setup = time.Since(start)
	fmt.Fprintf(progress, "%d shards: made in %s\n", n, res.Setup.Round(time.Millisecond))
	for i := range cfg.Runs {
		srv.Kill()
		if srv, err = heraldproc.Launch(serve); err != nil {
			return res, err
		}
		run, err := measureRestart(ctx, srv, cfg)
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

// waitReady waits up to ten minutes for /readyz of a server launched a
// moment ago to say ready, with every shard open.
func waitReady(ctx context.Context, srv *heraldproc.Server) (heraldproc.Readiness, error) {
	const limit = 10 * time.Minute
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	r, err := srv.WaitReady(ctx)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return r, fmt.Errorf("herald serve was not ready within %s:\n%s", limit, srv.Output())
	case err != nil:
		return r, fmt.Errorf("herald serve was not ready: %w\n%s", err, srv.Output())
	case len(r.Unavailable) > 0:
		return r, brokenShardsError(r.Unavailable)
	}
	return r, nil
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
func measureRestart(ctx context.Context, srv *heraldproc.Server, cfg Config) (Run, error) {
	var run Run
	r, err := waitReady(ctx, srv)
	if err != nil {
		return run, err
	}
	run.Boot, run.Serving = r.Ready, r.Serving
	select {
	case <-time.After(cfg.Settle):
	case <-ctx.Done():
		return run, ctx.Err()
	}
	before, err := proccpu.Of(srv.Pid())
	if err != nil {
		return run, err
	}
	select {
	case <-time.After(cfg.IdleWindow):
	case <-ctx.Done():
		return run, ctx.Err()
	}
	after, err := proccpu.Of(srv.Pid())
	if err != nil {
		return run, err
	}
	run.IdleCPU = (after - before).Seconds() / cfg.IdleWindow.Seconds()
	if run.RSS, err = residentBytes(srv.Pid()); err != nil {
		return run, err
	}
	if run.Files, err = openFiles(srv.Pid()); err != nil {
		return run, err
	}
	return run, nil
}

func medianRun(runs []Run) Run {
	med := func(f func(Run) float64) float64 {
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
	return Run{
		Boot:    time.Duration(med(func(r Run) float64 { return float64(r.Boot) })),
		Serving: time.Duration(med(func(r Run) float64 { return float64(r.Serving) })),
		IdleCPU: med(func(r Run) float64 { return r.IdleCPU }),
		RSS:     int64(med(func(r Run) float64 { return float64(r.RSS) })),
		Files:   int(med(func(r Run) float64 { return float64(r.Files) })),
	}
}

// WriteTable writes the medians of results as a table.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "shards\tsetup\tboot to ready\tserving\tidle CPU (cores)\tRSS (MiB)\tfiles open\truns")
	for _, r := range results {
		m := r.Median
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.3f\t%d\t%d\t%d\n", r.Shards, r.Setup.Round(100*time.Millisecond),
			m.Boot.Round(10*time.Millisecond), m.Serving.Round(10*time.Millisecond), m.IdleCPU, m.RSS>>20, m.Files, len(r.Runs))
	}
	return tw.Flush()
}

// brokenShardsError says that shards could not be opened: the figures of
// a node serving only some of its shards would mean nothing.
func brokenShardsError(broken map[string]string) error {
	names := slices.Sorted(maps.Keys(broken))
	return fmt.Errorf("%d shards could not be opened, %s first: %s", len(names), names[0], broken[names[0]])
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
