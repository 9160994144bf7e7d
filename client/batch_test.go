package client

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// slowPublisher answers Publish after a delay with ids that name each
// event's payload, and counts requests.
type slowPublisher struct {
	heraldv1connect.UnimplementedHeraldServiceHandler
	requests atomic.Int64
	fail     atomic.Bool
}

func (s *slowPublisher) Publish(_ context.Context, req *connect.Request[heraldv1.PublishRequest]) (*connect.Response[heraldv1.PublishResponse], error) {
	s.requests.Add(1)
	time.Sleep(5 * time.Millisecond)
	if s.fail.Load() {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("queue full"))
	}
	resp := &heraldv1.PublishResponse{}
	for _, e := range req.Msg.Events {
		resp.Ids = append(resp.Ids, req.Msg.Topic+"/"+string(e.Payload))
	}
	return connect.NewResponse(resp), nil
}

func TestPublishBatchingSharesRequestsAndKeepsEachCallersIDs(t *testing.T) {
	s := &slowPublisher{}
	_, h := heraldv1connect.NewHeraldServiceHandler(s)
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := New(srv.URL, WithPublishBatching(100))
	const callers = 64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			for j := range 5 {
				p := fmt.Sprintf("c%d-%d", i, j)
				ids, err := c.Publish(context.Background(), "t", Event{Key: "k", Payload: []byte(p)}, Event{Key: "k", Payload: []byte(p + "b")})
				if err != nil || len(ids) != 2 || ids[0] != "t/"+p || ids[1] != "t/"+p+"b" {
					t.Errorf("caller %d got ids %v, %v; want its own two", i, ids, err)
				}
			}
		})
	}
	wg.Wait()
	if n := s.requests.Load(); n >= callers*5/2 {
		t.Fatalf("%d requests for %d concurrent calls: publishes were not batched", n, callers*5)
	}
	// A failed request fails every call it carried.
	s.fail.Store(true)
	for range 3 {
		wg.Go(func() {
			if _, err := c.Publish(context.Background(), "t", Event{Key: "k", Payload: []byte("x")}); !IsResourceExhausted(err) {
				t.Errorf("err = %v, want the server's ResourceExhausted", err)
			}
		})
	}
	wg.Wait()
}
