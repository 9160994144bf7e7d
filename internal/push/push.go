// Package push supervises a node's push delivery: it keeps a dispatcher
// (delivery.Dispatcher) running for every shard of a push topic that the
// node leads, and none elsewhere, and holds each push topic's open
// endpoint, which the dispatchers and the synchronous sends of
// non-persistent topics share.
//
// It knows the node only through Source: the topics with a push endpoint,
// and for each of their shards whether the node leads it and the shard's
// log, which a dispatcher reads and records outcomes in.
package push

import (
	"context"
	"log/slog"
	"net/url"
	"reflect"
	"sync"
	"time"

	"herald/internal/delivery"
	"herald/internal/endpoint"
	"herald/internal/topic"
)

// Shard is one shard of a push topic, as the node holds it.
type Shard interface {
	// Log is the shard as its dispatcher reads it and records outcomes
	// in.
	delivery.Log
	// Index is the shard's number in its topic.
	Index() int
	// Leads reports whether this node leads the shard now.
	Leads() bool
}

// Topic is a topic whose attributes name a push endpoint.
type Topic struct {
	Name string
	// FirstGroup is the Raft group of the topic's shard 0; a topic
	// deleted and created again has another.
	FirstGroup uint64
	Attributes topic.Attributes
	Shards     []Shard
}

// Source is what the supervisor reads of the node.
type Source interface {
	// PushTopics returns the topics whose attributes name a push
	// endpoint.
	PushTopics() []Topic
	// ShardOfGroup returns the shard of a Raft group, and its topic's
	// name, if the group is one of the node's shards.
	ShardOfGroup(group uint64) (topicName string, s Shard, ok bool)
}

// Leadership reports the groups whose leadership changed on this node:
// host.LeadershipWatch.
type Leadership interface {
	C() <-chan struct{}
	Changed() []uint64
	Stop()
}

// Config configures a Supervisor.
type Config struct {
	Source Source
	Guard  *endpoint.Guard // what endpoints may reach
	// Metrics receives delivery outcomes; optional.
	Metrics delivery.Metrics
	Logger  *slog.Logger
	// MaxInFlight bounds a shard's concurrent pushes (see
	// delivery.Config).
	MaxInFlight int
	// RetryPause is how long the supervisor waits before it tries again
	// to open a push endpoint that failed to open. Default 1s.
	RetryPause time.Duration
}

// DefaultRetryPause is Config.RetryPause's default.
const DefaultRetryPause = time.Second

// Supervisor owns the push topics' endpoints and their dispatchers.
type Supervisor struct {
	cfg    Config
	failed chan struct{} // cap 1: a push endpoint failed to open; retry

	mu     sync.Mutex
	topics map[string]*pushTopic // by topic name
}

// pushTopic is the push side of a topic on this node: its endpoint and the
// dispatchers of the shards this node leads.
type pushTopic struct {
	attrs       topic.Attributes
	firstGroup  uint64
	ep          endpoint.Endpoint
	scheme      string
	dispatchers map[int]*delivery.Dispatcher
}

func (p *pushTopic) close() {
	var wg sync.WaitGroup
	for _, d := range p.dispatchers {
		wg.Go(d.Stop)
	}
	wg.Wait()
	p.ep.Close()
}

// New returns a supervisor with no endpoint open: Sync opens them.
func New(cfg Config) *Supervisor {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RetryPause <= 0 {
		cfg.RetryPause = DefaultRetryPause
	}
	return &Supervisor{cfg: cfg, failed: make(chan struct{}, 1), topics: make(map[string]*pushTopic)}
}

// Run keeps a dispatcher running for every shard of a push topic that
// this node leads, and none elsewhere, until stop is closed; then it
// stops them all, closes the endpoints and leadership, and returns. It
// syncs the dispatchers when leadership reports a change (the node calls
// Sync when topics change), and RetryPause after an endpoint failed to
// open (say, a CA file not yet installed), until it opens.
func (s *Supervisor) Run(stop <-chan struct{}, leadership Leadership) {
	defer leadership.Stop()
	var retry <-chan time.Time
	for {
		select {
		case <-stop:
			s.mu.Lock()
			for name, p := range s.topics {
				p.close()
				delete(s.topics, name)
			}
			s.mu.Unlock()
			return
		case <-leadership.C():
			s.SyncLeadership(leadership.Changed())
		case <-s.failed:
			if retry == nil {
				retry = time.After(s.cfg.RetryPause)
			}
		case <-retry:
			retry = nil
			s.Sync()
		}
	}
}

// Sync opens the endpoints of new push topics, closes those of topics
// deleted, recreated or changed, and starts or stops each shard's
// dispatcher as this node leads it or not.
func (s *Supervisor) Sync() {
	topics := make(map[string]Topic)
	for _, t := range s.cfg.Source.PushTopics() {
		topics[t.Name] = t
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for name, p := range s.topics {
		t, ok := topics[name]
		if !ok || t.FirstGroup != p.firstGroup || !reflect.DeepEqual(t.Attributes, p.attrs) {
			p.close() // deleted, recreated or changed: start again below
			delete(s.topics, name)
		}
	}
	for name, t := range topics {
		p := s.topics[name]
		if p == nil {
			ep, err := delivery.OpenEndpoint(name, t.Attributes, s.cfg.Guard)
			if err != nil {
				s.cfg.Logger.Error("cannot open the push endpoint; events stay queued until it is fixed", "topic", name, "err", err)
				select {
				case s.failed <- struct{}{}:
				default: // a retry is already due
				}
				continue
			}
			u, _ := url.Parse(t.Attributes.PushEndpoint)
			p = &pushTopic{attrs: t.Attributes.Clone(), firstGroup: t.FirstGroup, ep: ep,
				scheme: u.Scheme, dispatchers: make(map[int]*delivery.Dispatcher)}
			s.topics[name] = p
		}
		for _, sh := range t.Shards {
			s.syncDispatcher(p, name, sh)
		}
	}
}

// SyncLeadership starts or stops the dispatchers of the given shard
// groups, whose leadership changed. Topics and their endpoints are Sync's
// business; a group of a topic with no open endpoint, or of another
// incarnation of it, is left to that.
func (s *Supervisor) SyncLeadership(groups []uint64) {
	type shardOf struct {
		topic string
		group uint64
		s     Shard
	}
	shards := make([]shardOf, 0, len(groups))
	for _, g := range groups {
		if name, sh, ok := s.cfg.Source.ShardOfGroup(g); ok {
			shards = append(shards, shardOf{name, g, sh})
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sh := range shards {
		if p := s.topics[sh.topic]; p != nil && p.firstGroup+uint64(sh.s.Index()) == sh.group {
			s.syncDispatcher(p, sh.topic, sh.s)
		}
	}
}

// syncDispatcher starts or stops a shard's dispatcher. The caller holds
// s.mu.
func (s *Supervisor) syncDispatcher(p *pushTopic, topicName string, sh Shard) {
	leads := sh.Leads()
	d := p.dispatchers[sh.Index()]
	switch {
	case leads && d == nil:
		p.dispatchers[sh.Index()] = delivery.Start(context.Background(), sh, delivery.Config{
			Topic: topicName, Shard: sh.Index(), Attributes: p.attrs, Endpoint: p.ep,
			Scheme: p.scheme, Metrics: s.cfg.Metrics, Logger: s.cfg.Logger, MaxInFlight: s.cfg.MaxInFlight,
		})
	case !leads && d != nil:
		d.Stop()
		delete(p.dispatchers, sh.Index())
	}
}

// Health returns the health of the dispatcher of shard index of the
// topic whose shard 0 is group firstGroup, if this node runs one: it
// leads the shard, of a topic with a push endpoint.
func (s *Supervisor) Health(topicName string, firstGroup uint64, index int) (delivery.Health, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.topics[topicName]
	if p == nil || p.firstGroup != firstGroup {
		return delivery.Health{}, false
	}
	d := p.dispatchers[index]
	if d == nil {
		return delivery.Health{}, false
	}
	return d.Health(), true
}

// EachHealth calls f with the health of every dispatcher running, and its
// endpoint's scheme. It holds the supervisor's lock meanwhile: f must not
// call the supervisor.
func (s *Supervisor) EachHealth(f func(topicName string, index int, scheme string, h delivery.Health)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, p := range s.topics {
		for i, d := range p.dispatchers {
			f(name, i, p.scheme, d.Health())
		}
	}
}

// Notify wakes the dispatchers of the given shards of a topic.
func (s *Supervisor) Notify(topicName string, shards []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.topics[topicName]
	if p == nil {
		return
	}
	for _, i := range shards {
		if d := p.dispatchers[i]; d != nil {
			d.Notify()
		}
	}
}

// Endpoint returns the open endpoint of a push topic, and its scheme: a
// non-persistent topic's events are sent to it synchronously, by the
// publisher.
func (s *Supervisor) Endpoint(topicName string) (ep endpoint.Endpoint, scheme string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.topics[topicName]
	if p == nil {
		return nil, "", false
	}
	return p.ep, p.scheme, true
}
