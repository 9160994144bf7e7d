// Command rabbitmq-bench runs the load of herald bench publish through a
// RabbitMQ quorum queue with publisher confirms and prints the same result:
// events/s, MB/s and latency percentiles from publishing a batch to its
// confirms.
//
// It declares the queue afresh (x-queue-type=quorum, --replicas members),
// runs the load, then deletes the queue. With the URLs of a cluster's
// nodes, the producers connect to them in turn. A batch of N is N messages published, then N confirms
// awaited. The load flags are those of herald bench publish; run
// "rabbitmq-bench --help" for all of them.
//
// "rabbitmq-bench consume" fills the queue with a backlog instead (not
// timed), then drains it with consumers that each have a prefetch of
// --batch messages and ack each batch with one basic.ack (multiple), and
// reports the drain as herald bench consume does; its flags are those of
// herald bench consume.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"herald/bench/cmd/internal/benchcmd"
	"herald/bench/load"
	"herald/bench/peers/rabbitmq"
)

func main() { benchcmd.Main("rabbitmq-bench", run) }

func run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "consume" {
		return runConsume(ctx, args[1:])
	}
	fs := pflag.NewFlagSet("rabbitmq-bench", pflag.ContinueOnError)
	cfg := load.DefaultConfig()
	cfg.AddFlags(fs)
	var out benchcmd.Output
	out.AddFlags(fs)
	var f flags
	f.add(fs, "quorum queue, publisher confirms")
	if err := benchcmd.ParseFlags(fs, args, &cfg, &out); err != nil {
		return err
	}
	if f.target.Replicas > 0 && !fs.Changed("label") {
		f.label = fmt.Sprintf("quorum queue of %d members, publisher confirms", f.target.Replicas)
	}
	res, err := f.measure(ctx, func(t rabbitmq.Target) (*load.Result, error) {
		return load.Run(ctx, cfg, rabbitmq.NewProducer(t))
	})
	if err != nil {
		return err
	}
	return out.Write(os.Stdout, res)
}

// runConsume fills a queue with a backlog, then drains it with consumers:
// "rabbitmq-bench consume".
func runConsume(ctx context.Context, args []string) error {
	fs := pflag.NewFlagSet("rabbitmq-bench consume", pflag.ContinueOnError)
	cc := load.DefaultConsumeConfig()
	cc.AddFlags(fs)
	var out benchcmd.Output
	out.AddFlags(fs)
	var f flags
	f.add(fs, "quorum queue, prefetch = batch, manual multiple ack")
	if err := benchcmd.ParseConsumeFlags(fs, args, &cc, &out); err != nil {
		return err
	}
	res, err := f.measure(ctx, func(t rabbitmq.Target) (*load.Result, error) {
		return fillAndDrain(ctx, t, cc)
	})
	if err != nil {
		return err
	}
	res.Settings["consumer"] = "basic.consume, prefetch = batch, one basic.ack (multiple) per batch, not confirmed by the broker"
	return out.Write(os.Stdout, res)
}

func fillAndDrain(ctx context.Context, t rabbitmq.Target, cc load.ConsumeConfig) (*load.Result, error) {
	if _, err := load.Run(ctx, cc.Fill(), rabbitmq.NewProducer(t)); err != nil {
		return nil, fmt.Errorf("fill the backlog: %w", err)
	}
	return load.Drain(ctx, cc, rabbitmq.NewConsumer(t, cc.Batch))
}

// measure declares the queue afresh, runs do on it, deletes the queue
// (even when ctx has ended), and describes the result.
func (f *flags) measure(ctx context.Context, do func(rabbitmq.Target) (*load.Result, error)) (*load.Result, error) {
	t := f.target
	version, err := rabbitmq.Version(t.URL)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", t.URL, err)
	}
	if err := rabbitmq.Prepare(ctx, t); err != nil {
		return nil, err
	}
	res, err := do(t)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	rabbitmq.Delete(dctx, t)
	cancel()
	if err != nil {
		return nil, err
	}
	f.describe(res, version)
	return res, nil
}

// flags are the flags of the queue and its broker, and the label.
type flags struct {
	target rabbitmq.Target
	label  string
}

func (f *flags) add(fs *pflag.FlagSet, label string) {
	t := &f.target
	fs.StringVar(&t.URL, "url", "amqp://guest:guest@127.0.0.1:5672/", "AMQP URL of the broker, or a cluster's node URLs separated by commas (clients connect to them in turn)")
	fs.IntVar(&t.Replicas, "replicas", 0, "members of the quorum queue (x-quorum-initial-group-size; 0: RabbitMQ's default)")
	fs.StringVar(&t.Queue, "queue", "herald-bench", "quorum queue to declare, load and delete")
	fs.StringVar(&f.label, "label", label, "label of the result")
}

// describe fills in res's system, label and settings.
func (f *flags) describe(res *load.Result, version string) {
	t := f.target
	res.System = "rabbitmq"
	res.Label = f.label
	res.FsyncBeforeAck = true
	res.Settings = map[string]string{
		"url": t.URL, "queue": t.Queue, "queue_type": "quorum", "confirms": "publisher confirms",
		"server_version": version,
	}
	if t.Replicas > 0 {
		res.Settings["replicas"] = fmt.Sprint(t.Replicas)
	}
}
