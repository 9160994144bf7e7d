package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"herald/bench/load"
	"herald/client"
)

func newBenchCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure publish and consume throughput and latency",
		Long: `Measure how fast herald takes events.

bench publish runs a publish load against the server given by --server and
reports events/s, MB/s and latency percentiles. To compare two settings side
by side on servers of its own (shard counts, synchronous and background
snapshots, persistent and non-persistent topics), run
"go run ./bench/cmd/herald-compare" in the herald repository.

bench consume fills a topic with a backlog, then drains it, by pull
(fetch and ack in batches) or by push (to a receiver of its own on
127.0.0.1), and reports the drain's events/s and latency percentiles.

Producers each wait for their batch to be acknowledged (committed: fsynced)
before sending the next one; latency is the time from sending a batch to its
acknowledgement. The same load generator drives the peer clients under bench/
(NATS JetStream, RabbitMQ), so their figures compare directly.`,
		Example: `  herald bench publish --producers 64 --event-bytes 1024 --duration 20s
  herald bench consume --backlog 100000 --consumers 4 --batch 100`,
	}
	cmd.AddCommand(newBenchPublishCommand(g), newBenchConsumeCommand(g), newBenchShardsCommand(g), newBenchTierCommand(g))
	return cmd
}

type benchPublishFlags struct {
	attrFlags
	cfg        load.Config
	topic      string
	fresh      bool
	grpc       bool
	label      string
	batched    int // > 0: client.WithPublishBatching
	through    []string
	routing    bool // client.WithLeaderRouting
	stream     bool // client.WithPublishStream
	streamRPC  bool // client.WithPublishStreamRPC
	results    string
	cpuProfile string
	subs       int // >= 0: load.PullSubscriptions
}

func newBenchPublishCommand(g *globals) *cobra.Command {
	p := benchPublishFlags{cfg: load.DefaultConfig(), topic: "bench"}
	cmd := &cobra.Command{
		Use:   "publish",
		Short: "Publish a load to a topic and report throughput and latency",
		Long: `Publish a load to a topic of the server given by --server and report what
was acknowledged: events/s, MB/s (10^6 payload bytes per second) and batch
latency percentiles p50, p90, p99, p99.9 and max, from sending a batch to its
acknowledgement.

--producers producers publish concurrently; each sends --batch events of
--event-bytes random bytes in one request, each event with one of --keys
keys picked at random, and waits for the acknowledgement before sending the
next batch. The run lasts --duration, or --count events, after --warmup.

The topic (--topic) is created if it does not exist, with --shards and the
other attribute flags, and max_queue_bytes=0 (no limit) unless --attr sets
it, since nothing consumes the events. --fresh deletes and recreates it
first, which also frees the disk space of earlier runs.

With --through, the producers publish through the other nodes of a cluster
as well as through --server, each node in turn; the topic is made through
--server. With --leader-routing, they send each batch straight to the nodes
that lead its events' shards instead (client.WithLeaderRouting), learning
where shards are led from --server, or the --through nodes if it is down.

With --output json the result is printed as JSON; --results FILE writes the
JSON to FILE as well, whatever --output says.`,
		Example: `  herald bench publish --topic bench --fresh --shards 11 --producers 64 --event-bytes 1024 --duration 20s
  herald bench publish --batch 500 --count 1000000 --results herald.json
  herald bench publish --server http://127.0.0.1:7601 --through http://127.0.0.1:7602,http://127.0.0.1:7603
  herald bench publish --server http://127.0.0.1:7601 --leader-routing
  herald bench publish --producers 64 --stream-rpc
  herald bench publish --topic np --persistent=false --push-endpoint http://127.0.0.1:9000/`,
		Args: nArgs(0, false),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := p.cfg.Resolve(cmd.Flags()); err != nil {
				return err
			}
			attrs, err := p.collect(cmd)
			if err != nil {
				return err
			}
			return g.benchPublish(cmd, &p, attrs)
		},
	}
	p.register(cmd, true)
	p.cfg.AddFlags(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&p.topic, "topic", p.topic, "topic to publish to; created if missing")
	f.BoolVar(&p.fresh, "fresh", false, "delete the topic and all its events first, then create it")
	f.BoolVar(&p.grpc, "grpc", false, "use gRPC over HTTP/2 instead of the Connect protocol over HTTP/1.1")
	f.IntVar(&p.batched, "client-batching", 0, "let the producers' concurrent publishes share requests of up to N events (client.WithPublishBatching); each producer still waits for its own acknowledgement (0: off)")
	f.StringSliceVar(&p.through, "through", nil, "other nodes of the cluster (URLs, comma-separated) that the producers publish through too, taking --server and them in turn")
	f.BoolVar(&p.routing, "leader-routing", false, "send each batch straight to the nodes leading its events' shards (client.WithLeaderRouting), rather than through --server (and --through), which forward what they do not lead")
	f.BoolVar(&p.stream, "stream", false, "publish over publish streams (client.WithPublishStream): one connection per node carries every producer's calls, each answered on its own, instead of an HTTP request per batch")
	f.BoolVar(&p.streamRPC, "stream-rpc", false, "publish over the PublishStream RPC (gRPC over HTTP/2, client.WithPublishStreamRPC), the publish stream of gRPC clients in other languages, rather than herald's own stream over HTTP/1.1; implies --stream")
	f.StringVar(&p.label, "label", "", `label of the result (default: "N shards", plus "non-persistent")`)
	f.StringVar(&p.results, "results", "", "also write the result as JSON to this file")
	f.IntVar(&p.subs, "subscriptions", -1, "give the topic this many pull subscriptions, none of which consumes: its default one and N-1 more (0: none, events go nowhere); to measure publishing with fan-out (default: leave the topic's as they are)")
	f.StringVar(&p.cpuProfile, "cpu-profile", "", "write a CPU profile of the load generator over the whole run (warm-up included) to this file, for go tool pprof")
	return cmd
}

func (g *globals) benchPublish(cmd *cobra.Command, p *benchPublishFlags, attrs map[string]string) error {
	ctx := cmd.Context()
	opts := g.clientOptions()
	if p.batched > 0 {
		opts = append(opts, client.WithPublishBatching(p.batched))
	}
	if p.stream {
		opts = append(opts, client.WithPublishStream())
	}
	if p.streamRPC {
		opts = append(opts, client.WithPublishStreamRPC())
	}
	servers := append([]string{g.server}, p.through...)
	if p.routing {
		// One client, which finds the leaders itself.
		opts = append(opts, client.WithLeaderRouting(p.through...))
		servers = servers[:1]
	}
	var clients []*client.Client
	for _, server := range servers {
		c, closeIdle := load.HeraldClient(server, p.cfg.Producers, p.grpc, g.tls, opts...)
		defer closeIdle()
		defer c.Close()
		clients = append(clients, c)
	}
	t, err := load.PrepareHeraldTopic(ctx, clients[0], p.topic, attrs, p.fresh)
	if err != nil {
		return g.explain(err)
	}
	if err := waitForTopic(ctx, clients[1:], t.Name); err != nil {
		return g.explain(err)
	}
	if p.subs >= 0 {
		if err := load.PullSubscriptions(ctx, clients[0], t.Name, p.subs); err != nil {
			return g.explain(err)
		}
	}
	stopProfile, err := startCPUProfile(p.cpuProfile)
	if err != nil {
		return err
	}
	res, err := load.RunHeraldThrough(ctx, clients, t, p.cfg)
	if perr := stopProfile(); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return g.explain(err)
	}
	if p.label != "" {
		res.Label = p.label
	}
	res.Settings["server"] = g.server
	if len(p.through) > 0 {
		res.Settings["through"] = strings.Join(p.through, ",")
	}
	if p.grpc {
		res.Settings["protocol"] = "grpc"
	}
	if p.routing {
		res.Settings["leader_routing"] = "true"
		if p.label == "" {
			res.Label += ", leader routing"
		}
	}
	switch {
	case p.streamRPC:
		res.Settings["publish_stream"] = "rpc"
		if p.label == "" {
			res.Label += ", PublishStream RPC"
		}
	case p.stream:
		res.Settings["publish_stream"] = "true"
		if p.label == "" {
			res.Label += ", publish stream"
		}
	}
	if p.subs >= 0 {
		res.Settings["subscriptions"] = strconv.Itoa(p.subs)
		if p.label == "" {
			res.Label += fmt.Sprintf(", %d subscriptions", p.subs)
		}
	}
	if p.batched > 0 {
		res.Settings["client_batching"] = strconv.Itoa(p.batched)
		if p.label == "" {
			res.Label += ", client batching"
		}
	}
	return writeBenchResult(cmd, g, p.results, res)
}

// waitForTopic waits, for up to 30 seconds, until the topic is known
// through each of the other nodes cs, which apply its creation a moment
// after the node it was created through.
func waitForTopic(ctx context.Context, cs []*client.Client, topic string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, c := range cs {
		if err := load.WaitForTopic(ctx, c, topic); err != nil {
			return err
		}
	}
	return nil
}

// writeBenchResult prints v for people or as JSON, and writes its JSON to
// the file results if that is set.
func writeBenchResult(cmd *cobra.Command, g *globals, results string, res *load.Result) error {
	if results != "" {
		if err := writeJSONFile(results, res); err != nil {
			return err
		}
	}
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	return load.WriteText(cmd.OutOrStdout(), res)
}

func writeJSONFile(name string, v any) error {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("--results: %w", err)
	}
	if err := writeJSON(f, v); err != nil {
		f.Close()
		return fmt.Errorf("--results: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--results: %w", err)
	}
	return nil
}

// startCPUProfile profiles this process into the file name until the
// returned function is called; with an empty name it does nothing. The
// load generator shares the machine with the server, so its own cost is
// half of what a benchmark on one machine measures.
func startCPUProfile(name string) (stop func() error, err error) {
	if name == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile %s: %w", name, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("--cpu-profile %s: %w", name, err)
		}
		return nil
	}, nil
}
