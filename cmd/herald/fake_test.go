package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

var eventTime = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)

// fakeHerald is a tiny in-memory herald: one shard per topic, no
// durability. It records every request it receives.
type fakeHerald struct {
	heraldv1connect.UnimplementedHeraldServiceHandler

	mu       sync.Mutex
	requests []proto.Message
	fail     error // when set, every RPC fails with it
	topics   map[string]*heraldv1.Topic
	events   []*heraldv1.Event // every event of every topic, in order
	leased   map[string]bool
	acked    map[string]bool
	stats    *heraldv1.TopicStatsResponse
	// unreadable holds, per topic, the shards Fetch reports it could not
	// read; a topic in noneReadable fails every Fetch as the server does
	// when it can read no shard.
	unreadable   map[string][]*heraldv1.UnreadableShard
	noneReadable map[string]bool
}

func newFakeHerald() *fakeHerald {
	return &fakeHerald{
		topics: map[string]*heraldv1.Topic{},
		leased: map[string]bool{},
		acked:  map[string]bool{},

		unreadable:   map[string][]*heraldv1.UnreadableShard{},
		noneReadable: map[string]bool{},
	}
}

// setUnreadable makes Fetch of topic report shards as unreadable (none:
// nothing to report); with none set, no shard of the topic is readable.
func (f *fakeHerald) setUnreadable(topic string, none bool, shards ...*heraldv1.UnreadableShard) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreadable[topic] = shards
	f.noneReadable[topic] = none
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

// start serves f and returns its base URL.
func (f *fakeHerald) start(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(heraldv1connect.NewHeraldServiceHandler(f))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// begin records a request and returns the error to fail it with, if any.
// It locks f; the caller must unlock it.
func (f *fakeHerald) begin(msg proto.Message) error {
	f.mu.Lock()
	f.requests = append(f.requests, proto.Clone(msg))
	return f.fail
}

// received returns the recorded requests of type T.
func received[T proto.Message](f *fakeHerald) []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []T
	for _, r := range f.requests {
		if m, ok := r.(T); ok {
			out = append(out, m)
		}
	}
	return out
}

func (f *fakeHerald) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

// addTopic creates a topic directly, as if it had been created before.
func (f *fakeHerald) addTopic(name string, attrs map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics[name] = &heraldv1.Topic{Name: name, Attributes: attrs,
		CreatedAt: timestamppb.New(eventTime), UpdatedAt: timestamppb.New(eventTime)}
}

// append adds events to a topic, as if they had been published before, and
// returns their ids. The caller must hold f.mu.
func (f *fakeHerald) append(topic string, events ...*heraldv1.PublishEvent) []string {
	var ids []string
	for _, e := range events {
		offset := uint64(0)
		for _, old := range f.events {
			if old.GetTopic() == topic {
				offset++
			}
		}
		id := fmt.Sprintf("%s/0/%d", topic, offset)
		f.events = append(f.events, &heraldv1.Event{
			Id: id, Topic: topic, Offset: offset, Key: e.GetKey(),
			Payload: bytes.Clone(e.GetPayload()), Headers: e.GetHeaders(),
			Time: timestamppb.New(eventTime),
		})
		ids = append(ids, id)
	}
	return ids
}

func (f *fakeHerald) addEvents(topic string, events ...*heraldv1.PublishEvent) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.append(topic, events...)
}

func notFound(topic string) error {
	return connect.NewError(connect.CodeNotFound,
		fmt.Errorf("topic %q does not exist; create it with \"herald topic create %s\"", topic, topic))
}

func (f *fakeHerald) CreateTopic(_ context.Context, req *connect.Request[heraldv1.CreateTopicRequest]) (*connect.Response[heraldv1.CreateTopicResponse], error) {
	defer f.mu.Unlock()
	if err := f.begin(req.Msg); err != nil {
		return nil, err
	}
	name := req.Msg.GetName()
	if _, ok := f.topics[name]; ok {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("topic %q already exists", name))
	}
	attrs := map[string]string{"shards": "11", "persistent": "true"}
	for k, v := range req.Msg.GetAttributes() {
		attrs[k] = v
	}
	t := &heraldv1.Topic{Name: name, Attributes: attrs,
		CreatedAt: timestamppb.New(eventTime), UpdatedAt: timestamppb.New(eventTime)}
	f.topics[name] = t
	return connect.NewResponse(&heraldv1.CreateTopicResponse{Topic: t}), nil
}

func (f *fakeHerald) GetTopic(_ context.Context, req *connect.Request[heraldv1.GetTopicRequest]) (*connect.Response[heraldv1.GetTopicResponse], error) {
	defer f.mu.Unlock()
	if err := f.begin(req.Msg); err != nil {
		return nil, err
	}
	t, ok := f.topics[req.Msg.GetName()]
	if !ok {
		return nil, notFound(req.Msg.GetName())
	}
	return connect.NewResponse(&heraldv1.GetTopicResponse{Topic: t}), nil
}

func (f *fakeHerald) ListTopics(_ context.Context, req *connect.Request[heraldv1.ListTopicsRequest]) (*connect.Response[heraldv1.ListTopicsResponse], error) {
	defer f.mu.Unlock()
	if err := f.begin(req.Msg); err != nil {
		return nil, err
	}
	resp := &heraldv1.ListTopicsResponse{}
	for _, t := range f.topics {
		resp.Topics = append(resp.Topics, t)
	}
	return connect.NewResponse(resp), nil
}

func (f *fakeHerald) SetTopicAttributes(_ context.Context, req *connect.Request[heraldv1.SetTopicAttributesRequest]) (*connect.Response[heraldv1.SetTopicAttributesResponse], error) {
	defer f.mu.Unlock()
	if err := f.begin(req.Msg); err != nil {
		return nil, err
	}
	t, ok := f.topics[req.Msg.GetName()]
	if !ok {
		return nil, notFound(req.Msg.GetName())
	}
	for k, v := range req.Msg.GetAttributes() {
		t.Attributes[k] = v
	}
	return connect.NewResponse(&heraldv1.SetTopicAttributesResponse{Topic: t}), nil
}

func (f *fakeHerald) DeleteTopic(_ context.Context, req *connect.Request[heraldv1.DeleteTopicRequest]) (*connect.Response[heraldv1.DeleteTopicResponse], error) {
	defer f.mu.Unlock()
	if err := f.begin(req.Msg); err != nil {
		return nil, err
	}
	if _, ok := f.topics[req.Msg.GetName()]; !ok {
		return nil, notFound(req.Msg.GetName())
	}
	delete(f.topics, req.Msg.GetName())
	return connect.NewResponse(&heraldv1.DeleteTopicResponse{}), nil
}

func (f *fakeHerald) TopicStats(_ context.Context, req *connect.Request[heraldv1.TopicStatsRequest]) (*connect.Response[heraldv1.TopicStatsResponse], error) {
	defer f.mu.Unlock()
	if err := f.begin(req.Msg); err != nil {
		return nil, err
	}
	if f.stats == nil {
		return nil, notFound(req.Msg.GetName())
	}
	return connect.NewResponse(f.stats), nil
}

func (f *fakeHerald) Publish(_ context.Context, req *connect.Request[heraldv1.PublishRequest]) (*connect.Response[heraldv1.PublishResponse], error) {
	defer f.mu.Unlock()
	if err := f.begin(req.Msg); err != nil {
		return nil, err
	}
	if _, ok := f.topics[req.Msg.GetTopic()]; !ok {
		return nil, notFound(req.Msg.GetTopic())
	}
	ids := f.append(req.Msg.GetTopic(), req.Msg.GetEvents()...)
	return connect.NewResponse(&heraldv1.PublishResponse{Ids: ids}), nil
}

func (f *fakeHerald) Reserve(_ context.Context, req *connect.Request[heraldv1.ReserveRequest]) (*connect.Response[heraldv1.ReserveResponse], error) {
	defer f.mu.Unlock()
	if err := f.begin(req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&heraldv1.ReserveResponse{
		ReservationId: req.Msg.GetTopic() + "/0/r1",
		ExpiresAt:     timestamppb.New(eventTime.Add(time.Minute)),
	}), nil
}

func (f *fakeHerald) Commit(_ context.Context, req *connect.Request[heraldv1.CommitRequest]) (*connect.Response[heraldv1.CommitResponse], error) {
	defer f.mu.Unlock()
	if err := f.begin(req.Msg); err != nil {
		return nil, err
	}
	ids := f.append("reserved", req.Msg.GetEvents()...)
	return connect.NewResponse(&heraldv1.CommitResponse{Ids: ids}), nil
}

func (f *fakeHerald) Abort(_ context.Context, req *connect.Request[heraldv1.AbortRequest]) (*connect.Response[heraldv1.AbortResponse], error) {
	defer f.mu.Unlock()
	if err := f.begin(req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&heraldv1.AbortResponse{}), nil
}

// Fetch leases available events; with none, it waits as asked and returns
// nothing. Either way it lists the topic's unreadable shards.
func (f *fakeHerald) Fetch(ctx context.Context, req *connect.Request[heraldv1.FetchRequest]) (*connect.Response[heraldv1.FetchResponse], error) {
	events, unreadable, err := f.lease(req.Msg)
	if err != nil {
		return nil, err
	}
	if len(events) > 0 {
		return connect.NewResponse(&heraldv1.FetchResponse{Events: events, UnreadableShards: unreadable}), nil
	}
	select {
	case <-time.After(req.Msg.GetWait().AsDuration()):
	case <-ctx.Done():
	}
	return connect.NewResponse(&heraldv1.FetchResponse{UnreadableShards: unreadable}), nil
}

func (f *fakeHerald) lease(req *heraldv1.FetchRequest) ([]*heraldv1.Event, []*heraldv1.UnreadableShard, error) {
	defer f.mu.Unlock()
	if err := f.begin(req); err != nil {
		return nil, nil, err
	}
	unreadable := f.unreadable[req.GetTopic()]
	if f.noneReadable[req.GetTopic()] {
		return nil, nil, unreadableError(req.GetTopic(), unreadable)
	}
	limit := int(req.GetMaxEvents())
	if limit == 0 {
		limit = 100
	}
	var out []*heraldv1.Event
	for _, e := range f.events {
		if len(out) == limit {
			break
		}
		if e.GetTopic() != req.GetTopic() || f.leased[e.GetId()] || f.acked[e.GetId()] {
			continue
		}
		f.leased[e.GetId()] = true
		out = append(out, e)
	}
	return out, unreadable, nil
}

func (f *fakeHerald) Ack(_ context.Context, req *connect.Request[heraldv1.AckRequest]) (*connect.Response[heraldv1.AckResponse], error) {
	defer f.mu.Unlock()
	if err := f.begin(req.Msg); err != nil {
		return nil, err
	}
	var n uint32
	for _, id := range req.Msg.GetIds() {
		if !f.acked[id] {
			f.acked[id] = true
			n++
		}
	}
	return connect.NewResponse(&heraldv1.AckResponse{Acked: n}), nil
}
