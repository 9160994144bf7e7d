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
	fs := pflag.NewFlagSet("rabbitmq-bench", pflag.ContinueOnError)
	cfg := load.DefaultConfig()
	cfg.AddFlags(fs)
	var out benchcmd.Output
	out.AddFlags(fs)
	t := rabbitmq.Target{}
	fs.StringVar(&t.URL, "url", "amqp://guest:guest@127.0.0.1:5672/", "AMQP URL of the broker, or a cluster's node URLs separated by commas (producers connect to them in turn)")
	fs.IntVar(&t.Replicas, "replicas", 0, "members of the quorum queue (x-quorum-initial-group-size; 0: RabbitMQ's default)")
	fs.StringVar(&t.Queue, "queue", "herald-bench", "quorum queue to declare, load and delete")
	label := fs.String("label", "quorum queue, publisher confirms", "label of the result")
	if err := benchcmd.ParseFlags(fs, args, &cfg, &out); err != nil {
		return err
	}

	version, err := rabbitmq.Version(t.URL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", t.URL, err)
	}
	if err := rabbitmq.Prepare(ctx, t); err != nil {
		return err
	}
	res, err := load.Run(ctx, cfg, rabbitmq.NewProducer(t))
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	rabbitmq.Delete(dctx, t)
	cancel()
	if err != nil {
		return err
	}
	res.System = "rabbitmq"
	res.Label = *label
	if t.Replicas > 0 && !fs.Changed("label") {
		res.Label = fmt.Sprintf("quorum queue of %d members, publisher confirms", t.Replicas)
	}
	res.FsyncBeforeAck = true
	res.Settings = map[string]string{
		"url": t.URL, "queue": t.Queue, "queue_type": "quorum", "confirms": "publisher confirms",
		"server_version": version,
	}
	if t.Replicas > 0 {
		res.Settings["replicas"] = fmt.Sprint(t.Replicas)
	}
	return out.Write(os.Stdout, res)
}
