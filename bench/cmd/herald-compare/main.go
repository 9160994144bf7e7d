// Command herald-compare compares two settings of herald side by side. It
// starts its own herald servers ("herald serve", with temporary data
// directories on free loopback ports) from the binary given by
// --herald-binary, or from one it builds from herald/cmd/herald, runs the
// two settings of each scenario one after the other, alternating which goes
// first, for --rounds rounds, and prints the median of each figure over
// the rounds.
//
//	go run ./bench/cmd/herald-compare                         # every scenario
//	go run ./bench/cmd/herald-compare shards --rounds 5 --duration 20s
//	herald-compare --herald-binary bin/herald snapshots -o json
//
// Run "herald-compare --help" for the scenarios and flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/pflag"

	"herald/bench/cmd/internal/benchcmd"
	"herald/bench/compare"
)

const usage = `usage: herald-compare [flags] [SCENARIO...]

Compare two settings of herald side by side. herald-compare starts its own
herald servers (--herald-binary, or a binary it builds from herald/cmd/herald
when run inside the herald module; "herald serve", with temporary data
directories on free loopback ports), runs the two settings of each scenario
one after the other, alternating which goes first, for --rounds rounds, and
prints the median of each figure over the rounds. Every run publishes to a
freshly created topic, deleted afterwards.

Scenarios (all of them without arguments):

  shards       1 shard vs 11 shards, with 1 KiB and with 4 KiB events, batch 1
  snapshots    --sync-snapshots (snapshots written on the apply loop) vs the
               default background snapshots, one server each, batch 1 and
               batch 500: look at p99.9 and max
  persistence  a persistent topic (fsync before the ack) vs a non-persistent
               one, which pushes each event synchronously to an HTTP sink
               that herald-compare serves on 127.0.0.1 and stores nothing

Events are 1 KiB unless the scenario says otherwise; --producers, --keys,
--duration and --warmup apply to every run. With --output json the report
(medians and every run) is printed as JSON; --results FILE writes it too.
Progress goes to standard error.

Flags:
`

func main() {
	benchcmd.Main("herald-compare", func(ctx context.Context, args []string) error {
		return run(ctx, args, os.Stdout, os.Stderr)
	})
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("herald-compare", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	o := compare.DefaultOptions()
	fs.StringVar(&o.Binary, "herald-binary", "", "herald binary to run the servers with (default: build herald/cmd/herald)")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "rounds; each runs both settings once")
	fs.IntVar(&o.Producers, "producers", o.Producers, "concurrent producers")
	fs.IntVar(&o.Keys, "keys", o.Keys, "key cardinality")
	fs.IntVar(&o.Shards, "shards", o.Shards, "shards of the topics of the snapshots and persistence scenarios")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "measured length of each run")
	fs.DurationVar(&o.Warmup, "warmup", o.Warmup, "load before each measured run, not counted")
	fs.Uint64Var(&o.SnapshotEntries, "snapshot-entries", 0, "--snapshot-entries of the servers (0: the server default)")
	var out benchcmd.Output
	out.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	scenarios, err := compare.Select(fs.Args())
	if err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	if err := out.Validate(); err != nil {
		return err
	}
	if o.Binary == "" {
		dir, err := os.MkdirTemp("", "herald-compare-bin-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if o.Binary, err = buildHerald(ctx, dir, stderr); err != nil {
			return err
		}
	}
	report, err := compare.Run(ctx, o, scenarios, stderr)
	if err != nil {
		return err
	}
	return out.WriteValue(stdout, report, report.WriteText)
}

// buildHerald builds herald/cmd/herald into dir and returns the binary's
// path. It works inside the herald module only.
func buildHerald(ctx context.Context, dir string, progress io.Writer) (string, error) {
	bin := filepath.Join(dir, "herald")
	fmt.Fprintln(progress, "building herald/cmd/herald")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "herald/cmd/herald").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build herald: %w\n%s\nrun herald-compare inside the herald module, or pass --herald-binary", err, out)
	}
	return bin, nil
}
