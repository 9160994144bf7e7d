// Package natsjs drives the publish load of package load through NATS
// JetStream, for comparison with herald.
//
// Every producer has its own connection, to one of the target's servers in
// turn (a cluster's nodes, so that the load comes in through all of them).
// A batch of one is a synchronous
// JetStream publish; a batch of N is N asynchronous publishes followed by a
// wait for their N PubAcks. The PubAck is the acknowledgement measured: the
// stream has stored the message (and fsynced it first only when the server
// runs with jetstream { sync_interval: always }). An event's key becomes
// the last token of its subject, so keys map to NATS subjects.
package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"herald/bench/load"
)

// Target is the stream a load goes to.
type Target struct {
	// URL is the server's (nats://127.0.0.1:4222), or the URLs of a
	// cluster's servers separated by commas.
	URL    string
	Stream string // created with subjects Stream+".>"
	// Replicas is the stream's replica count (0: 1); more than one needs
	// a cluster of as many servers.
	Replicas int
}

// urlFor returns the URL producer i connects to: the servers of URL in
// turn.
func (t Target) urlFor(i int) string {
	urls := strings.Split(t.URL, ",")
	return strings.TrimSpace(urls[i%len(urls)])
}

func (t Target) replicas() int { return max(t.Replicas, 1) }

func (t Target) subject(key string) string { return t.Stream + "." + key }

// Prepare deletes the stream if it exists and creates it afresh: file
// storage, t.Replicas replicas, no limits.
func Prepare(ctx context.Context, t Target) error {
	nc, js, err := t.admin("herald-bench setup")
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := js.DeleteStream(ctx, t.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete stream %s: %w", t.Stream, err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      t.Stream,
		Subjects:  []string{t.Stream + ".>"},
		Storage:   jetstream.FileStorage,
		Replicas:  t.replicas(),
		Retention: jetstream.LimitsPolicy,
	})
	if err != nil {
		return fmt.Errorf("create stream %s: %w", t.Stream, err)
	}
	return nil
}

// Delete removes the stream and its messages.
func Delete(ctx context.Context, t Target) error {
	nc, js, err := t.admin("herald-bench cleanup")
	if err != nil {
		return err
	}
	defer nc.Close()
	return js.DeleteStream(ctx, t.Stream)
}

// admin connects to t for setting up or cleaning up, as name; the caller
// closes the connection.
func (t Target) admin(name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(t.URL, nats.Name(name))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", t.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// NewProducer returns producers that publish to t, each over its own
// connection, with up to batch PubAcks outstanding.
func NewProducer(t Target, batch int) load.NewProducer {
	return func(ctx context.Context, i int) (load.Producer, error) {
		url := t.urlFor(i)
		nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("herald-bench producer %d", i)))
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", url, err)
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(batch, 256)))
		if err != nil {
			nc.Close()
			return nil, err
		}
		return &producer{t: t, nc: nc, js: js}, nil
	}
}

type producer struct {
	t       Target
	nc      *nats.Conn
	js      jetstream.JetStream
	futures []jetstream.PubAckFuture
}

func (p *producer) Publish(ctx context.Context, events []load.Event) error {
	if len(events) == 1 {
		_, err := p.js.Publish(ctx, p.t.subject(events[0].Key), events[0].Payload)
		return err
	}
	p.futures = p.futures[:0]
	for _, e := range events {
		f, err := p.js.PublishAsync(p.t.subject(e.Key), e.Payload)
		if err != nil {
			return err
		}
		p.futures = append(p.futures, f)
	}
	var first error
	for _, f := range p.futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if first == nil {
				first = err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}

func (p *producer) Close() error {
	p.nc.Close()
	return nil
}

// Sync is how a server syncs JetStream writes to disk, as it reports on its
// monitoring endpoint.
type Sync struct {
	Always   bool
	Interval time.Duration
	Version  string
}

// ReadSync asks the monitoring endpoint monitorURL (such as
// http://127.0.0.1:8222) how the server syncs JetStream writes.
func ReadSync(ctx context.Context, monitorURL string) (Sync, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, monitorURL+"/varz", nil)
	if err != nil {
		return Sync{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Sync{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Sync{}, fmt.Errorf("GET %s/varz: %s", monitorURL, resp.Status)
	}
	var v struct {
		Version   string `json:"version"`
		JetStream struct {
			Config *struct {
				SyncInterval time.Duration `json:"sync_interval"`
				SyncAlways   bool          `json:"sync_always"`
			} `json:"config"`
		} `json:"jetstream"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return Sync{}, fmt.Errorf("GET %s/varz: %w", monitorURL, err)
	}
	if v.JetStream.Config == nil {
		return Sync{}, fmt.Errorf("%s/varz reports no JetStream configuration: is JetStream enabled?", monitorURL)
	}
	return Sync{Always: v.JetStream.Config.SyncAlways, Interval: v.JetStream.Config.SyncInterval, Version: v.Version}, nil
}
