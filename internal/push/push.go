// Package push supervises a node's push delivery: it keeps a dispatcher
// (delivery.Dispatcher) running for every shard, of every push
// subscription, that the node leads, and none elsewhere, and holds each
// push subscription's open endpoint, which its dispatchers share (and the
// synchronous sends of non-persistent topics, the default subscription's).
//
// It knows the node only through Source: the topics with push
// subscriptions, and for each of their shards whether the node leads it
// and the shard's log as each subscription's dispatcher reads it and
// records outcomes in.
package push

import (
	"context"
	"log/slog"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"herald/internal/delivery"
	"herald/internal/endpoint"
	"herald/internal/envelope"
	"herald/internal/filter"
	"herald/internal/shard"
	"herald/internal/topic"
)

// Shard is one shard of a push topic, as the node holds it.
type Shard interface {
	// Log is the shard as the dispatcher of subscription sub reads it and
	// records outcomes in: its cursor of the shard's log.
	Log(sub uint64) delivery.Log
	// Index is the shard's number in its topic.
	Index() int
	// Leads reports whether this node leads the shard now.
	Leads() bool
}

// Topic is a topic with at least one push subscription.
type Topic struct {
	Name string
	// FirstGroup is the Raft group of the topic's shard 0; a topic
	// deleted and created again has another.
	FirstGroup uint64
	// Subscriptions are the topic's push subscriptions, disabled ones
	// included.
	Subscriptions []Subscription
	Shards        []Shard
}

// Subscription is a push subscription of a topic: the default one (ID 0,
// the topic's own push_endpoint) or a named one.
type Subscription struct {
	ID   uint64
	Name string
	// Attributes are the delivery attributes its dispatchers take: its
	// push endpoint, retries, time to live, signing (see
	// topic.SubscriptionAttributes.DeliveryAttributes).
	Attributes topic.Attributes
	// Settings are its own: filter, key prefix, rate, concurrency and
	// when to disable it.
	Settings topic.SubscriptionAttributes
	// Disabled subscriptions have no endpoint open and no dispatcher:
	// their events wait.
	Disabled bool
	// KeepEnabled subscriptions are never disabled by their dispatchers,
	// whatever their endpoint answers: a topic's default subscription
	// delivers as topics did before there were subscriptions (a 410 is
	// dead-lettered as any refusal is).
	KeepEnabled bool
}

// Source is what the supervisor reads of the node.
type Source interface {
	// PushTopics returns the topics that have push subscriptions.
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
	// MaxInFlight bounds a shard's concurrent pushes for subscriptions
	// that set no max_in_flight (see delivery.Config).
	MaxInFlight int
	// RetryPause is how long the supervisor waits before it tries again
	// to open a push endpoint that failed to open. Default 1s.
	RetryPause time.Duration
	// OnDisable, if set, is told when a subscription's dispatcher gives up
	// on its endpoint (see delivery.Config.OnDisable): the owner records
	// the subscription disabled, and the next Sync stops its dispatchers.
	// It is called once per subscription for as long as its endpoint stays
	// open, from a dispatcher's goroutine: it must return promptly and
	// must not call the supervisor. Without it no subscription is
	// disabled, and a 410 Gone is dead-lettered as any refusal is.
	OnDisable func(topicName string, sub Subscription, reason string)
	// SNSZonegroup is the SNS-compatible API's zonegroup, which the
	// topic ARNs in SNS's message envelope name (see package envelope).
	SNSZonegroup string
}

// DefaultRetryPause is Config.RetryPause's default.
const DefaultRetryPause = time.Second

// Supervisor owns the push subscriptions' endpoints and their
// dispatchers.
type Supervisor struct {
	cfg    Config
	failed chan struct{} // cap 1: a push endpoint failed to open; retry

	mu     sync.Mutex
	topics map[string]*pushTopic // by topic name
}

// pushTopic is the push side of a topic on this node: its push
// subscriptions that are open.
type pushTopic struct {
	firstGroup uint64
	subs       map[uint64]*pushSub // by subscription id
}

func (p *pushTopic) close() {
	var wg sync.WaitGroup
	for _, ps := range p.subs {
		wg.Go(ps.close)
	}
	wg.Wait()
}

// pushSub is a push subscription on this node: its endpoint, its filter,
// and the dispatchers of the shards this node leads.
type pushSub struct {
	spec        Subscription
	ep          endpoint.Endpoint
	scheme      string
	admit       func(*shard.Event) bool // nil: every event
	shards      int                     // of its topic: its rate limit is split among them
	dispatchers map[int]*delivery.Dispatcher
	disabled    atomic.Bool // OnDisable was called
}

func (ps *pushSub) close() {
	var wg sync.WaitGroup
	for _, d := range ps.dispatchers {
		wg.Go(d.Stop)
	}
	wg.Wait()
	ps.ep.Close()
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

// Run keeps a dispatcher running for every shard of a push subscription
// that this node leads, and none elsewhere, until stop is closed; then it
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

// Sync opens the endpoints of new push subscriptions, closes those of
// subscriptions deleted, disabled or changed and of topics deleted or
// recreated, and starts or stops each shard's dispatchers as this node
// leads it or not.
func (s *Supervisor) Sync() {
	topics := make(map[string]Topic)
	for _, t := range s.cfg.Source.PushTopics() {
		topics[t.Name] = t
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for name, p := range s.topics {
		if t, ok := topics[name]; !ok || t.FirstGroup != p.firstGroup {
			p.close() // deleted or recreated: start again below
			delete(s.topics, name)
		}
	}
	for name, t := range topics {
		p := s.topics[name]
		if p == nil {
			p = &pushTopic{firstGroup: t.FirstGroup, subs: make(map[uint64]*pushSub)}
			s.topics[name] = p
		}
		s.syncSubscriptions(name, p, t)
	}
}

// syncSubscriptions brings the open subscriptions of p in line with t's.
// The caller holds s.mu.
func (s *Supervisor) syncSubscriptions(name string, p *pushTopic, t Topic) {
	want := make(map[uint64]Subscription, len(t.Subscriptions))
	for _, sub := range t.Subscriptions {
		if !sub.Disabled {
			want[sub.ID] = sub
		}
	}
	for id, ps := range p.subs {
		if sub, ok := want[id]; !ok || !reflect.DeepEqual(sub, ps.spec) {
			ps.close() // deleted, disabled or changed: start again below
			delete(p.subs, id)
		}
	}
	for id, sub := range want {
		ps := p.subs[id]
		if ps == nil {
			var err error
			if ps, err = s.open(name, sub); err != nil {
				s.cfg.Logger.Error("cannot open the push endpoint; events stay queued until it is fixed",
					"topic", name, "subscription", sub.Name, "err", err)
				select {
				case s.failed <- struct{}{}:
				default: // a retry is already due
				}
				continue
			}
			p.subs[id] = ps
		}
		ps.shards = len(t.Shards)
		for _, sh := range t.Shards {
			s.syncDispatcher(name, ps, sh)
		}
	}
}

// open opens a subscription's endpoint and compiles its filter.
func (s *Supervisor) open(topicName string, sub Subscription) (*pushSub, error) {
	pol, err := sub.Settings.Filter()
	if err != nil {
		return nil, err
	}
	ep, err := delivery.OpenEndpoint(topicName, sub.Attributes, s.cfg.Guard)
	if err != nil {
		return nil, err
	}
	if sub.Settings.MessageFormat == topic.FormatSNS {
		// Made through the SNS-compatible API: deliver as SNS does.
		ep = envelope.SNS(ep, envelope.SNSInfo{Zonegroup: s.cfg.SNSZonegroup, Subscription: sub.Name, Raw: sub.Settings.RawMessageDelivery})
	}
	u, _ := url.Parse(sub.Attributes.PushEndpoint)
	return &pushSub{spec: sub, ep: ep, scheme: u.Scheme, admit: admitter(pol, sub.Settings.KeyPrefix),
		dispatchers: make(map[int]*delivery.Dispatcher)}, nil
}

// admitter returns the test of which events a subscription wants, or nil
// if it wants them all.
func admitter(pol *filter.Policy, keyPrefix string) func(*shard.Event) bool {
	if pol == nil && keyPrefix == "" {
		return nil
	}
	return func(e *shard.Event) bool {
		if !strings.HasPrefix(e.Key, keyPrefix) {
			return false
		}
		return pol.Match(filter.Event{Key: e.Key, Headers: e.HeaderMap(), Payload: e.Payload})
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
		p := s.topics[sh.topic]
		if p == nil || p.firstGroup+uint64(sh.s.Index()) != sh.group {
			continue
		}
		for _, ps := range p.subs {
			s.syncDispatcher(sh.topic, ps, sh.s)
		}
	}
}

// syncDispatcher starts or stops a subscription's dispatcher of a shard.
// The caller holds s.mu.
func (s *Supervisor) syncDispatcher(topicName string, ps *pushSub, sh Shard) {
	leads := sh.Leads()
	d := ps.dispatchers[sh.Index()]
	switch {
	case leads && d == nil:
		ps.dispatchers[sh.Index()] = delivery.Start(context.Background(), sh.Log(ps.spec.ID), s.dispatcherConfig(topicName, ps, sh.Index()))
	case !leads && d != nil:
		d.Stop()
		delete(ps.dispatchers, sh.Index())
	}
}

func (s *Supervisor) dispatcherConfig(topicName string, ps *pushSub, index int) delivery.Config {
	set := ps.spec.Settings
	cfg := delivery.Config{
		Topic: topicName, Shard: index, Attributes: ps.spec.Attributes, Endpoint: ps.ep,
		Scheme: ps.scheme, Metrics: s.cfg.Metrics, Logger: s.cfg.Logger, MaxInFlight: s.cfg.MaxInFlight,
		Admit: ps.admit,
	}
	if set.MaxEventsPerSecond > 0 {
		// The limit is the subscription's: each shard's dispatcher takes
		// an equal part, as keys spread evenly over the shards.
		cfg.MaxPerSecond = float64(set.MaxEventsPerSecond) / float64(max(1, ps.shards))
	}
	if set.MaxInFlight > 0 {
		cfg.MaxInFlight = set.MaxInFlight
	}
	if s.cfg.OnDisable != nil && !ps.spec.KeepEnabled {
		cfg.DisableAfter = time.Duration(set.DisableAfter) * time.Second
		cfg.OnDisable = func(reason string) {
			if ps.disabled.CompareAndSwap(false, true) {
				s.cfg.OnDisable(topicName, ps.spec, reason)
			}
		}
	}
	return cfg
}

// Health returns the health of the default subscription's dispatcher of
// shard index of the topic whose shard 0 is group firstGroup, if this node
// runs one: it leads the shard, of a topic with a push endpoint.
func (s *Supervisor) Health(topicName string, firstGroup uint64, index int) (delivery.Health, bool) {
	return s.SubscriptionHealth(topicName, firstGroup, 0, index)
}

// SubscriptionHealth returns the health of subscription sub's dispatcher
// of shard index, if this node runs one.
func (s *Supervisor) SubscriptionHealth(topicName string, firstGroup, sub uint64, index int) (delivery.Health, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.topics[topicName]
	if p == nil || p.firstGroup != firstGroup || p.subs[sub] == nil {
		return delivery.Health{}, false
	}
	d := p.subs[sub].dispatchers[index]
	if d == nil {
		return delivery.Health{}, false
	}
	return d.Health(), true
}

// EachHealth calls f with the health of every dispatcher running, and its
// subscription and endpoint's scheme. It holds the supervisor's lock
// meanwhile: f must not call the supervisor.
func (s *Supervisor) EachHealth(f func(topicName, subscription string, index int, scheme string, h delivery.Health)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, p := range s.topics {
		for _, ps := range p.subs {
			for i, d := range ps.dispatchers {
				f(name, ps.spec.Name, i, ps.scheme, d.Health())
			}
		}
	}
}

// Notify wakes the dispatchers of the given shards of a topic, of every
// subscription.
func (s *Supervisor) Notify(topicName string, shards []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.topics[topicName]
	if p == nil {
		return
	}
	for _, ps := range p.subs {
		for _, i := range shards {
			if d := ps.dispatchers[i]; d != nil {
				d.Notify()
			}
		}
	}
}

// Endpoint returns the open endpoint of a topic's default subscription,
// and its scheme: a non-persistent topic's events are sent to it
// synchronously, by the publisher.
func (s *Supervisor) Endpoint(topicName string) (ep endpoint.Endpoint, scheme string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.topics[topicName]
	if p == nil || p.subs[0] == nil {
		return nil, "", false
	}
	return p.subs[0].ep, p.subs[0].scheme, true
}
