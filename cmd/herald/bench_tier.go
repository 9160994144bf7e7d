package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"herald/bench/tier"
)

// newBenchTierCommand is bench tier: it parses the flags and leaves the
// measuring to package bench/tier.
func newBenchTierCommand(g *globals) *cobra.Command {
	cfg := tier.Config{
		Nodes: 3, Topics: 100, TopicShards: 10, Parallelism: []int{1, 32}, Rounds: 3, Warmup: 3, Cycles: 5,
		Interval: 5 * time.Second, SegmentSize: 4 << 10, EventBytes: 1024, Events: 50, MinAdvanced: 0.5,
	}
	cmd := &cobra.Command{
		Use:   "tier",
		Short: "Measure the LRO phase of tiering cycles, advances one by one against many at once",
		Long: `Measure the LRO phase of tiering: the time a reconciliation cycle spends
advancing the LROs (last reconciled log indexes) of the shards its node leads,
each a round trip through the shard's Raft group, for each --tier-parallelism
setting in --parallelism.

bench tier starts a cluster of --nodes herald serve processes on loopback
(free ports, data directories of its own, --segment-size small so that
segments close often, --tier-url a directory of its own unless given),
creates --topics topics of --topic-shards shards, and then, --rounds times,
for each setting in turn (the order reversed every other round): restarts
the cluster with that --tier-parallelism, publishes --events events of
--event-bytes bytes with new keys to every topic every --every (a trickle
that closes a segment of every shard between cycles), lets each node run
--warmup cycles, and records its next --cycles cycles.

Each cycle's figures come from the line the reconciler logs per cycle at
debug level ("tiering cycle"). A cycle counts if it advanced the LROs of at
least --min-advanced of its node's shards; the others (a node that leads
hardly any shard, a trickle that missed a beat) are dropped and counted as
such. The table gives per round and setting, and for all rounds together:
the LRO phase's median, mean and max, its median per LRO advanced, the
median number advanced and the median whole cycle, and, to check the log
lines against, herald_tier_lro_phase_seconds' sum over count on /metrics
(warm-up cycles included). The server is this binary (or --binary);
--serve-arg passes flags to it.`,
		Example: `  herald bench tier
  herald bench tier --topics 10 --rounds 1 --cycles 3 --interval 2s
  herald bench tier --tier-url 's3://bucket?endpoint=http://127.0.0.1:5000&region=us-east-1&use_path_style=true'`,
		Args: nArgs(0, false),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkBenchTier(cfg); err != nil {
				return err
			}
			bin, err := serverBinary(cfg.Binary)
			if err != nil {
				return err
			}
			cfg.Binary = bin
			res, err := tier.Measure(cmd.Context(), cmd.ErrOrStderr(), cfg)
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			return tier.WriteTable(cmd.OutOrStdout(), res, cfg.Parallelism)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "nodes of the cluster")
	f.IntVar(&cfg.Topics, "topics", cfg.Topics, "topics to create")
	f.IntVar(&cfg.TopicShards, "topic-shards", cfg.TopicShards, "shards per topic")
	f.IntSliceVar(&cfg.Parallelism, "parallelism", cfg.Parallelism, "--tier-parallelism settings to compare; speed-ups are over the first")
	f.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds, each of which measures every setting")
	f.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "cycles per node not counted after each start")
	f.IntVar(&cfg.Cycles, "cycles", cfg.Cycles, "cycles per node counted per setting and round")
	f.DurationVar(&cfg.Interval, "interval", cfg.Interval, "--tier-interval of the servers")
	f.IntVar(&cfg.SegmentSize, "segment-size", cfg.SegmentSize, "--segment-size of the servers")
	f.StringVar(&cfg.TierURL, "tier-url", "", "--tier-url of the servers (default: a directory of the benchmark's, file://)")
	f.IntVar(&cfg.EventBytes, "event-bytes", cfg.EventBytes, "payload bytes of the trickle's events")
	f.IntVar(&cfg.Events, "events", cfg.Events, "events per topic per publish of the trickle")
	f.DurationVar(&cfg.Every, "every", 0, "time between the trickle's publishes to every topic (default: --interval/2)")
	f.Float64Var(&cfg.MinAdvanced, "min-advanced", cfg.MinAdvanced, "fraction of its node's shards a cycle must advance to count")
	f.StringVar(&cfg.Binary, "binary", "", "herald binary to run as the servers (default: this one)")
	f.StringArrayVar(&cfg.ServeArgs, "serve-arg", nil, "extra flag for herald serve (repeatable)")
	f.StringVar(&cfg.Dir, "dir", "", "where to make the data directories (default: the system's temporary directory)")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the data directories and the servers' logs")
	return cmd
}

// checkBenchTier says which flag of bench tier is wrong, if one is.
func checkBenchTier(cfg tier.Config) error {
	switch {
	case cfg.Nodes < 1:
		return fmt.Errorf("--nodes %d: want at least 1", cfg.Nodes)
	case cfg.Topics < 1 || cfg.TopicShards < 1:
		return errors.New("--topics and --topic-shards: want at least 1")
	case len(cfg.Parallelism) == 0:
		return errors.New("--parallelism: give at least one setting")
	case cfg.Rounds < 1 || cfg.Cycles < 1 || cfg.Warmup < 0:
		return errors.New("--rounds and --cycles: want at least 1; --warmup: at least 0")
	case cfg.Interval <= 0:
		return fmt.Errorf("--interval %s: want a positive duration", cfg.Interval)
	case cfg.Events < 1 || cfg.EventBytes < 1:
		return errors.New("--events and --event-bytes: want at least 1")
	case cfg.MinAdvanced < 0 || cfg.MinAdvanced > 1:
		return fmt.Errorf("--min-advanced %g: want a fraction from 0 to 1", cfg.MinAdvanced)
	}
	for _, p := range cfg.Parallelism {
		if p < 1 {
			return fmt.Errorf("--parallelism %d: want at least 1", p)
		}
	}
	return nil
}
