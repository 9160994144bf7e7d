package push

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herald/internal/delivery"
	"herald/internal/endpoint"
	"herald/internal/endpoint/endpointtest"
	"herald/internal/shard"
	"herald/internal/topic"
)

// fakeShard is a shard whose log holds the events the test adds, one of
// key k at offset 0 to begin with, and whose leadership the test sets.
type fakeShard struct {
	index int
	leads atomic.Bool
	reads atomic.Int32

	mu     sync.Mutex
	events []delivery.Event
	acked  map[uint64]bool
}

func newFakeShard(index int) *fakeShard {
	f := &fakeShard{index: index, acked: make(map[uint64]bool)}
	f.add()
	return f
}

// add appends an event to the shard's log.
func (f *fakeShard) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, delivery.Event{Offset: uint64(len(f.events)), Event: shard.Event{Key: "k", Payload: []byte("hello")}, Time: time.Now()})
}

// allAcked reports whether every event of the log is acknowledged.
func (f *fakeShard) allAcked() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.acked) == len(f.events)
}

func (f *fakeShard) Log(uint64) delivery.Log { return f }
func (f *fakeShard) Index() int              { return f.index }
func (f *fakeShard) Leads() bool             { return f.leads.Load() }

func (f *fakeShard) Seeks() (uint64, <-chan struct{}) { return 0, nil } // no seeks here

func (f *fakeShard) Read(_ context.Context, from uint64, _ int) ([]delivery.Event, uint64, error) {
	f.reads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []delivery.Event
	for _, e := range f.events[min(int(from), len(f.events)):] {
		if !f.acked[e.Offset] {
			out = append(out, e)
		}
	}
	return out, uint64(len(f.events)), nil
}

func (f *fakeShard) Propose(_ context.Context, cmd *shard.Command) (shard.Result, error) {
	if cmd.Op == shard.OpAck {
		f.mu.Lock()
		for _, o := range cmd.Offsets {
			f.acked[o] = true
		}
		f.mu.Unlock()
	}
	return shard.Result{}, nil
}

// fakeSource is a node's push topics, which the test changes.
type fakeSource struct {
	mu     sync.Mutex
	topics []Topic
}

func (s *fakeSource) set(topics ...Topic) {
	s.mu.Lock()
	s.topics = topics
	s.mu.Unlock()
}

func (s *fakeSource) PushTopics() []Topic {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topics
}

func (s *fakeSource) ShardOfGroup(group uint64) (string, Shard, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.topics {
		for _, sh := range t.Shards {
			if t.FirstGroup+uint64(sh.Index()) == group {
				return t.Name, sh, true
			}
		}
	}
	return "", nil, false
}

// fakeLeadership is a LeadershipWatch the test drives.
type fakeLeadership struct {
	c       chan struct{}
	mu      sync.Mutex
	changed []uint64
	stopped atomic.Bool
}

func newFakeLeadership() *fakeLeadership { return &fakeLeadership{c: make(chan struct{}, 1)} }

func (l *fakeLeadership) C() <-chan struct{} { return l.c }

func (l *fakeLeadership) Changed() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.changed
	l.changed = nil
	return g
}

func (l *fakeLeadership) Stop() { l.stopped.Store(true) }

func (l *fakeLeadership) change(groups ...uint64) {
	l.mu.Lock()
	l.changed = append(l.changed, groups...)
	l.mu.Unlock()
	select {
	case l.c <- struct{}{}:
	default:
	}
}

// receiver counts the webhook posts it receives.
func receiver(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		posts.Add(1)
	}))
	t.Cleanup(srv.Close)
	return srv, &posts
}

func pushTopicOf(name string, first uint64, url string, shards ...Shard) Topic {
	a := topic.Defaults()
	a.Shards = len(shards)
	a.PushEndpoint = url
	return Topic{Name: name, FirstGroup: first, Subscriptions: []Subscription{{Name: "default", Attributes: a}}, Shards: shards}
}

// ledShard is a topic "orders" of one shard, which the node leads, on a
// supervisor not yet synced.
func ledShard(t *testing.T, url string) (*fakeShard, *fakeSource, *Supervisor) {
	sh := newFakeShard(0)
	sh.leads.Store(true)
	src := &fakeSource{}
	src.set(pushTopicOf("orders", 10, url, sh))
	return sh, src, newSupervisor(t, src)
}

func newSupervisor(t *testing.T, src Source) *Supervisor {
	g, err := endpoint.NewGuard(endpoint.GuardConfig{Allow: endpointtest.LoopbackCIDRs})
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Source: src, Guard: g, RetryPause: 10 * time.Millisecond})
}

// run runs the supervisor until the test ends.
func run(t *testing.T, s *Supervisor, l Leadership) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(stop, l)
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
}

func running(s *Supervisor, name string, first uint64, index int) bool {
	_, ok := s.Health(name, first, index)
	return ok
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A dispatcher runs for each shard of a push topic that the node leads,
// delivers its events, and none runs for the shards it does not lead.
func TestSyncStartsDispatchersOfLedShards(t *testing.T) {
	srv, posts := receiver(t)
	led, other := newFakeShard(0), newFakeShard(1)
	led.leads.Store(true)
	src := &fakeSource{}
	src.set(pushTopicOf("orders", 10, srv.URL, led, other))
	s := newSupervisor(t, src)
	run(t, s, newFakeLeadership())

	s.Sync()
	if !running(s, "orders", 10, 0) || running(s, "orders", 10, 1) {
		t.Fatalf("dispatchers running: shard 0 %v, shard 1 %v; want shard 0 alone", running(s, "orders", 10, 0), running(s, "orders", 10, 1))
	}
	eventually(t, "the led shard's event is pushed and acked", func() bool { return posts.Load() == 1 && led.allAcked() })
	if other.reads.Load() != 0 {
		t.Errorf("the shard not led was read %d times", other.reads.Load())
	}
	if _, scheme, ok := s.Endpoint("orders"); !ok || scheme != "http" {
		t.Errorf("Endpoint(orders) = %q, %v; want the open http endpoint", scheme, ok)
	}
	if _, _, ok := s.Endpoint("nowhere"); ok {
		t.Error("a topic with no endpoint has one")
	}
}

// Notify wakes a dispatcher idle on an empty shard: it reads the events
// published since, which nothing else would make it look for.
func TestNotifyWakesTheDispatcher(t *testing.T) {
	srv, posts := receiver(t)
	sh, _, s := ledShard(t, srv.URL)
	run(t, s, newFakeLeadership())
	s.Sync()
	eventually(t, "the first event is pushed and acked", func() bool { return posts.Load() == 1 && sh.allAcked() })
	sh.add()
	s.Notify("orders", []int{1, 0}) // shard 1 is not the node's: ignored
	s.Notify("other", []int{0})     // nor is a topic it does not push
	eventually(t, "the event published since is pushed", func() bool { return posts.Load() == 2 && sh.allAcked() })
}

// A change of leadership starts or stops the dispatchers of the groups
// it names, and of no other.
func TestLeadershipChangesStartAndStopDispatchers(t *testing.T) {
	srv, _ := receiver(t)
	a, b := newFakeShard(0), newFakeShard(1)
	src := &fakeSource{}
	src.set(pushTopicOf("orders", 10, srv.URL, a, b))
	s := newSupervisor(t, src)
	l := newFakeLeadership()
	run(t, s, l)
	s.Sync()

	a.leads.Store(true)
	b.leads.Store(true)
	l.change(10) // group 10 is shard 0; shard 1's change is not reported
	eventually(t, "shard 0's dispatcher starts", func() bool { return running(s, "orders", 10, 0) })
	if running(s, "orders", 10, 1) {
		t.Error("shard 1's dispatcher started with no change of its leadership")
	}

	a.leads.Store(false)
	l.change(10, 11, 99) // 99 is no shard of the node's
	eventually(t, "shard 0's dispatcher stops and shard 1's starts", func() bool {
		return !running(s, "orders", 10, 0) && running(s, "orders", 10, 1)
	})
}

// A deleted topic's dispatchers stop and its endpoint closes; a topic
// recreated (another first group) or changed starts afresh.
func TestSyncFollowsTopicChanges(t *testing.T) {
	srv, _ := receiver(t)
	sh, src, s := ledShard(t, srv.URL)
	run(t, s, newFakeLeadership())
	s.Sync()
	if !running(s, "orders", 10, 0) {
		t.Fatal("no dispatcher for the led shard")
	}

	src.set(pushTopicOf("orders", 20, srv.URL, sh))
	s.Sync()
	if running(s, "orders", 10, 0) || !running(s, "orders", 20, 0) {
		t.Error("the recreated topic's dispatcher is not the new incarnation's")
	}
	ep, _, _ := s.Endpoint("orders")

	changed := pushTopicOf("orders", 20, srv.URL+"/other", sh)
	src.set(changed)
	s.Sync()
	if ep2, _, _ := s.Endpoint("orders"); ep2 == ep {
		t.Error("a changed endpoint kept the old one open")
	}

	src.set()
	s.Sync()
	if running(s, "orders", 20, 0) {
		t.Error("the deleted topic's dispatcher still runs")
	}
	if _, _, ok := s.Endpoint("orders"); ok {
		t.Error("the deleted topic's endpoint is still open")
	}
}

// An endpoint that fails to open is tried again after RetryPause, until
// it opens.
func TestEndpointThatFailsToOpenIsRetried(t *testing.T) {
	srv, _ := receiver(t)
	sh := newFakeShard(0)
	sh.leads.Store(true)
	src := &fakeSource{}
	bad := pushTopicOf("orders", 10, srv.URL, sh)
	bad.Subscriptions[0].Attributes.TLSCAFile = "ca.pem" // no CA directory is allowed: refused
	src.set(bad)
	s := newSupervisor(t, src)
	run(t, s, newFakeLeadership())
	s.Sync()
	if running(s, "orders", 10, 0) {
		t.Fatal("a dispatcher runs without an endpoint")
	}
	src.set(pushTopicOf("orders", 10, srv.URL, sh))
	eventually(t, "the retry opens the endpoint", func() bool { return running(s, "orders", 10, 0) })
}

// Stopping the supervisor stops every dispatcher, closes the endpoints
// and the leadership watch.
func TestRunStopsEverything(t *testing.T) {
	srv, _ := receiver(t)
	_, _, s := ledShard(t, srv.URL)
	l := newFakeLeadership()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		s.Run(stop, l)
	}()
	s.Sync()
	close(stop)
	<-done
	if running(s, "orders", 10, 0) || !l.stopped.Load() {
		t.Errorf("after Run returned: dispatcher running %v, leadership watch stopped %v", running(s, "orders", 10, 0), l.stopped.Load())
	}
	n := 0
	s.EachHealth(func(string, string, int, string, delivery.Health) { n++ })
	if n != 0 {
		t.Errorf("%d dispatchers left", n)
	}
}

// subLog is a shard's log as one subscription sees it: the fake shard
// keeps an ack set per subscription.
type subShard struct {
	*fakeShard
	mu    sync.Mutex
	acked map[uint64]map[uint64]bool // by subscription
	skips map[uint64]int
}

func (f *subShard) Log(sub uint64) delivery.Log { return subLog{f, sub} }

type subLog struct {
	f   *subShard
	sub uint64
}

func (l subLog) Seeks() (uint64, <-chan struct{}) { return 0, nil } // no seeks here

func (l subLog) Read(_ context.Context, from uint64, _ int) ([]delivery.Event, uint64, error) {
	l.f.fakeShard.mu.Lock()
	evs := append([]delivery.Event(nil), l.f.events...)
	l.f.fakeShard.mu.Unlock()
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	var out []delivery.Event
	for _, e := range evs[min(int(from), len(evs)):] {
		if !l.f.acked[l.sub][e.Offset] {
			out = append(out, e)
		}
	}
	return out, uint64(len(evs)), nil
}

func (l subLog) Propose(_ context.Context, cmd *shard.Command) (shard.Result, error) {
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	if cmd.Op == shard.OpAck || cmd.Op == shard.OpSkip {
		if l.f.acked[l.sub] == nil {
			l.f.acked[l.sub] = make(map[uint64]bool)
		}
		for _, o := range cmd.Offsets {
			l.f.acked[l.sub][o] = true
		}
	}
	if cmd.Op == shard.OpSkip {
		l.f.skips[l.sub] += len(cmd.Offsets)
	}
	return shard.Result{}, nil
}

func (f *subShard) done(sub uint64, n int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.acked[sub]) == n
}

// Each subscription of a topic has its own endpoint and dispatchers, and
// gets only the events its filter admits; a disabled one has none.
func TestSubscriptionsDeliverTheirOwnEvents(t *testing.T) {
	billing, billed := receiver(t)
	shipping, shipped := receiver(t)
	fs := newFakeShard(0)
	fs.leads.Store(true)
	for range 3 {
		fs.add()
	}
	fs.mu.Lock()
	fs.events[1].Event.Headers = []shard.Header{{Name: "type", Value: "shipping"}}
	fs.mu.Unlock()
	sh := &subShard{fakeShard: fs, acked: map[uint64]map[uint64]bool{}, skips: map[uint64]int{}}
	sub := func(id uint64, name, url, policy string) Subscription {
		set := topic.DefaultSubscriptionAttributes()
		set.FilterPolicy = policy
		a := topic.Defaults()
		a.PushEndpoint = url
		return Subscription{ID: id, Name: name, Attributes: a, Settings: set}
	}
	src := &fakeSource{}
	tp := Topic{Name: "orders", FirstGroup: 10, Shards: []Shard{sh}, Subscriptions: []Subscription{
		sub(3, "billing", billing.URL, ""),
		sub(4, "shipping", shipping.URL, `{"type": ["shipping"]}`),
	}}
	src.set(tp)
	s := newSupervisor(t, src)
	run(t, s, newFakeLeadership())
	s.Sync()
	eventually(t, "both subscriptions are done with the four events", func() bool { return sh.done(3, 4) && sh.done(4, 4) })
	if billed.Load() != 4 || shipped.Load() != 1 {
		t.Fatalf("billing got %d posts, shipping %d; want 4 and 1", billed.Load(), shipped.Load())
	}
	sh.mu.Lock()
	skipped := sh.skips[4]
	sh.mu.Unlock()
	if skipped != 3 {
		t.Fatalf("shipping skipped %d events, want 3", skipped)
	}
	if _, ok := s.SubscriptionHealth("orders", 10, 4, 0); !ok {
		t.Fatal("no health for the shipping subscription's dispatcher")
	}
	// Disabled: its dispatcher stops, the other keeps running.
	tp.Subscriptions[1].Disabled = true
	src.set(tp)
	s.Sync()
	if _, ok := s.SubscriptionHealth("orders", 10, 4, 0); ok {
		t.Fatal("a disabled subscription's dispatcher still runs")
	}
	if _, ok := s.SubscriptionHealth("orders", 10, 3, 0); !ok {
		t.Fatal("disabling one subscription stopped another")
	}
}

// A subscription whose endpoint answers 410 Gone is reported to OnDisable,
// once, however many shards' dispatchers see it.
func TestGoneEndpointIsReportedOnce(t *testing.T) {
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusGone)
	}))
	t.Cleanup(gone.Close)
	var shards []Shard
	for i := range 3 {
		sh := newFakeShard(i)
		sh.leads.Store(true)
		shards = append(shards, sh)
	}
	src := &fakeSource{}
	tp := pushTopicOf("orders", 10, gone.URL, shards...)
	src.set(tp)
	g, err := endpoint.NewGuard(endpoint.GuardConfig{Allow: endpointtest.LoopbackCIDRs})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	var reason atomic.Value
	s := New(Config{Source: src, Guard: g, RetryPause: 10 * time.Millisecond, OnDisable: func(topicName string, sub Subscription, why string) {
		if topicName == "orders" && sub.Name == "default" {
			calls.Add(1)
			reason.Store(why)
		}
	}})
	run(t, s, newFakeLeadership())
	s.Sync()
	eventually(t, "the subscription is reported", func() bool { return calls.Load() > 0 })
	time.Sleep(50 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("OnDisable called %d times, want once", n)
	}
	if why, _ := reason.Load().(string); !strings.Contains(why, "410") && !strings.Contains(strings.ToLower(why), "no longer exists") {
		t.Fatalf("reason %q does not say the endpoint is gone", why)
	}
	for _, sh := range shards {
		if sh.(*fakeShard).allAcked() {
			t.Fatal("an event sent to a gone endpoint was acknowledged")
		}
	}
}
