package load

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"time"

	"herald/client"
)

// HeraldClient returns a client for the herald server at server whose
// connection pool keeps a connection per producer, and a function that
// closes the idle connections. tc, if not nil, verifies an https://
// server (the client's own WithTLSConfig does not reach a pool given to
// it). With grpc, it speaks gRPC over HTTP/2 (unencrypted for http://)
// instead of the Connect protocol over HTTP/1.1.
func HeraldClient(server string, producers int, grpc bool, tc *tls.Config, opts ...client.Option) (*client.Client, func()) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = producers + 16
	tr.MaxIdleConnsPerHost = producers + 16
	tr.TLSClientConfig = tc
	opts = append([]client.Option{client.WithHTTPClient(&http.Client{Transport: tr})}, opts...)
	if grpc {
		var protocols http.Protocols
		protocols.SetUnencryptedHTTP2(true)
		protocols.SetHTTP2(true)
		tr.Protocols = &protocols
		opts = append(opts, client.WithGRPC())
	}
	return client.New(server, opts...), tr.CloseIdleConnections
}

// PrepareHeraldTopic makes sure the topic name exists with attrs,
// recreating it when fresh is set, and returns it. Attributes of an
// existing topic are left alone, except that a differing shard count is an
// error. Unless attrs says otherwise, the topic has no size limit
// (max_queue_bytes=0), since nothing consumes a load's events.
func PrepareHeraldTopic(ctx context.Context, c *client.Client, name string, attrs map[string]string, fresh bool) (*client.Topic, error) {
	attrs = maps.Clone(attrs)
	if attrs == nil {
		attrs = map[string]string{}
	}
	if _, ok := attrs["max_queue_bytes"]; !ok {
		attrs["max_queue_bytes"] = "0"
	}
	if fresh {
		if err := c.DeleteTopic(ctx, name); err != nil && !client.IsNotFound(err) {
			return nil, fmt.Errorf("delete topic %s: %w", name, err)
		}
	} else {
		t, err := c.GetTopic(ctx, name)
		switch {
		case err == nil:
			if want, ok := attrs["shards"]; ok && want != t.Attributes["shards"] {
				return nil, fmt.Errorf("topic %s exists with %s shards, not %s; pass --fresh to recreate it, or another --topic",
					name, t.Attributes["shards"], want)
			}
			return t, nil
		case !client.IsNotFound(err):
			return nil, err
		}
	}
	t, err := c.CreateTopic(ctx, name, attrs)
	if err != nil {
		return nil, fmt.Errorf("create topic %s: %w", name, err)
	}
	return t, nil
}

// WaitForTopic waits until the topic name is known through c, or ctx
// ends: on a cluster's other nodes, a topic just created through one node
// appears once they have applied its creation.
func WaitForTopic(ctx context.Context, c *client.Client, name string) error {
	for {
		_, err := c.GetTopic(ctx, name)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s did not appear through every node: %w", name, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// RunHerald runs the load cfg against topic t through c, and labels the
// result with the topic's shard count and persistence.
func RunHerald(ctx context.Context, c *client.Client, t *client.Topic, cfg Config) (*Result, error) {
	return RunHeraldThrough(ctx, []*client.Client{c}, t, cfg)
}

// RunHeraldThrough is RunHerald through several nodes of a cluster:
// producer i publishes through cs[i mod len(cs)], so that the load comes in
// through every node (those that do not lead a shard forward to its
// leader).
func RunHeraldThrough(ctx context.Context, cs []*client.Client, t *client.Topic, cfg Config) (*Result, error) {
	if len(cs) == 0 {
		return nil, errors.New("no herald client to publish through")
	}
	res, err := Run(ctx, cfg, func(_ context.Context, i int) (Producer, error) {
		return &heraldProducer{c: cs[i%len(cs)], topic: t.Name}, nil
	})
	if err != nil {
		return nil, err
	}
	describeHerald(res, t)
	return res, nil
}

// describeHerald fills in res's system, durability, label and settings
// from topic t: its shard count, persistence and push endpoint.
func describeHerald(res *Result, t *client.Topic) {
	a := t.Attributes
	persistent, _ := strconv.ParseBool(a["persistent"])
	res.System = "herald"
	res.FsyncBeforeAck = persistent
	res.Label = a["shards"] + " shards"
	if a["shards"] == "1" {
		res.Label = "1 shard"
	}
	if !persistent {
		res.Label += ", non-persistent"
	}
	res.Settings = map[string]string{"topic": t.Name, "shards": a["shards"], "persistent": a["persistent"]}
	if a["push_endpoint"] != "" {
		res.Settings["push_endpoint"] = a["push_endpoint"]
	}
}

// heraldProducer publishes each batch in one request.
type heraldProducer struct {
	c      *client.Client
	topic  string
	events []client.Event
}

func (p *heraldProducer) Publish(ctx context.Context, events []Event) error {
	p.events = p.events[:0]
	for _, e := range events {
		p.events = append(p.events, client.Event{Key: e.Key, Payload: e.Payload})
	}
	ids, err := p.c.Publish(ctx, p.topic, p.events...)
	if err == nil && len(ids) != len(events) {
		err = fmt.Errorf("published %d events, got %d ids", len(events), len(ids))
	}
	return err
}
