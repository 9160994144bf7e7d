package client

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// WithPublishBatching makes concurrent Publish calls to the same topic share
// requests, the way Kafka producers batch: while requests to a topic are in
// flight, further calls queue, and the next request carries every queued
// event (up to maxEvents). Each call still returns only once its own events
// are committed, with their own ids, so callers see no difference except
// throughput: many goroutines publishing one event each need far fewer
// requests and fsyncs. A failed request fails every call it carried.
func WithPublishBatching(maxEvents int) Option {
	return func(c *config) { c.batchMax = max(maxEvents, 1) }
}

// batchInFlight is how many requests per topic may be in flight at once:
// two keep the pipe busy while a batch is gathered.
const batchInFlight = 2

// publishCall is one Publish call waiting for a shared request.
type publishCall struct {
	events []Event
	bytes  int // the events' EventBytes
	ids    []string
	err    error
	done   chan struct{}
}

// topicBatcher gathers the Publish calls of one topic.
type topicBatcher struct {
	mu       sync.Mutex
	queue    []*publishCall
	inFlight int
}

type batchers struct {
	mu     sync.Mutex
	topics map[string]*topicBatcher
}

func (b *batchers) get(topic string) *topicBatcher {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.topics == nil {
		b.topics = make(map[string]*topicBatcher)
	}
	tb := b.topics[topic]
	if tb == nil {
		tb = &topicBatcher{}
		b.topics[topic] = tb
	}
	return tb
}

// publishBatched queues the call and, if fewer than batchInFlight requests
// are in flight, sends batches itself until the queue is empty.
func (c *Client) publishBatched(ctx context.Context, topic string, events []Event) ([]string, error) {
	call := &publishCall{events: events, bytes: eventsBytes(events), done: make(chan struct{})}
	tb := c.batchers.get(topic)
	tb.mu.Lock()
	tb.queue = append(tb.queue, call)
	send := tb.inFlight < batchInFlight
	if send {
		tb.inFlight++
	}
	tb.mu.Unlock()
	if send {
		// The batch carries other callers' events: it must not fail because
		// this caller gives up.
		c.sendBatches(context.WithoutCancel(ctx), topic, tb)
	}
	select {
	case <-call.done:
		return call.ids, call.err
	case <-ctx.Done():
		// The events may still be committed: the outcome is unknown, as for
		// any call that times out.
		return nil, ctx.Err()
	}
}

func (c *Client) sendBatches(ctx context.Context, topic string, tb *topicBatcher) {
	for {
		tb.mu.Lock()
		batch := takeBatch(&tb.queue, c.batchMax, MaxRequestBytes-requestBytes(topic))
		if len(batch) == 0 {
			tb.inFlight--
			tb.mu.Unlock()
			return
		}
		tb.mu.Unlock()
		c.sendBatch(ctx, topic, batch)
	}
}

// takeBatch removes whole calls from the front of the queue, at least one,
// while they fit in maxEvents and maxBytes (of EventBytes).
func takeBatch(queue *[]*publishCall, maxEvents, maxBytes int) []*publishCall {
	n, events, bytes := 0, 0, 0
	for n < len(*queue) {
		call := (*queue)[n]
		if n > 0 && (events+len(call.events) > maxEvents || bytes+call.bytes > maxBytes) {
			break
		}
		events += len(call.events)
		bytes += call.bytes
		n++
	}
	batch := (*queue)[:n:n]
	*queue = (*queue)[n:]
	return batch
}

func (c *Client) sendBatch(ctx context.Context, topic string, batch []*publishCall) {
	req := &heraldv1.PublishRequest{Topic: topic}
	for _, call := range batch {
		req.Events = append(req.Events, eventsToProto(call.events)...)
	}
	ids, err := c.sendPublish(ctx, req)
	for _, call := range batch {
		if err != nil {
			call.err = err
		} else {
			call.ids, ids = ids[:len(call.events):len(call.events)], ids[len(call.events):]
		}
		close(call.done)
	}
}

// sendPublish sends one publish request: to the leaders of its events'
// shards with WithLeaderRouting, else to the node given to New.
func (c *Client) sendPublish(ctx context.Context, req *heraldv1.PublishRequest) ([]string, error) {
	if c.router != nil {
		return c.publishRouted(ctx, req.Topic, req.Events)
	}
	if c.stream != nil {
		ctx, cancel := c.callContext(ctx, 0)
		defer cancel()
		ids, _, err := c.stream.publish(ctx, req)
		return ids, err
	}
	ids, _, err := c.publishVia(ctx, c.svc, req)
	return ids, err
}

// publishVia sends one publish request through svc and returns an id per
// event, and the response's header or the error's metadata.
func (c *Client) publishVia(ctx context.Context, svc heraldv1connect.HeraldServiceClient, req *heraldv1.PublishRequest) ([]string, http.Header, error) {
	ctx, cancel := c.callContext(ctx, 0)
	defer cancel()
	resp, err := svc.Publish(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, errorMeta(err), err
	}
	if ids := resp.Msg.GetIds(); len(ids) == len(req.Events) {
		return ids, resp.Header(), nil
	}
	return nil, resp.Header(), connect.NewError(connect.CodeInternal, errShortIDs)
}

var errShortIDs = errors.New("the server returned fewer ids than events published; the batch's outcome is unknown")

// eventsBytes is the sum of the events' EventBytes.
func eventsBytes(events []Event) int {
	n := 0
	for _, e := range events {
		n += EventBytes(e)
	}
	return n
}
