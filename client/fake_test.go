package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// fakeService answers every RPC with canned responses and records the
// requests it receives, with the protocol each came over.
type fakeService struct {
	heraldv1connect.UnimplementedHeraldServiceHandler

	// Canned answers, set by tests before they call.
	err     error // when set, every RPC fails with it
	delay   time.Duration
	topic   *heraldv1.Topic
	topics  []*heraldv1.Topic
	stats   *heraldv1.TopicStatsResponse
	ids     []string
	reserve *heraldv1.ReserveResponse
	events  []*heraldv1.Event
	// unreadable is what Fetch reports beside events.
	unreadable []*heraldv1.UnreadableShard
	acked      uint32

	mu        sync.Mutex
	requests  []proto.Message
	protocols []string
}

// answer records req and returns resp, or the canned error.
func answer[Req, Resp any](ctx context.Context, f *fakeService, req *connect.Request[Req], resp *Resp) (*connect.Response[Resp], error) {
	f.mu.Lock()
	f.requests = append(f.requests, any(req.Msg).(proto.Message))
	f.protocols = append(f.protocols, req.Peer().Protocol)
	f.mu.Unlock()
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, ctx.Err() // connect turns it into the matching code
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	return connect.NewResponse(resp), nil
}

// last returns the last request received and its protocol.
func (f *fakeService) last(t *testing.T) (proto.Message, string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		t.Fatal("the server received no request")
	}
	n := len(f.requests) - 1
	return f.requests[n], f.protocols[n]
}

func (f *fakeService) CreateTopic(ctx context.Context, req *connect.Request[heraldv1.CreateTopicRequest]) (*connect.Response[heraldv1.CreateTopicResponse], error) {
	return answer(ctx, f, req, &heraldv1.CreateTopicResponse{Topic: f.topic})
}

func (f *fakeService) GetTopic(ctx context.Context, req *connect.Request[heraldv1.GetTopicRequest]) (*connect.Response[heraldv1.GetTopicResponse], error) {
	return answer(ctx, f, req, &heraldv1.GetTopicResponse{Topic: f.topic})
}

func (f *fakeService) ListTopics(ctx context.Context, req *connect.Request[heraldv1.ListTopicsRequest]) (*connect.Response[heraldv1.ListTopicsResponse], error) {
	return answer(ctx, f, req, &heraldv1.ListTopicsResponse{Topics: f.topics})
}

func (f *fakeService) SetTopicAttributes(ctx context.Context, req *connect.Request[heraldv1.SetTopicAttributesRequest]) (*connect.Response[heraldv1.SetTopicAttributesResponse], error) {
	return answer(ctx, f, req, &heraldv1.SetTopicAttributesResponse{Topic: f.topic})
}

func (f *fakeService) DeleteTopic(ctx context.Context, req *connect.Request[heraldv1.DeleteTopicRequest]) (*connect.Response[heraldv1.DeleteTopicResponse], error) {
	return answer(ctx, f, req, &heraldv1.DeleteTopicResponse{})
}

func (f *fakeService) TopicStats(ctx context.Context, req *connect.Request[heraldv1.TopicStatsRequest]) (*connect.Response[heraldv1.TopicStatsResponse], error) {
	return answer(ctx, f, req, f.stats)
}

func (f *fakeService) Publish(ctx context.Context, req *connect.Request[heraldv1.PublishRequest]) (*connect.Response[heraldv1.PublishResponse], error) {
	return answer(ctx, f, req, &heraldv1.PublishResponse{Ids: f.ids})
}

func (f *fakeService) Reserve(ctx context.Context, req *connect.Request[heraldv1.ReserveRequest]) (*connect.Response[heraldv1.ReserveResponse], error) {
	return answer(ctx, f, req, f.reserve)
}

func (f *fakeService) Commit(ctx context.Context, req *connect.Request[heraldv1.CommitRequest]) (*connect.Response[heraldv1.CommitResponse], error) {
	return answer(ctx, f, req, &heraldv1.CommitResponse{Ids: f.ids})
}

func (f *fakeService) Abort(ctx context.Context, req *connect.Request[heraldv1.AbortRequest]) (*connect.Response[heraldv1.AbortResponse], error) {
	return answer(ctx, f, req, &heraldv1.AbortResponse{})
}

func (f *fakeService) Fetch(ctx context.Context, req *connect.Request[heraldv1.FetchRequest]) (*connect.Response[heraldv1.FetchResponse], error) {
	return answer(ctx, f, req, &heraldv1.FetchResponse{Events: f.events, UnreadableShards: f.unreadable})
}

func (f *fakeService) Ack(ctx context.Context, req *connect.Request[heraldv1.AckRequest]) (*connect.Response[heraldv1.AckResponse], error) {
	return answer(ctx, f, req, &heraldv1.AckResponse{Acked: f.acked})
}

func (f *fakeService) Nack(ctx context.Context, req *connect.Request[heraldv1.NackRequest]) (*connect.Response[heraldv1.NackResponse], error) {
	return answer(ctx, f, req, &heraldv1.NackResponse{})
}

// startServer serves svc over HTTP/1.1 and unencrypted HTTP/2, so that both
// the Connect and the gRPC protocol reach it, and returns its base URL.
func startServer(t *testing.T, svc heraldv1connect.HeraldServiceHandler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(heraldv1connect.NewHeraldServiceHandler(svc))
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

// h2cClient returns an HTTP client that speaks unencrypted HTTP/2 only.
func h2cClient(t *testing.T) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}
