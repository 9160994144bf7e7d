package load

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"herald/client"
)

// fetchWait is how long a herald consumer's fetch waits for events when
// none is available: long enough not to spin at the end of a drain, when
// the last batches are leased to other consumers.
const fetchWait = 200 * time.Millisecond

// FillHerald publishes the backlog of cc to topic t through c.
func FillHerald(ctx context.Context, c *client.Client, t *client.Topic, cc ConsumeConfig) error {
	_, err := RunHerald(ctx, c, t, cc.Fill())
	if err != nil {
		return fmt.Errorf("fill the backlog: %w", err)
	}
	return nil
}

// DrainHerald drains topic t through c with cc.Consumers pull consumers,
// each fetching up to cc.Batch events and acknowledging their receipts in
// one request, and labels the result like RunHerald's.
func DrainHerald(ctx context.Context, c *client.Client, t *client.Topic, cc ConsumeConfig) (*Result, error) {
	res, err := Drain(ctx, cc, func(context.Context, int) (Consumer, error) {
		return &heraldConsumer{c: c, topic: t.Name}, nil
	})
	if err != nil {
		return nil, err
	}
	describeHerald(res, t)
	res.Label += ", pull"
	return res, nil
}

// heraldConsumer fetches with client.Fetch and acknowledges with
// client.Ack, which returns once the acks are committed.
type heraldConsumer struct {
	c        *client.Client
	topic    string
	receipts []string
}

func (h *heraldConsumer) Fetch(ctx context.Context, max int) (int, error) {
	ds, err := h.c.Fetch(ctx, h.topic, client.FetchOptions{MaxEvents: max, Wait: fetchWait})
	h.receipts = h.receipts[:0]
	for _, d := range ds {
		h.receipts = append(h.receipts, d.Receipt)
	}
	return len(ds), err
}

func (h *heraldConsumer) Ack(ctx context.Context) error {
	_, err := h.c.Ack(ctx, h.receipts...)
	return err
}

// PushHerald has herald push topic t's backlog to a receiver of its own on
// 127.0.0.1: it starts the receiver, sets the topic's push_endpoint to it
// through c (or, with cc.Subscriptions, creates that many subscriptions
// pushing to it), and times how long until every one of cc.Backlog
// distinct events has arrived, for every subscription (or cc.Timeout
// passes). The server must allow the loopback endpoint (herald serve
// --push-allow 127.0.0.1).
func PushHerald(ctx context.Context, c *client.Client, t *client.Topic, cc ConsumeConfig) (*Result, error) {
	if err := cc.Validate(); err != nil {
		return nil, err
	}
	want := cc.Backlog * int64(max(1, cc.Subscriptions))
	r, err := startReceiver(want)
	if err != nil {
		return nil, err
	}
	defer r.close()
	ctx, cancel := context.WithTimeout(ctx, cc.Timeout)
	defer cancel()
	pids, _ := parsePIDs(cc.ServerPIDs) // checked by Validate
	var cpuFrom cpuSample
	if len(pids) > 0 {
		cpuFrom = sampleCPU(pids)
	}
	start := time.Now()
	if cc.Subscriptions > 0 {
		err = pushSubscriptions(ctx, c, t.Name, r.url, cc.Subscriptions)
	} else if t, err = c.SetTopicAttributes(ctx, t.Name, map[string]string{"push_endpoint": r.url}); err != nil {
		err = fmt.Errorf("set the push endpoint: %w", err)
	}
	if err != nil {
		return nil, err
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("received %d of %d events: %w", r.received(), want, ctx.Err())
	}
	var cpuTo cpuSample
	if len(pids) > 0 {
		cpuTo = sampleCPU(pids)
	}
	res := &Result{Config: cc.Fill(), Consume: &cc, Start: start.UTC(), Events: want, Batches: r.requests()}
	res.Seconds = r.last.Sub(start).Seconds()
	res.finishConsume(Histogram{})
	if len(pids) > 0 {
		if res.ServerCPU, err = serverCPU(pids, cpuFrom, cpuTo, want); err != nil {
			return nil, err
		}
	}
	describeHerald(res, t)
	res.Label += ", push"
	if cc.Subscriptions > 0 {
		res.Label += fmt.Sprintf(", %d subscriptions", cc.Subscriptions)
	}
	return res, nil
}

// receiver is a push endpoint that counts the distinct events it is sent
// (by X-Herald-Event-Id, per request path, which tells subscriptions
// apart: delivery is at least once) and closes done when it has want of
// them.
type receiver struct {
	url    string
	srv    *http.Server
	served chan error
	want   int64
	done   chan struct{}

	mu    sync.Mutex
	seen  map[string]struct{}
	posts int64
	last  time.Time // when the want-th event arrived; read after done
}

func startReceiver(want int64) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("push receiver: %w", err)
	}
	r := &receiver{
		url:    "http://" + ln.Addr().String() + "/",
		want:   want,
		done:   make(chan struct{}),
		served: make(chan error, 1),
		seen:   make(map[string]struct{}, want),
	}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { r.served <- r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	id := req.Header.Get("X-Herald-Event-Id")
	if id != "" {
		id = req.URL.Path + " " + id
	}
	r.mu.Lock()
	r.posts++
	if _, dup := r.seen[id]; !dup && id != "" {
		r.seen[id] = struct{}{}
		if int64(len(r.seen)) == r.want {
			r.last = time.Now()
			close(r.done)
		}
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) received() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *receiver) requests() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.posts
}

// close stops the receiver and waits for its server to return.
func (r *receiver) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.srv.Shutdown(ctx)
	if serr := <-r.served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
