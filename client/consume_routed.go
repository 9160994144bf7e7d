package client

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"herald/internal/protocol"
	"herald/internal/topic"
)

// Routed consuming. With WithLeaderRouting, a Fetch is split by shard:
// each node that leads some of the topic's shards (by the Client's map)
// is asked for those shards only, with the Herald-Shards header, and the
// answers are merged. Pull leases live on a shard's leader, which hands
// out a key's events in order and one at a time; a key's events are all
// in one shard, so splitting a fetch by shard changes none of that. A map
// gone stale sends a shard's fetch to a node that no longer leads it,
// which passes it on to the leader, as any node does, and says so in
// Herald-Forwarded. Acks and nacks go to the leader of each event's
// shard, which the event id names.

// fetchPart is one node's part of a routed fetch.
type fetchPart struct {
	to     string // host:port
	shards []int
	max    int
}

// splitFetch groups a topic's shards by the node that leads them (via for
// those the map does not place), in the order of their first shard, and
// shares events among the groups by their number of shards, what is left
// over one each from group start on. A group whose share is nothing is
// left out: with fewer events than nodes, a fetch reads only some
// of them (start, turning, gives each its turn).
func splitFetch(leaders []string, via string, events, start int) []fetchPart {
	var parts []fetchPart
	for i := range leaders {
		to := target(leaders, via, i)
		j := slices.IndexFunc(parts, func(p fetchPart) bool { return p.to == to })
		if j < 0 {
			parts = append(parts, fetchPart{to: to})
			j = len(parts) - 1
		}
		parts[j].shards = append(parts[j].shards, i)
	}
	if len(parts) == 0 {
		return nil
	}
	given := 0
	for i := range parts {
		parts[i].max = events * len(parts[i].shards) / len(leaders)
		given += parts[i].max
	}
	for i := start % len(parts); given < events; i = (i + 1) % len(parts) {
		parts[i].max++
		given++
	}
	return slices.DeleteFunc(parts, func(p fetchPart) bool { return p.max == 0 })
}

// fetchResult is what one part of a routed fetch brought back.
type fetchResult struct {
	deliveries []Delivery
	unread     []UnreadableShard
	err        error
}

func (c *Client) fetchRouted(ctx context.Context, name string, opts FetchOptions) ([]Delivery, error) {
	leaders, via := c.router.routes(ctx, name)
	parts := splitFetch(leaders, via, cmp.Or(opts.MaxEvents, protocol.DefaultFetchEvents), int(c.router.turn.Add(1)))
	if len(parts) == 0 || len(parts) == 1 && len(parts[0].shards) == len(leaders) {
		// Nothing known of the topic, or one node leads every shard: it
		// reads them all.
		to := via
		if len(parts) == 1 {
			to = parts[0].to
		}
		res := c.fetchPartFrom(ctx, name, fetchPart{to: to, max: opts.MaxEvents}, opts, opts.Wait)
		if res.err != nil {
			return nil, res.err
		}
		if len(res.unread) > 0 {
			return res.deliveries, &UnreadableError{Topic: name, Shards: res.unread}
		}
		return res.deliveries, nil
	}
	// First without waiting: a node with events answers at once, and no
	// part need be cut short. Only if none has any, wait on all of them.
	results := c.fetchParts(ctx, name, parts, opts, 0)
	if opts.Wait > 0 && !slices.ContainsFunc(results, func(r fetchResult) bool { return len(r.deliveries) > 0 }) && ctx.Err() == nil {
		results = c.fetchParts(ctx, name, parts, opts, opts.Wait)
	}
	return mergeFetch(ctx, name, parts, results, len(leaders))
}

// fetchParts runs the parts of a fetch concurrently, each waiting up to
// wait for events. Once one has brought events, the others, still
// waiting, are called off: their nodes had none to hand out. (Should one
// have leased events just then, its answer is lost and they are handed
// out again once their lease ends, as after any call cut short.)
func (c *Client) fetchParts(ctx context.Context, name string, parts []fetchPart, opts FetchOptions, wait time.Duration) []fetchResult {
	partsCtx, callOff := context.WithCancel(ctx)
	defer callOff()
	results := make([]fetchResult, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() {
			results[i] = c.fetchPartFrom(partsCtx, name, p, opts, wait)
			if len(results[i].deliveries) > 0 && wait > 0 {
				callOff()
			}
		})
	}
	wg.Wait()
	if ctx.Err() == nil && partsCtx.Err() != nil {
		for i := range results {
			if results[i].err != nil && len(results[i].deliveries) == 0 && connect.CodeOf(results[i].err) == connect.CodeCanceled {
				results[i] = fetchResult{} // called off: it had nothing
			}
		}
	}
	return results
}

// fetchPartFrom sends one part of a fetch, with opts but for the part's
// max and wait, and updates the topic's map
// from what happened.
func (c *Client) fetchPartFrom(ctx context.Context, name string, p fetchPart, opts FetchOptions, wait time.Duration) fetchResult {
	opts.MaxEvents, opts.Wait = p.max, wait
	ds, unread, header, err := c.fetchFrom(ctx, c.router.node(p.to), name, opts, p.shards)
	c.router.learnFrom(ctx, name, p.to, header, err)
	return fetchResult{deliveries: ds, unread: unread, err: err}
}

// mergeFetch puts the parts' answers together as one fetch of the
// topic's shards answers. A part that failed reads as unreadable shards;
// if no shard could be read, the error is that of a failed part, or an
// *UnreadableError for all of them.
func mergeFetch(ctx context.Context, name string, parts []fetchPart, results []fetchResult, shards int) ([]Delivery, error) {
	var deliveries []Delivery
	var unread []UnreadableShard
	var failed, serverErr error
	for i, r := range results {
		deliveries = append(deliveries, r.deliveries...)
		unread = append(unread, r.unread...)
		var ue *UnreadableError
		switch {
		case r.err == nil:
		case errors.As(r.err, &ue):
			unread = append(unread, ue.Shards...)
			serverErr = cmp.Or(serverErr, ue.server)
		default:
			failed = cmp.Or(failed, r.err)
			for _, s := range parts[i].shards {
				unread = append(unread, UnreadableShard{Shard: s, Name: topic.ShardName(name, s), Reason: r.err.Error()})
			}
		}
	}
	if err := ctx.Err(); err != nil && len(deliveries) == 0 {
		return nil, err
	}
	slices.SortFunc(unread, func(a, b UnreadableShard) int { return cmp.Compare(a.Shard, b.Shard) })
	switch {
	case len(unread) == 0:
		return deliveries, nil
	case len(deliveries) > 0 || len(unread) < shards:
		return deliveries, &UnreadableError{Topic: name, Shards: unread}
	case failed != nil:
		return nil, failed
	default:
		return nil, &UnreadableError{Topic: name, Shards: unread, server: serverErr}
	}
}

// ackRouted sends each id to the leader of its event's shard, one request
// per node, concurrently, and returns how many events were newly
// acknowledged. Like an ack through one node, it fails if any part fails,
// and the other parts may have been applied.
func (c *Client) ackRouted(ctx context.Context, sub string, ids []string) (int, []string, error) {
	var mu sync.Mutex
	total := 0
	var lapsed []string
	err := c.byLeader(ctx, ids, func(to string, part []string) (http.Header, error) {
		n, l, header, err := c.ackTo(ctx, c.router.node(to), sub, part)
		mu.Lock()
		total += n
		lapsed = append(lapsed, l...)
		mu.Unlock()
		return header, err
	})
	return total, lapsed, err
}

// nackRouted is ackRouted for Nack.
func (c *Client) nackRouted(ctx context.Context, sub string, ids []string) error {
	return c.byLeader(ctx, ids, func(to string, part []string) (http.Header, error) {
		return c.nackTo(ctx, c.router.node(to), sub, part)
	})
}

// byLeader groups ids by the node that leads their shard and calls send
// for each group, concurrently, updating the maps from what happened. An
// id that does not parse goes to the node given to New, which says what
// is wrong with it. It returns the first error.
func (c *Client) byLeader(ctx context.Context, ids []string, send func(to string, ids []string) (http.Header, error)) error {
	type group struct {
		to, topic string
		ids       []string
	}
	var groups []group
	for _, id := range ids {
		to, name := c.router.home(), ""
		if t, shard, _, _, err := topic.ParseAckID(id); err == nil {
			leaders, via := c.router.routes(ctx, t)
			to, name = target(leaders, via, shard), t
		}
		i := slices.IndexFunc(groups, func(g group) bool { return g.to == to && g.topic == name })
		if i < 0 {
			groups = append(groups, group{to: to, topic: name})
			i = len(groups) - 1
		}
		groups[i].ids = append(groups[i].ids, id)
	}
	if len(groups) == 0 {
		groups = append(groups, group{to: c.router.home()}) // the server says what is wrong
	}
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() {
			header, err := send(g.to, g.ids)
			if g.topic != "" {
				c.router.learnFrom(ctx, g.topic, g.to, header, err)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// joinInts writes shard indexes as Herald-Shards carries them.
func joinInts(is []int) string {
	s := make([]string, len(is))
	for i, v := range is {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}
