// Command natsjs-bench runs the load of herald bench publish through NATS
// JetStream and prints the same result: events/s, MB/s and latency
// percentiles from publishing a batch to its PubAcks.
//
// "natsjs-bench consume" fills the stream with a backlog instead (not
// timed), then drains it with pull consumers of one durable consumer, each
// fetching a batch and acking it explicitly, and reports the drain as
// herald bench consume does; its flags are those of herald bench consume.
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
	if len(args) > 0 && args[0] == "consume" {
		return runConsume(ctx, args[1:])
	}
	fs := pflag.NewFlagSet("natsjs-bench", pflag.ContinueOnError)
	cfg := load.DefaultConfig()
	cfg.AddFlags(fs)
	var out benchcmd.Output
	out.AddFlags(fs)
	var f flags
	f.add(fs)
	if err := benchcmd.ParseFlags(fs, args, &cfg, &out); err != nil {
		return err
	}
	res, err := f.measure(ctx, func(t natsjs.Target) (*load.Result, error) {
		return load.Run(ctx, cfg, natsjs.NewProducer(t, cfg.Batch))
	})
	if err != nil {
		return err
	}
	return out.Write(os.Stdout, res)
}

// runConsume fills a stream with a backlog, then drains it with pull
// consumers: "natsjs-bench consume".
func runConsume(ctx context.Context, args []string) error {
	fs := pflag.NewFlagSet("natsjs-bench consume", pflag.ContinueOnError)
	cc := load.DefaultConsumeConfig()
	cc.AddFlags(fs)
	var out benchcmd.Output
	out.AddFlags(fs)
	var f flags
	f.add(fs)
	if err := benchcmd.ParseConsumeFlags(fs, args, &cc, &out); err != nil {
		return err
	}
	res, err := f.measure(ctx, func(t natsjs.Target) (*load.Result, error) {
		return fillAndDrain(ctx, t, cc)
	})
	if err != nil {
		return err
	}
	if !fs.Changed("label") {
		res.Label = "pull consumer, explicit acks, " + res.Label
	}
	res.Settings["consumer"] = "durable pull, explicit ack, batch acks confirmed by a double ack"
	return out.Write(os.Stdout, res)
}

func fillAndDrain(ctx context.Context, t natsjs.Target, cc load.ConsumeConfig) (*load.Result, error) {
	if _, err := load.Run(ctx, cc.Fill(), natsjs.NewProducer(t, cc.FillBatch)); err != nil {
		return nil, fmt.Errorf("fill the backlog: %w", err)
	}
	if err := natsjs.PrepareConsumer(ctx, t, cc); err != nil {
		return nil, err
	}
	return load.Drain(ctx, cc, natsjs.NewConsumer(t))
}

// measure creates the stream afresh, runs do on it, deletes the stream
// (even when ctx has ended), and describes the result.
func (f *flags) measure(ctx context.Context, do func(natsjs.Target) (*load.Result, error)) (*load.Result, error) {
	sync, err := f.sync(ctx)
	if err != nil {
		return nil, err
	}
	t := f.target
	if err := natsjs.Prepare(ctx, t); err != nil {
		return nil, err
	}
	res, err := do(t)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	natsjs.Delete(dctx, t)
	cancel()
	if err != nil {
		return nil, err
	}
	f.describe(res, sync)
	return res, nil
}

// flags are the flags of the stream and its server, and the label.
type flags struct {
	target     natsjs.Target
	monitor    string
	syncAlways bool
	label      string
}

func (f *flags) add(fs *pflag.FlagSet) {
	t := &f.target
	fs.StringVar(&t.URL, "url", "nats://127.0.0.1:4222", "NATS server URL, or a cluster's server URLs separated by commas (clients connect to them in turn)")
	fs.IntVar(&t.Replicas, "replicas", 1, "replicas of the stream (R3 needs a cluster of three servers)")
	fs.StringVar(&t.Stream, "stream", "HERALD_BENCH", "stream to create, load and delete; its subjects are STREAM.>")
	fs.StringVar(&f.monitor, "monitor", "", "monitoring URL of the server (http://127.0.0.1:8222): read its sync settings from /varz")
	fs.BoolVar(&f.syncAlways, "sync-always", false, "the server runs with sync_interval: always (without --monitor)")
	fs.StringVar(&f.label, "label", "", "label of the result (default: from the sync setting)")
}

// sync returns how the server syncs: from --monitor, or as --sync-always
// says.
func (f *flags) sync(ctx context.Context) (natsjs.Sync, error) {
	if f.monitor == "" {
		return natsjs.Sync{Always: f.syncAlways}, nil
	}
	return natsjs.ReadSync(ctx, f.monitor)
}

// describe fills in res's system, label and settings.
func (f *flags) describe(res *load.Result, sync natsjs.Sync) {
	t := f.target
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
	if f.label != "" {
		res.Label = f.label
	}
	res.Settings = map[string]string{
		"url": t.URL, "stream": t.Stream, "storage": "file", "replicas": strconv.Itoa(max(t.Replicas, 1)), "sync_interval": interval,
	}
	if sync.Version != "" {
		res.Settings["server_version"] = sync.Version
	}
}
