package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"herald/bench/load"
	"herald/internal/testkit/heraldproc"
)

// Options shape a comparison; DefaultOptions gives the usual ones.
type Options struct {
	// Binary is the herald binary the servers run.
	Binary    string
	Rounds    int
	Producers int
	Keys      int
	// Shards is the shard count of the scenarios that do not set their own.
	Shards   int
	Duration time.Duration
	Warmup   time.Duration
	// SnapshotEntries is the servers' --snapshot-entries (0: their default).
	SnapshotEntries uint64
}

// DefaultOptions returns the options of a comparison worth reading: three
// rounds of ten seconds per side.
func DefaultOptions() Options {
	return Options{Rounds: 3, Producers: 64, Keys: 1024, Shards: 11, Duration: 10 * time.Second, Warmup: time.Second}
}

// Validate reports the first option that makes no sense, naming its flag.
func (o *Options) Validate() error {
	cfg := load.Config{Producers: o.Producers, Batch: 1, Keys: o.Keys, Duration: o.Duration, Warmup: o.Warmup}
	if err := cfg.Validate(); err != nil {
		return err
	}
	switch {
	case o.Rounds < 1:
		return fmt.Errorf("--rounds %d: want at least 1", o.Rounds)
	case o.Shards < 1:
		return fmt.Errorf("--shards %d: want at least 1", o.Shards)
	case o.Duration == 0:
		return errors.New("--duration must be positive")
	}
	return nil
}

// Run starts the servers and the push sink the scenarios need, runs every
// scenario for o.Rounds rounds, stops what it started, and returns the
// report. Progress goes to progress.
func Run(ctx context.Context, o Options, scenarios []Scenario, progress io.Writer) (_ *Report, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "herald-compare-")
	if err != nil {
		return nil, fmt.Errorf("make a directory for the servers' data: %w", err)
	}
	defer os.RemoveAll(dir)

	servers := map[bool]*heraldproc.Server{} // by Side.SyncSnapshots
	defer func() {
		for _, s := range servers {
			if serr := s.Stop(stopGrace); err == nil {
				err = serr
			}
		}
	}()
	var sink *pushSink
	defer func() {
		if sink == nil {
			return
		}
		if serr := sink.close(); err == nil {
			err = serr
		}
	}()
	for _, sc := range scenarios {
		for _, side := range sc.Sides {
			if servers[side.SyncSnapshots] != nil {
				continue
			}
			s, err := startServerFor(ctx, o, dir, side.SyncSnapshots, progress)
			if err != nil {
				return nil, err
			}
			servers[side.SyncSnapshots] = s
		}
		if sink == nil && (sc.Sides[0].Push || sc.Sides[1].Push) {
			if sink, err = startPushSink(); err != nil {
				return nil, err
			}
		}
	}

	report := &Report{Rounds: o.Rounds}
	for _, sc := range scenarios {
		res, err := runScenario(ctx, o, sc, servers, sink, progress)
		if err != nil {
			return nil, err
		}
		report.Scenarios = append(report.Scenarios, *res)
	}
	return report, nil
}

// syncSnapshotsEnv makes herald serve write its snapshots on the apply
// loop, for the comparison with background snapshots; it is
// cmd/herald's BenchSyncSnapshotsEnv, which a command's package cannot
// export.
const syncSnapshotsEnv = "HERALD_BENCH_SYNC_SNAPSHOTS"

// startServerFor starts the server of the sides with syncSnapshots.
func startServerFor(ctx context.Context, o Options, dir string, syncSnapshots bool, progress io.Writer) (*heraldproc.Server, error) {
	var args []string
	if o.SnapshotEntries > 0 {
		args = append(args, "--snapshot-entries", strconv.FormatUint(o.SnapshotEntries, 10))
	}
	name, env := "herald", []string(nil)
	if syncSnapshots {
		env = []string{syncSnapshotsEnv + "=1"}
		name = "herald with snapshots on the apply loop (" + env[0] + ")"
	}
	fmt.Fprintf(progress, "starting %s\n", name)
	return startServer(ctx, o.Binary, dir, env, args...)
}

// runScenario runs both sides of sc for o.Rounds rounds, alternating which
// goes first, and takes the medians.
func runScenario(ctx context.Context, o Options, sc Scenario, servers map[bool]*heraldproc.Server, sink *pushSink, progress io.Writer) (*ScenarioResult, error) {
	out := &ScenarioResult{Name: sc.Name, Title: sc.Title}
	for i := range sc.Sides {
		out.Sides[i].Label = sc.Sides[i].Label
	}
	for round := range o.Rounds {
		order := []int{0, 1}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			side := sc.Sides[i]
			s := servers[side.SyncSnapshots]
			fmt.Fprintf(progress, "%s, round %d of %d: %s ... ", sc.Name, round+1, o.Rounds, side.Label)
			res, err := runSide(ctx, o, sc, i, s, sink)
			if err != nil {
				fmt.Fprintln(progress, "failed")
				return nil, fmt.Errorf("%s, %s: %w%s", sc.Name, side.Label, err, logTail(s))
			}
			fmt.Fprintf(progress, "%.0f events/s, p99 %s ms\n", res.EventsPerSecond, load.FormatMS(res.Latency.P99))
			out.Sides[i].Runs = append(out.Sides[i].Runs, *res)
		}
	}
	for i := range out.Sides {
		out.Sides[i].Median = load.Median(out.Sides[i].Runs)
	}
	return out, nil
}

// runSide runs side i of sc once on a fresh topic of server s.
func runSide(ctx context.Context, o Options, sc Scenario, i int, s *heraldproc.Server, sink *pushSink) (*load.Result, error) {
	side := sc.Sides[i]
	shards := side.Shards
	if shards == 0 {
		shards = o.Shards
	}
	attrs := map[string]string{"shards": strconv.Itoa(shards)}
	if side.Push {
		attrs["persistent"] = "false"
		attrs["push_endpoint"] = sink.url
	}
	cfg := load.Config{
		Producers: o.Producers, Batch: side.Batch, EventBytes: side.EventBytes, Keys: o.Keys,
		Duration: o.Duration, Warmup: o.Warmup,
	}
	c, closeIdle := load.HeraldClient(s.URL(), o.Producers, false, nil)
	defer closeIdle()
	name := fmt.Sprintf("bench-%s-%c", sc.Name, 'a'+i)
	t, err := load.PrepareHeraldTopic(ctx, c, name, attrs, true)
	if err != nil {
		return nil, err
	}
	res, err := load.RunHerald(ctx, c, t, cfg)
	// Free the disk for the next run; a failure here only costs space.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	c.DeleteTopic(dctx, name)
	cancel()
	if err != nil {
		return nil, err
	}
	res.Label = side.Label
	res.Settings["sync_snapshots"] = strconv.FormatBool(side.SyncSnapshots)
	return res, nil
}
