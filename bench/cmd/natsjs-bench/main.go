// Command natsjs-bench runs the load of herald bench publish through NATS
// JetStream and prints the same result: events/s, MB/s and latency
// percentiles from publishing a batch to its PubAcks.
//
// It creates the stream afresh (file storage, --replicas replicas), runs
// the load, then deletes the stream. With the URLs of a cluster's servers,
// the producers connect to them in turn. The load flags are those of herald bench
// publish; run "natsjs-bench --help" for all of them.
//
// Whether the server fsyncs before the PubAck depends on its configuration
// (jetstream { sync_interval: always }); with --monitor, natsjs-bench reads
// it from the server's /varz and records it, otherwise --sync-always says.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"herald/bench/cmd/internal/benchcmd"
	"herald/bench/load"
	"herald/bench/peers/natsjs"
)

func main() { benchcmd.Main("natsjs-bench", run) }

func run(ctx context.Context, args []string) error {
	fs := pflag.NewFlagSet("natsjs-bench", pflag.ContinueOnError)
	cfg := load.DefaultConfig()
	cfg.AddFlags(fs)
	var out benchcmd.Output
	out.AddFlags(fs)
	t := natsjs.Target{}
	fs.StringVar(&t.URL, "url", "nats://127.0.0.1:4222", "NATS server URL, or a cluster's server URLs separated by commas (producers connect to them in turn)")
	fs.IntVar(&t.Replicas, "replicas", 1, "replicas of the stream (R3 needs a cluster of three servers)")
	fs.StringVar(&t.Stream, "stream", "HERALD_BENCH", "stream to create, load and delete; its subjects are STREAM.>")
	monitor := fs.String("monitor", "", "monitoring URL of the server (http://127.0.0.1:8222): read its sync settings from /varz")
	syncAlways := fs.Bool("sync-always", false, "the server runs with sync_interval: always (without --monitor)")
	label := fs.String("label", "", "label of the result (default: from the sync setting)")
	if err := benchcmd.ParseFlags(fs, args, &cfg, &out); err != nil {
		return err
	}

	sync := natsjs.Sync{Always: *syncAlways}
	if *monitor != "" {
		var err error
		if sync, err = natsjs.ReadSync(ctx, *monitor); err != nil {
			return err
		}
	}
	if err := natsjs.Prepare(ctx, t); err != nil {
		return err
	}
	res, err := load.Run(ctx, cfg, natsjs.NewProducer(t, cfg.Batch))
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	natsjs.Delete(dctx, t)
	cancel()
	if err != nil {
		return err
	}
	res.System = "nats-jetstream"
	res.FsyncBeforeAck = sync.Always
	interval := "2m0s (default)"
	if sync.Interval > 0 {
		interval = sync.Interval.String()
	}
	res.Label = "default: sync_interval " + interval + ", acked before fsync"
	if sync.Always {
		interval = "always"
		res.Label = "sync_interval: always"
	}
	if t.Replicas > 1 {
		res.Label = fmt.Sprintf("R%d, %s", t.Replicas, res.Label)
	}
	if *label != "" {
		res.Label = *label
	}
	res.Settings = map[string]string{
		"url": t.URL, "stream": t.Stream, "storage": "file", "replicas": strconv.Itoa(max(t.Replicas, 1)), "sync_interval": interval,
	}
	if sync.Version != "" {
		res.Settings["server_version"] = sync.Version
	}
	return out.Write(os.Stdout, res)
}
