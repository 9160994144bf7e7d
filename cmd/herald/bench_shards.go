package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"herald/bench/shards"
)

// newBenchShardsCommand is bench shards: it parses the flags and leaves
// the measuring to package bench/shards.
func newBenchShardsCommand(g *globals) *cobra.Command {
	cfg := shards.Config{Shards: []int{1000, 10000}, Runs: 3, Settle: 5 * time.Second, IdleWindow: 20 * time.Second}
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
			if err := checkBenchShards(cfg); err != nil {
				return err
			}
			bin, err := serverBinary(cfg.Binary)
			if err != nil {
				return err
			}
			cfg.Binary = bin
			results, err := shards.Measure(cmd.Context(), cmd.ErrOrStderr(), cfg)
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), results)
			}
			return shards.WriteTable(cmd.OutOrStdout(), results)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&cfg.Shards, "shards", cfg.Shards, "shard counts to measure, each a multiple of 10 (count/10 topics of 10 shards)")
	f.IntVar(&cfg.Runs, "runs", cfg.Runs, "SIGKILL-and-restart runs per shard count; the table shows their median")
	f.DurationVar(&cfg.Settle, "settle", cfg.Settle, "wait this long after the server is ready before measuring idle CPU (idle groups quiesce after a few seconds)")
	f.DurationVar(&cfg.IdleWindow, "idle-window", cfg.IdleWindow, "how long to measure idle CPU for")
	f.StringVar(&cfg.Binary, "binary", "", "herald binary to run as the server (default: this one)")
	f.StringArrayVar(&cfg.ServeArgs, "serve-arg", nil, "extra flag for herald serve (repeatable)")
	f.StringVar(&cfg.Dir, "dir", "", "where to make the data directories (default: the system's temporary directory)")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the data directories")
	return cmd
}

// checkBenchShards says which flag of bench shards is wrong, if one is.
func checkBenchShards(cfg shards.Config) error {
	if len(cfg.Shards) == 0 {
		return errors.New("--shards: give at least one shard count")
	}
	for _, n := range cfg.Shards {
		if n < 10 || n%10 != 0 {
			return fmt.Errorf("--shards %d: want a multiple of 10, at least 10 (the benchmark makes topics of 10 shards)", n)
		}
	}
	if cfg.Runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", cfg.Runs)
	}
	if cfg.IdleWindow <= 0 {
		return fmt.Errorf("--idle-window %s: want a positive duration", cfg.IdleWindow)
	}
	if cfg.Settle < 0 {
		return fmt.Errorf("--settle %s: want zero or a positive duration", cfg.Settle)
	}
	return nil
}

// serverBinary is the herald binary a benchmark runs its servers from:
// binary if set (--binary), else this one.
func serverBinary(binary string) (string, error) {
	if binary != "" {
		return binary, nil
	}
	bin, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this binary to run as the server: %w; pass --binary", err)
	}
	return bin, nil
}
