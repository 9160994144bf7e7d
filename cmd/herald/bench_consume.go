package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"herald/bench/load"
	"herald/client"
)

type benchConsumeFlags struct {
	attrFlags
	cc      load.ConsumeConfig
	topic   string
	grpc    bool
	label   string
	results string
	// drainAfter is a pause between the fill and the drain: time for the
	// tiering reconciler to move the backlog to the object store, so that
	// the drain reads it from there.
	drainAfter time.Duration
}

func newBenchConsumeCommand(g *globals) *cobra.Command {
	p := benchConsumeFlags{cc: load.DefaultConsumeConfig(), topic: "bench-consume"}
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Fill a backlog, drain it, and report the drain rate and latency",
		Long: `Fill a topic of the server given by --server with a backlog, then drain it,
and report how fast: events/s and MB/s (10^6 payload bytes per second) of the
drain alone, and latency percentiles p50, p90, p99, p99.9 and max.

The topic (--topic) is deleted and created afresh, with --shards and --attr,
then --producers producers publish --backlog events of --event-bytes random
bytes, each with one of --keys keys, in batches of --fill-batch. None of that
is timed. The topic is deleted at the end.

--mode pull: --consumers consumers each fetch up to --batch events, then
acknowledge their receipts in one request and wait for the acknowledgement
to be committed before fetching again. The drain lasts from the first fetch
to the acknowledgement that completes the backlog. Latency is reported for
the fetches, the acks, and both together.

--mode push: the bench starts an HTTP receiver on 127.0.0.1 and sets the
topic's push_endpoint to it; the drain lasts until every event has arrived
(counted once each, by X-Herald-Event-Id). The server must allow the
loopback endpoint: herald serve --push-allow 127.0.0.1/32.

--drain-after waits that long between the fill and the drain: with herald
serve --tier-url and a small --tier-local-retention, time for the reconciler
to move the backlog to the object store, so that the drain reads it back
from there.

It gives up after --timeout. With --output json the result is printed as
JSON; --results FILE writes the JSON to FILE as well.`,
		Example: `  herald bench consume --backlog 100000 --keys 40 --consumers 4 --batch 100
  herald bench consume --mode push --backlog 10000 --results push.json`,
		Args: nArgs(0, false),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := p.cc.Validate(); err != nil {
				return err
			}
			attrs, err := p.collect(cmd)
			if err != nil {
				return err
			}
			return g.benchConsume(cmd, &p, attrs)
		},
	}
	p.cc.AddFlags(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&p.cc.Mode, "mode", p.cc.Mode, `"pull": fetch and acknowledge batches; "push": delivery to a receiver on 127.0.0.1`)
	f.IntVar(&p.shards, "shards", 0, "number of shards of the topic (default from the server: 11)")
	f.StringArrayVar(&p.attrs, "attr", nil, "topic attribute as name=value (repeatable)")
	f.StringVar(&p.topic, "topic", p.topic, "topic to create afresh, fill, drain and delete")
	f.BoolVar(&p.grpc, "grpc", false, "use gRPC over HTTP/2 instead of the Connect protocol over HTTP/1.1")
	f.StringVar(&p.label, "label", "", `label of the result (default: "N shards, pull" or "N shards, push")`)
	f.StringVar(&p.results, "results", "", "also write the result as JSON to this file")
	f.DurationVar(&p.drainAfter, "drain-after", 0, "wait this long between the fill and the drain (time for tiering to move the backlog to the object store)")
	return cmd
}

func (g *globals) benchConsume(cmd *cobra.Command, p *benchConsumeFlags, attrs map[string]string) error {
	ctx := cmd.Context()
	c, closeIdle := load.HeraldClient(g.server, max(p.cc.Consumers, p.cc.FillProducers), p.grpc, g.tls, g.clientOptions()...)
	defer closeIdle()
	defer c.Close()
	t, err := load.PrepareHeraldTopic(ctx, c, p.topic, attrs, true)
	if err != nil {
		return g.explain(err)
	}
	res, err := fillAndDrain(ctx, c, t, p.cc, p.drainAfter, func() (float64, error) {
		return load.ServerCPU(ctx, &http.Client{Transport: &http.Transport{TLSClientConfig: g.tls}, Timeout: 10 * time.Second}, g.server)
	})
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	if derr := c.DeleteTopic(dctx, t.Name); derr != nil && err == nil {
		err = fmt.Errorf("delete topic %s: %w", t.Name, derr)
	}
	cancel()
	if err != nil {
		return g.explain(err)
	}
	if p.label != "" {
		res.Label = p.label
	}
	res.Settings["server"] = g.server
	if p.grpc {
		res.Settings["protocol"] = "grpc"
	}
	if p.drainAfter > 0 {
		res.Settings["drain_after"] = p.drainAfter.String()
	}
	return writeBenchResult(cmd, g, p.results, res)
}

// fillAndDrain publishes the backlog of cc to t, waits drainAfter, then
// drains it as cc.Mode says, and records the server's CPU time over the drain, read
// with cpu, in the result's settings: in all, per event delivered, and
// per event of the backlog (which, fanned out to several subscriptions,
// is delivered once to each).
func fillAndDrain(ctx context.Context, c *client.Client, t *client.Topic, cc load.ConsumeConfig, drainAfter time.Duration, cpu func() (float64, error)) (*load.Result, error) {
	if err := load.FillHerald(ctx, c, t, cc); err != nil {
		return nil, err
	}
	if drainAfter > 0 {
		select {
		case <-time.After(drainAfter):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	before, err := cpu()
	if err != nil {
		return nil, err
	}
	var res *load.Result
	if cc.Mode == "push" {
		res, err = load.PushHerald(ctx, c, t, cc)
	} else {
		res, err = load.DrainHerald(ctx, c, t, cc)
	}
	if err != nil {
		return nil, err
	}
	after, err := cpu()
	if err != nil {
		return nil, err
	}
	used := after - before
	res.Settings["server_cpu_seconds"] = strconv.FormatFloat(used, 'f', 3, 64)
	res.Settings["server_cpu_us_per_delivered_event"] = strconv.FormatFloat(used/float64(res.Events)*1e6, 'f', 2, 64)
	res.Settings["server_cpu_us_per_published_event"] = strconv.FormatFloat(used/float64(cc.Backlog)*1e6, 'f', 2, 64)
	return res, nil
}
