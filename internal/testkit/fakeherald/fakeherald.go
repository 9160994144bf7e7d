// Package fakeherald is an in-memory stand-in for a herald server, for the
// tests of herald's clients: the Go client and the CLI. It speaks the real
// API (Connect, gRPC and gRPC-Web, over HTTP/1.1 and unencrypted HTTP/2),
// keeps topics and events in memory with one shard per topic and no
// durability, and records every request with the protocol it came over,
// so that a test can check both what its client sent and what it made of
// the answer.
//
// Tests shape the answers by seeding state (AddTopic, AddEvents,
// AddDeliveries, PutSubscription, SetStats, SetUnreadable) and make every call fail or
// wait with SetFail and SetDelay. Times come from the clock given to New,
// never from the wall clock.
package fakeherald

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/internal/topic"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// defaultAttributes returns the attributes the fake gives a topic created
// without them, from the server's defaults.
func defaultAttributes() map[string]string {
	d := topic.Defaults()
	return map[string]string{"shards": strconv.Itoa(d.Shards), "persistent": strconv.FormatBool(d.Persistent)}
}

// reservationLease is how long a reservation lasts.
const reservationLease = time.Minute

// Request is a request the server received.
type Request struct {
	Msg      proto.Message
	Protocol string // connect.ProtocolConnect, ProtocolGRPC or ProtocolGRPCWeb
}

// Server is the fake herald. Its zero value is not usable; call New.
type Server struct {
	heraldv1connect.UnimplementedHeraldServiceHandler

	now time.Time // the time of every timestamp the fake makes

	mu           sync.Mutex
	requests     []Request
	fail         error
	delay        time.Duration
	topics       map[string]*heraldv1.Topic
	events       []*heraldv1.Event // every event of every topic, in order
	leased       map[string]bool
	acked        map[string]bool
	reservations map[string]string // reservation id → topic
	stats        *heraldv1.TopicStatsResponse
	unreadable   map[string][]*heraldv1.UnreadableShard
	noneReadable map[string]bool
	lapsed       map[string]bool // ids whose acks are answered as lapsed
	subs         subscriptions
}

// New returns an empty server whose clock stands at now.
func New(now time.Time) *Server {
	return &Server{
		now:          now,
		topics:       map[string]*heraldv1.Topic{},
		leased:       map[string]bool{},
		acked:        map[string]bool{},
		reservations: map[string]string{},
		unreadable:   map[string][]*heraldv1.UnreadableShard{},
		noneReadable: map[string]bool{},
		lapsed:       map[string]bool{},
	}
}

// SetLapsed makes acks of the events with these ids lapse from now on, as
// the server answers an ack whose lease ran out and whose event was handed
// out again: named in AckResponse.lapsed, and not acknowledged.
func (s *Server) SetLapsed(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.lapsed[id] = true
	}
}

// Start serves s on a loopback port until the test ends and returns its
// base URL.
func (s *Server) Start(t testing.TB) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(heraldv1connect.NewHeraldServiceHandler(s))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true) // gRPC without TLS
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// SetFail makes every call fail with err from now on (nil: succeed again).
func (s *Server) SetFail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

// SetDelay makes every call wait d before it answers, or until its
// context ends.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// SetStats sets what TopicStats answers; until it is set, TopicStats
// answers that the topic does not exist.
func (s *Server) SetStats(stats *heraldv1.TopicStatsResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = stats
}

// SetUnreadable makes Fetch of topic report shards as unreadable; with
// none set, no shard of the topic is readable and Fetch fails as the
// server does.
func (s *Server) SetUnreadable(topic string, none bool, shards ...*heraldv1.UnreadableShard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unreadable[topic] = shards
	s.noneReadable[topic] = none
}

// AddTopic adds a topic as if it had been created before, at the fake's
// time.
func (s *Server) AddTopic(name string, attrs map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.topics[name] = s.newTopic(name, attrs)
}

// PutTopic adds or replaces a topic exactly as given.
func (s *Server) PutTopic(t *heraldv1.Topic) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.topics[t.GetName()] = proto.Clone(t).(*heraldv1.Topic)
}

// AddEvents appends events to a topic, as if they had been published
// before, and returns their ids.
func (s *Server) AddEvents(topic string, events ...*heraldv1.PublishEvent) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.append(topic, events...)
}

// AddDeliveries queues events exactly as given (id, shard, attempt and
// all), for tests of what a client makes of a Fetch answer.
func (s *Server) AddDeliveries(events ...*heraldv1.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		s.events = append(s.events, proto.Clone(e).(*heraldv1.Event))
	}
}

// Requests returns every request received, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Last returns the last request received; it fails t if there was none.
func (s *Server) Last(t testing.TB) Request {
	t.Helper()
	reqs := s.Requests()
	if len(reqs) == 0 {
		t.Fatal("the fake herald received no request")
	}
	return reqs[len(reqs)-1]
}

// Received returns the requests of type T that s received, in order.
func Received[T proto.Message](s *Server) []T {
	var out []T
	for _, r := range s.Requests() {
		if m, ok := r.Msg.(T); ok {
			out = append(out, m)
		}
	}
	return out
}

// begin records a request, waits the configured delay, and returns the
// error to fail the call with, if any.
func begin[T any](ctx context.Context, s *Server, req *connect.Request[T]) error {
	msg := any(req.Msg).(proto.Message)
	s.mu.Lock()
	s.requests = append(s.requests, Request{Msg: proto.Clone(msg), Protocol: req.Peer().Protocol})
	fail, delay := s.fail, s.delay
	s.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err() // connect turns it into the matching code
		}
	}
	return fail
}

// answer records req and answers it with what do returns, which runs
// holding s.mu, unless the call is to fail.
func answer[Req, Resp any](ctx context.Context, s *Server, req *connect.Request[Req], do func(*Req) (*Resp, error)) (*connect.Response[Resp], error) {
	if err := begin(ctx, s, req); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resp, err := do(req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

func (s *Server) newTopic(name string, attrs map[string]string) *heraldv1.Topic {
	all := defaultAttributes()
	maps.Copy(all, attrs)
	return &heraldv1.Topic{Name: name, Attributes: all,
		CreatedAt: timestamppb.New(s.now), UpdatedAt: timestamppb.New(s.now)}
}

// append adds events to a topic's only shard and returns their ids. The
// caller holds s.mu.
func (s *Server) append(topic string, events ...*heraldv1.PublishEvent) []string {
	var offset uint64
	for _, old := range s.events {
		if old.GetTopic() == topic {
			offset++
		}
	}
	ids := make([]string, 0, len(events))
	for _, e := range events {
		id := fmt.Sprintf("%s/0/%d", topic, offset)
		s.events = append(s.events, &heraldv1.Event{
			Id: id, Topic: topic, Offset: offset, Key: e.GetKey(),
			Payload: bytes.Clone(e.GetPayload()), Headers: e.GetHeaders(),
			Time: timestamppb.New(s.now),
		})
		ids = append(ids, id)
		offset++
	}
	return ids
}

func notFound(topic string) error {
	return connect.NewError(connect.CodeNotFound,
		fmt.Errorf("topic %q does not exist; create it with \"herald topic create %s\"", topic, topic))
}

// topic returns the named topic or the server's not-found error. The
// caller holds s.mu.
func (s *Server) topic(name string) (*heraldv1.Topic, error) {
	t, ok := s.topics[name]
	if !ok {
		return nil, notFound(name)
	}
	return t, nil
}

func (s *Server) CreateTopic(ctx context.Context, req *connect.Request[heraldv1.CreateTopicRequest]) (*connect.Response[heraldv1.CreateTopicResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.CreateTopicRequest) (*heraldv1.CreateTopicResponse, error) {
		name := r.GetName()
		if _, ok := s.topics[name]; ok {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("topic %q already exists", name))
		}
		t := s.newTopic(name, r.GetAttributes())
		s.topics[name] = t
		return &heraldv1.CreateTopicResponse{Topic: t}, nil
	})
}

func (s *Server) GetTopic(ctx context.Context, req *connect.Request[heraldv1.GetTopicRequest]) (*connect.Response[heraldv1.GetTopicResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.GetTopicRequest) (*heraldv1.GetTopicResponse, error) {
		t, err := s.topic(r.GetName())
		if err != nil {
			return nil, err
		}
		return &heraldv1.GetTopicResponse{Topic: t}, nil
	})
}

// ListTopics lists the topics sorted by name, as the server does.
func (s *Server) ListTopics(ctx context.Context, req *connect.Request[heraldv1.ListTopicsRequest]) (*connect.Response[heraldv1.ListTopicsResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.ListTopicsRequest) (*heraldv1.ListTopicsResponse, error) {
		resp := &heraldv1.ListTopicsResponse{}
		for _, t := range s.topics {
			resp.Topics = append(resp.Topics, t)
		}
		sort.Slice(resp.Topics, func(i, j int) bool { return resp.Topics[i].GetName() < resp.Topics[j].GetName() })
		return resp, nil
	})
}

func (s *Server) SetTopicAttributes(ctx context.Context, req *connect.Request[heraldv1.SetTopicAttributesRequest]) (*connect.Response[heraldv1.SetTopicAttributesResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.SetTopicAttributesRequest) (*heraldv1.SetTopicAttributesResponse, error) {
		t, err := s.topic(r.GetName())
		if err != nil {
			return nil, err
		}
		if t.Attributes == nil {
			t.Attributes = map[string]string{}
		}
		maps.Copy(t.Attributes, r.GetAttributes())
		return &heraldv1.SetTopicAttributesResponse{Topic: t}, nil
	})
}

func (s *Server) DeleteTopic(ctx context.Context, req *connect.Request[heraldv1.DeleteTopicRequest]) (*connect.Response[heraldv1.DeleteTopicResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.DeleteTopicRequest) (*heraldv1.DeleteTopicResponse, error) {
		if _, err := s.topic(r.GetName()); err != nil {
			return nil, err
		}
		delete(s.topics, r.GetName())
		return &heraldv1.DeleteTopicResponse{}, nil
	})
}

func (s *Server) TopicStats(ctx context.Context, req *connect.Request[heraldv1.TopicStatsRequest]) (*connect.Response[heraldv1.TopicStatsResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.TopicStatsRequest) (*heraldv1.TopicStatsResponse, error) {
		if s.stats == nil {
			return nil, notFound(r.GetName())
		}
		return s.stats, nil
	})
}

func (s *Server) Publish(ctx context.Context, req *connect.Request[heraldv1.PublishRequest]) (*connect.Response[heraldv1.PublishResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.PublishRequest) (*heraldv1.PublishResponse, error) {
		if _, err := s.topic(r.GetTopic()); err != nil {
			return nil, err
		}
		ids := s.append(r.GetTopic(), r.GetEvents()...)
		return &heraldv1.PublishResponse{Ids: ids}, nil
	})
}

// Reserve grants a reservation on the topic's only shard, named
// <topic>/0/r<n>, lasting a minute.
func (s *Server) Reserve(ctx context.Context, req *connect.Request[heraldv1.ReserveRequest]) (*connect.Response[heraldv1.ReserveResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.ReserveRequest) (*heraldv1.ReserveResponse, error) {
		id := fmt.Sprintf("%s/0/r%d", r.GetTopic(), len(s.reservations)+1)
		s.reservations[id] = r.GetTopic()
		return &heraldv1.ReserveResponse{
			ReservationId: id,
			ExpiresAt:     timestamppb.New(s.now.Add(reservationLease)),
		}, nil
	})
}

func (s *Server) Commit(ctx context.Context, req *connect.Request[heraldv1.CommitRequest]) (*connect.Response[heraldv1.CommitResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.CommitRequest) (*heraldv1.CommitResponse, error) {
		topic, ok := s.reservations[r.GetReservationId()]
		if !ok {
			return nil, connect.NewError(connect.CodeNotFound,
				fmt.Errorf("reservation %q does not exist (expired, committed or aborted); reserve again", r.GetReservationId()))
		}
		delete(s.reservations, r.GetReservationId())
		ids := s.append(topic, r.GetEvents()...)
		return &heraldv1.CommitResponse{Ids: ids}, nil
	})
}

// Abort forgets a reservation; aborting an unknown one succeeds, as it
// does on the server (an abort may be retried).
func (s *Server) Abort(ctx context.Context, req *connect.Request[heraldv1.AbortRequest]) (*connect.Response[heraldv1.AbortResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.AbortRequest) (*heraldv1.AbortResponse, error) {
		delete(s.reservations, r.GetReservationId())
		return &heraldv1.AbortResponse{}, nil
	})
}

// Fetch leases available events; with none, it waits as asked and returns
// nothing. Either way it lists the topic's unreadable shards.
func (s *Server) Fetch(ctx context.Context, req *connect.Request[heraldv1.FetchRequest]) (*connect.Response[heraldv1.FetchResponse], error) {
	if err := begin(ctx, s, req); err != nil {
		return nil, err
	}
	events, unreadable, err := s.lease(req.Msg)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 {
		select {
		case <-time.After(req.Msg.GetWait().AsDuration()):
		case <-ctx.Done():
		}
	}
	return connect.NewResponse(&heraldv1.FetchResponse{Events: events, UnreadableShards: unreadable}), nil
}

func (s *Server) lease(req *heraldv1.FetchRequest) ([]*heraldv1.Event, []*heraldv1.UnreadableShard, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	unreadable := s.unreadable[req.GetTopic()]
	if s.noneReadable[req.GetTopic()] {
		return nil, nil, unreadableError(req.GetTopic(), unreadable)
	}
	limit := int(req.GetMaxEvents())
	if limit == 0 {
		limit = 100
	}
	var out []*heraldv1.Event
	for _, e := range s.events {
		if len(out) == limit {
			break
		}
		if e.GetTopic() != req.GetTopic() || s.leased[e.GetId()] || s.acked[e.GetId()] {
			continue
		}
		s.leased[e.GetId()] = true
		out = append(out, e)
	}
	return out, unreadable, nil
}

// unreadableError is the server's answer to a Fetch of a topic none of
// whose shards can be read: unavailable, with the shards in a detail.
func unreadableError(topic string, shards []*heraldv1.UnreadableShard) error {
	ce := connect.NewError(connect.CodeUnavailable,
		fmt.Errorf("unavailable: none of the %d shards of topic %q could be read", len(shards), topic))
	if d, err := connect.NewErrorDetail(&heraldv1.FetchResponse{UnreadableShards: shards}); err == nil {
		ce.AddDetail(d)
	}
	return ce
}

// Ack acknowledges leased or available events and counts those not
// acknowledged before, except those SetLapsed named.
func (s *Server) Ack(ctx context.Context, req *connect.Request[heraldv1.AckRequest]) (*connect.Response[heraldv1.AckResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.AckRequest) (*heraldv1.AckResponse, error) {
		var n uint32
		var lapsed []string
		for _, id := range r.GetIds() {
			switch {
			case s.lapsed[id]:
				lapsed = append(lapsed, id)
			case s.known(id) && !s.acked[id]:
				s.acked[id] = true
				n++
			}
		}
		return &heraldv1.AckResponse{Acked: n, Lapsed: lapsed}, nil
	})
}

// known reports whether an event with the id exists. The caller holds
// s.mu.
func (s *Server) known(id string) bool {
	for _, e := range s.events {
		if e.GetId() == id {
			return true
		}
	}
	return false
}

// Nack returns leased events to the queue at once.
func (s *Server) Nack(ctx context.Context, req *connect.Request[heraldv1.NackRequest]) (*connect.Response[heraldv1.NackResponse], error) {
	return answer(ctx, s, req, func(r *heraldv1.NackRequest) (*heraldv1.NackResponse, error) {
		for _, id := range r.GetIds() {
			delete(s.leased, id)
		}
		return &heraldv1.NackResponse{}, nil
	})
}
