package client

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"herald/internal/protocol"
	"herald/internal/topic"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// Leader routing. A herald node that does not lead a shard serves its
// publishes all the same, by forwarding them to the leader: one hop more.
// With WithLeaderRouting the Client asks a node where each shard of a
// topic is led (ShardLeaders), hashes each event's key to its shard as
// the server does (topic.ShardFor), and sends the events straight to
// their shard's leader, one request per node. Its map of a topic is a
// hint, never trusted blindly:
//
//   - a node that answers a publish with Herald-Forwarded, because it no
//     longer leads some of the shards (a leader changed), marks the map
//     stale, and the next publish asks again;
//   - a node that cannot be reached, or answers unavailable, loses its
//     shards in the map (they go to the node that answered the last
//     question, which forwards them), and the map is asked for again
//     before the next publish: with WithPublishRetries, the retry goes
//     to the new leader.
//
// Publishes, fetches, acks and nacks are routed (see consume_routed.go);
// Reserve, Commit and Abort go to the address given to New.

// minRefresh spaces out the questions about one topic's leaders: while an
// election runs, every publish would otherwise ask again.
const minRefresh = 200 * time.Millisecond

// WithLeaderRouting makes Publish send each event straight to the node
// that leads its shard, rather than to the node given to New, which would
// forward it; Fetch asks each leader for the shards it leads, and Ack and
// Nack send each id to the leader of its event's shard. The Client learns where shards are led from the node given
// to New, or, when that one cannot answer, from the nodes in more
// (addresses such as "127.0.0.1:7601", or base URLs) and those it learned
// of. Nodes are reached at the address they were given in --peers (or
// herald cluster add), which is also where their API listens, with the
// scheme of New's base URL.
func WithLeaderRouting(more ...string) Option {
	return func(c *config) {
		c.routing = true
		c.seeds = append(c.seeds, more...)
	}
}

// router holds, per topic, where each shard's publishes go.
type router struct {
	scheme     string // "http" or "https", from New's base URL
	dial       func(baseURL string) heraldv1connect.HeraldServiceClient
	minRefresh time.Duration

	// turn advances at each routed fetch: when a fetch's events are too
	// few to ask every node, each gets its turn.
	turn atomic.Uint32

	// newStream, with WithPublishStream, opens a publish stream to a
	// node; publishes then go over streams, one per node.
	newStream func(baseURL string) *publishStream

	mu      sync.Mutex
	seeds   []string // host:port of the nodes to ask, New's first; then those learned
	nodes   map[string]heraldv1connect.HeraldServiceClient
	streams map[string]*publishStream
	topics  map[string]*topicRoutes
}

// topicRoutes is one topic's map.
type topicRoutes struct {
	// shards holds, per shard, the host:port of its leader, or "" for
	// via. It is replaced, never changed: callers read it unlocked.
	shards []string
	via    string // the node that answered the last question
	asked  time.Time
	stale  bool
	// refreshed, while a call asks for the map, is closed when it has:
	// calls that know nothing of the topic yet wait for it rather than
	// send everything to via.
	refreshed chan struct{}
}

func newRouter(baseURL string, seeds []string, dial func(string) heraldv1connect.HeraldServiceClient) *router {
	scheme, first, _ := strings.Cut(baseURL, "://")
	r := &router{scheme: scheme, dial: dial, minRefresh: minRefresh, nodes: make(map[string]heraldv1connect.HeraldServiceClient),
		topics: make(map[string]*topicRoutes)}
	r.learn(first)
	for _, s := range seeds {
		if _, hostPort, ok := strings.Cut(normalizeURL(s), "://"); ok {
			r.learn(hostPort)
		}
	}
	return r
}

// learn adds a node to ask; the caller holds mu, or is newRouter.
func (r *router) learn(hostPort string) {
	if hostPort != "" && !slices.Contains(r.seeds, hostPort) {
		r.seeds = append(r.seeds, hostPort)
	}
}

// home returns the node given to New.
func (r *router) home() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seeds[0]
}

// node returns the client of the node at hostPort.
func (r *router) node(hostPort string) heraldv1connect.HeraldServiceClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	svc := r.nodes[hostPort]
	if svc == nil {
		svc = r.dial(r.scheme + "://" + hostPort)
		r.nodes[hostPort] = svc
	}
	return svc
}

// stream returns the publish stream to the node at hostPort, or nil if
// publishes go as requests.
func (r *router) stream(hostPort string) *publishStream {
	if r.newStream == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.streams[hostPort]
	if s == nil {
		if r.streams == nil {
			r.streams = make(map[string]*publishStream)
		}
		s = r.newStream(r.scheme + "://" + hostPort)
		r.streams[hostPort] = s
	}
	return s
}

// closeStreams closes the publish streams to every node.
func (r *router) closeStreams() {
	r.mu.Lock()
	streams := r.streams
	r.streams = nil
	r.mu.Unlock()
	for _, s := range streams {
		s.close()
	}
}

// routes returns where the shards of topic go: the map, which the caller
// must not change, and the node for shards it does not place, refreshing it first if it is stale
// and no other call is refreshing it. It returns nil shards when nothing
// is known of the topic: then everything goes to via.
func (r *router) routes(ctx context.Context, name string) (shards []string, via string) {
	r.mu.Lock()
	tr := r.topics[name]
	if tr == nil {
		tr = &topicRoutes{stale: true, via: r.seeds[0]}
		r.topics[name] = tr
	}
	if wait := tr.refreshed; wait != nil && tr.shards == nil {
		r.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		r.mu.Lock()
	}
	if tr.stale && tr.refreshed == nil && time.Since(tr.asked) >= r.minRefresh {
		done := make(chan struct{})
		tr.refreshed = done
		seeds := slices.Clone(r.seeds)
		r.mu.Unlock()
		shards, via, learned := r.ask(ctx, name, seeds)
		r.mu.Lock()
		tr.refreshed, tr.asked = nil, time.Now()
		close(done)
		if via != "" {
			tr.shards, tr.via, tr.stale = shards, via, false
			for _, a := range learned {
				r.learn(a)
			}
		}
	}
	defer r.mu.Unlock()
	return tr.shards, tr.via
}

// ask asks the nodes in seeds, in turn, where the shards of topic are led,
// until one answers; then, for shards it could not tell (it holds no
// replica of them), one of their replicas. It returns the map, the node
// that answered ("" if none did), and every node address it heard of.
func (r *router) ask(ctx context.Context, name string, seeds []string) (shards []string, via string, learned []string) {
	var replicas [][]string
	for _, s := range seeds {
		resp, err := r.node(s).ShardLeaders(ctx, connect.NewRequest(&heraldv1.ShardLeadersRequest{Topic: name}))
		if err != nil {
			continue
		}
		via = s
		for _, sl := range resp.Msg.GetShards() {
			shards = append(shards, sl.GetLeaderAddress())
			replicas = append(replicas, sl.GetReplicaAddresses())
			learned = append(learned, sl.GetReplicaAddresses()...)
		}
		break
	}
	// Shards the answering node does not hold: ask one of their replicas,
	// once per node.
	asked := map[string]bool{via: true}
	for i := range shards {
		if shards[i] != "" {
			continue
		}
		for _, a := range replicas[i] {
			if asked[a] {
				continue
			}
			asked[a] = true
			resp, err := r.node(a).ShardLeaders(ctx, connect.NewRequest(&heraldv1.ShardLeadersRequest{Topic: name}))
			if err != nil || len(resp.Msg.GetShards()) != len(shards) {
				continue
			}
			for j, sl := range resp.Msg.GetShards() {
				if shards[j] == "" {
					shards[j] = sl.GetLeaderAddress()
				}
			}
			break
		}
	}
	return shards, via, learned
}

// stale marks topic's map for asking again; with unreachable set, the
// node at hostPort also loses its shards in the map, until then.
func (r *router) markStale(name, hostPort string, unreachable bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tr := r.topics[name]
	if tr == nil {
		return
	}
	tr.stale = true
	if !unreachable {
		return
	}
	tr.shards = slices.Clone(tr.shards)
	for i, a := range tr.shards {
		if a == hostPort {
			tr.shards[i] = ""
		}
	}
	if tr.via == hostPort {
		// Another node to fall back on, the next to be asked.
		if i := slices.Index(r.seeds, hostPort); i >= 0 && len(r.seeds) > 1 {
			tr.via = r.seeds[(i+1)%len(r.seeds)]
		}
	}
}

// publishRouted sends the events of a publish to their shards' leaders,
// one request per node, concurrently, and returns the ids in request
// order. Like a publish through one node, it fails if any part fails,
// and the other parts may have committed.
func (c *Client) publishRouted(ctx context.Context, name string, events []*heraldv1.PublishEvent) ([]string, error) {
	shards, via := c.router.routes(ctx, name)
	byNode := make(map[string][]int)
	for i, e := range events {
		to := via
		if len(shards) > 0 {
			to = target(shards, via, topic.ShardFor(e.GetKey(), len(shards)))
		}
		byNode[to] = append(byNode[to], i)
	}
	if len(byNode) == 1 {
		for to := range byNode {
			return c.publishTo(ctx, name, to, events)
		}
	}
	ids := make([]string, len(events))
	errs := make([]error, 0, len(byNode))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for to, positions := range byNode {
		part := make([]*heraldv1.PublishEvent, len(positions))
		for j, i := range positions {
			part[j] = events[i]
		}
		wg.Go(func() {
			got, err := c.publishTo(ctx, name, to, part)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			for j, i := range positions {
				ids[i] = got[j]
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return ids, nil
}

// target is the node to send a request for shard to: the shard's leader,
// or via when the topic's map names none.
func target(leaders []string, via string, shard int) string {
	if shard < len(leaders) && leaders[shard] != "" {
		return leaders[shard]
	}
	return via
}

// publishTo sends one publish request to the node at hostPort and updates
// the topic's map from what happened.
func (c *Client) publishTo(ctx context.Context, name, hostPort string, events []*heraldv1.PublishEvent) ([]string, error) {
	req := &heraldv1.PublishRequest{Topic: name, Events: events}
	if s := c.router.stream(hostPort); s != nil {
		cctx, cancel := c.callContext(ctx, 0)
		defer cancel()
		ids, forwarded, err := s.publish(cctx, req)
		header := make(http.Header)
		if forwarded {
			header.Set(protocol.ForwardedHeader, "1")
		}
		c.router.learnFrom(ctx, name, hostPort, header, err)
		return ids, err
	}
	ids, header, err := c.publishVia(ctx, c.router.node(hostPort), req)
	c.router.learnFrom(ctx, name, hostPort, header, err)
	return ids, err
}

// learnFrom updates topic's map from a call to the node at hostPort, which
// answered header and err.
func (r *router) learnFrom(ctx context.Context, name, hostPort string, header http.Header, err error) {
	var unreadable *UnreadableError
	switch {
	case err != nil && !errors.As(err, &unreadable) && connect.CodeOf(err) != connect.CodeResourceExhausted && retryablePublish(ctx, err):
		// Down, restarting, or without a leader for a shard: ask again.
		r.markStale(name, hostPort, true)
	case header.Get(protocol.ForwardedHeader) != "":
		r.markStale(name, hostPort, false)
	}
}
