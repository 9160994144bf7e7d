package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
)

var (
	created = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	updated = time.Date(2025, 3, 2, 11, 30, 0, 500, time.UTC)
)

// protocols lists the ways a Client can reach the server and the protocol
// the server must see.
var protocols = []struct {
	name string
	wire string
	opts func(t *testing.T) []Option
}{
	{"connect", "connect", func(*testing.T) []Option { return nil }},
	{"grpc", "grpc", func(t *testing.T) []Option {
		return []Option{WithGRPC(), WithHTTPClient(h2cClient(t))}
	}},
	{"grpc-default-transport", "grpc", func(*testing.T) []Option {
		return []Option{WithGRPC()}
	}},
}

// eachProtocol runs test once per protocol with a fresh fake server.
func eachProtocol(t *testing.T, test func(t *testing.T, f *fakeherald.Server, c *Client)) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			f := fakeherald.New(created)
			c := New(f.Start(t), p.opts(t)...)
			test(t, f, c)
			if wire := f.Last(t).Protocol; wire != p.wire {
				t.Errorf("server saw protocol %q, want %q", wire, p.wire)
			}
		})
	}
}

// wantRequest fails t unless the last request the server received is want.
func wantRequest(t *testing.T, f *fakeherald.Server, want proto.Message) {
	t.Helper()
	got := f.Last(t).Msg
	if !proto.Equal(got, want) {
		t.Errorf("server received %v, want %v", got, want)
	}
}

func protoTopic() *heraldv1.Topic {
	return &heraldv1.Topic{
		Name:       "orders",
		Attributes: map[string]string{"shards": "4", "persistent": "true"},
		CreatedAt:  timestamppb.New(created),
		UpdatedAt:  timestamppb.New(updated),
	}
}

func wantTopic() *Topic {
	return &Topic{
		Name:       "orders",
		Attributes: map[string]string{"shards": "4", "persistent": "true"},
		CreatedAt:  created,
		UpdatedAt:  updated,
	}
}

func TestCreateTopic(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		attrs := map[string]string{"shards": "4"}
		got, err := c.CreateTopic(context.Background(), "orders", attrs)
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.CreateTopicRequest{Name: "orders", Attributes: attrs})
		want := wantTopic()
		want.UpdatedAt = created // a new topic was last updated when it was created
		if !reflect.DeepEqual(got, want) {
			t.Errorf("CreateTopic = %+v, want %+v", got, want)
		}
	})
}

func TestGetTopic(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		f.PutTopic(protoTopic())
		got, err := c.GetTopic(context.Background(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.GetTopicRequest{Name: "orders"})
		if !reflect.DeepEqual(got, wantTopic()) {
			t.Errorf("GetTopic = %+v, want %+v", got, wantTopic())
		}
	})
}

func TestListTopics(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		f.PutTopic(protoTopic())
		f.PutTopic(&heraldv1.Topic{Name: "bare"})
		got, err := c.ListTopics(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.ListTopicsRequest{})
		want := []*Topic{{Name: "bare", Attributes: map[string]string{}}, wantTopic()}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ListTopics = %+v, want %+v", got, want)
		}
	})
}

func TestSetTopicAttributes(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		f.PutTopic(protoTopic())
		attrs := map[string]string{"push_endpoint": "http://example.com/hook"}
		got, err := c.SetTopicAttributes(context.Background(), "orders", attrs)
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.SetTopicAttributesRequest{Name: "orders", Attributes: attrs})
		want := wantTopic()
		want.Attributes["push_endpoint"] = "http://example.com/hook"
		if !reflect.DeepEqual(got, want) {
			t.Errorf("SetTopicAttributes = %+v, want %+v", got, want)
		}
	})
}

func TestDeleteTopic(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		f.AddTopic("orders", nil)
		if err := c.DeleteTopic(context.Background(), "orders"); err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.DeleteTopicRequest{Name: "orders"})
	})
}

func TestTopicStats(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		f.SetStats(&heraldv1.TopicStatsResponse{
			Name: "orders",
			Total: &heraldv1.ShardStats{
				Name: "orders", Events: 3, Bytes: 30, ReservedBytes: 7, Reservations: 1,
				OldestEventTime: timestamppb.New(created), Published: 5, Acked: 2,
				Leased: 1, NextOffset: 5, Head: 2,
			},
			Shards: []*heraldv1.ShardStats{
				{Shard: 0, Name: "orders", Events: 3, Bytes: 30, OldestEventTime: timestamppb.New(created)},
				{Shard: 1, Name: "orders.1", Error: "log damaged"},
			},
		})
		got, err := c.TopicStats(context.Background(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.TopicStatsRequest{Name: "orders"})
		want := &TopicStats{
			Name: "orders",
			Total: ShardStats{
				Name: "orders", Events: 3, Bytes: 30, ReservedBytes: 7, Reservations: 1,
				OldestEventTime: created, Published: 5, Acked: 2, Leased: 1,
				NextOffset: 5, Head: 2,
			},
			Shards: []ShardStats{
				{Shard: 0, Name: "orders", Events: 3, Bytes: 30, OldestEventTime: created},
				{Shard: 1, Name: "orders.1", Error: "log damaged"},
			},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("TopicStats = %+v, want %+v", got, want)
		}
		if !got.Shards[1].OldestEventTime.IsZero() {
			t.Errorf("unset oldest event time became %v, want zero", got.Shards[1].OldestEventTime)
		}
	})
}

func TestPublish(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		f.AddTopic("orders", nil)
		f.AddEvents("orders", &heraldv1.PublishEvent{Key: "earlier"})
		got, err := c.Publish(context.Background(), "orders",
			Event{Key: "a", Payload: []byte("one"), Headers: map[string]string{"Type": "created"}},
			Event{Key: "b", Payload: []byte{0xff, 0x00}},
		)
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.PublishRequest{Topic: "orders", Events: []*heraldv1.PublishEvent{
			{Key: "a", Payload: []byte("one"), Headers: map[string]string{"Type": "created"}},
			{Key: "b", Payload: []byte{0xff, 0x00}},
		}})
		if want := []string{"orders/0/1", "orders/0/2"}; !reflect.DeepEqual(got, want) {
			t.Errorf("Publish = %q, want %q", got, want)
		}
	})
}

func TestReserveCommitAbort(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		ctx := context.Background()
		r, err := c.Reserve(ctx, "orders", "k", 1024, 2)
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.ReserveRequest{Topic: "orders", Key: "k", Bytes: 1024, Count: 2})
		// The fake grants a minute.
		if want := (&Reservation{ID: "orders/0/r1", ExpiresAt: created.Add(time.Minute)}); !reflect.DeepEqual(r, want) {
			t.Errorf("Reserve = %+v, want %+v", r, want)
		}

		ids, err := c.Commit(ctx, r.ID, Event{Key: "k", Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.CommitRequest{ReservationId: "orders/0/r1", Events: []*heraldv1.PublishEvent{
			{Key: "k", Payload: []byte("x")},
		}})
		if want := []string{"orders/0/0"}; !reflect.DeepEqual(ids, want) {
			t.Errorf("Commit = %q, want %q", ids, want)
		}

		if err := c.Abort(ctx, "orders/0/r2"); err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.AbortRequest{ReservationId: "orders/0/r2"})
	})
}

func TestFetch(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		f.AddDeliveries(&heraldv1.Event{
			Id: "orders/1/4", Receipt: "orders/1/4.9", Topic: "orders", Shard: 1, Offset: 4, Key: "k",
			Payload: []byte("p"), Headers: map[string]string{"h": "v"},
			Time: timestamppb.New(created), DeliveryAttempt: 2,
		})
		opts := FetchOptions{MaxEvents: 10, VisibilityTimeout: 45 * time.Second, Wait: 10 * time.Millisecond}
		got, err := c.Fetch(context.Background(), "orders", opts)
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.FetchRequest{
			Topic: "orders", MaxEvents: 10,
			VisibilityTimeout: durationpb.New(45 * time.Second),
			Wait:              durationpb.New(10 * time.Millisecond),
		})
		want := []Delivery{{
			ID: "orders/1/4", Receipt: "orders/1/4.9", Topic: "orders", Shard: 1, Offset: 4, Key: "k",
			Payload: []byte("p"), Headers: map[string]string{"h": "v"},
			Time: created, Attempt: 2,
		}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Fetch = %+v, want %+v", got, want)
		}

		// The zero options leave every field to the server's defaults.
		if _, err := c.Fetch(context.Background(), "orders", FetchOptions{}); err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.FetchRequest{Topic: "orders"})
	})
}

func TestAckNack(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		f.AddEvents("orders", &heraldv1.PublishEvent{Key: "a"}, &heraldv1.PublishEvent{Key: "b"})
		// orders/0/2 does not exist: the server counts only what it acked.
		n, err := c.Ack(context.Background(), "orders/0/1", "orders/0/2")
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.AckRequest{Ids: []string{"orders/0/1", "orders/0/2"}})
		if n != 1 {
			t.Errorf("Ack = %d, want 1", n)
		}
		if err := c.Nack(context.Background(), "orders/0/3"); err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.NackRequest{Ids: []string{"orders/0/3"}})
	})
}

func TestServerErrors(t *testing.T) {
	tests := []struct {
		code                                   connect.Code
		notFound, exists, exhausted, retryable bool
	}{
		{code: connect.CodeNotFound, notFound: true},
		{code: connect.CodeAlreadyExists, exists: true},
		{code: connect.CodeResourceExhausted, exhausted: true, retryable: true},
		{code: connect.CodeUnavailable, retryable: true},
		{code: connect.CodeInvalidArgument},
		{code: connect.CodeFailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
				msg := "topic \"orders\": something is wrong; do something"
				f.SetFail(connect.NewError(tt.code, errors.New(msg)))
				_, err := c.GetTopic(context.Background(), "orders")
				if connect.CodeOf(err) != tt.code {
					t.Fatalf("GetTopic error = %v, want code %v", err, tt.code)
				}
				var ce *connect.Error
				if !errors.As(err, &ce) || ce.Message() != msg {
					t.Errorf("GetTopic error = %v, want message %q", err, msg)
				}
				check := func(name string, got, want bool) {
					if got != want {
						t.Errorf("%s(%v) = %v, want %v", name, err, got, want)
					}
				}
				check("IsNotFound", IsNotFound(err), tt.notFound)
				check("IsAlreadyExists", IsAlreadyExists(err), tt.exists)
				check("IsResourceExhausted", IsResourceExhausted(err), tt.exhausted)
				check("IsRetryable", IsRetryable(err), tt.retryable)
			})
		})
	}
}

func TestErrorHelpersOnOtherErrors(t *testing.T) {
	for _, err := range []error{nil, errors.New("plain"), context.Canceled} {
		if IsNotFound(err) || IsAlreadyExists(err) || IsResourceExhausted(err) || IsRetryable(err) {
			t.Errorf("a helper reports true for %v", err)
		}
	}
}

func TestUnreachableServerIsRetryable(t *testing.T) {
	srv := httptest.NewServer(nil)
	url := srv.URL
	srv.Close()
	_, err := New(url).ListTopics(context.Background())
	if connect.CodeOf(err) != connect.CodeUnavailable || !IsRetryable(err) {
		t.Errorf("ListTopics on a closed server: %v (code %v), want a retryable Unavailable error",
			err, connect.CodeOf(err))
	}
}

func TestTimeout(t *testing.T) {
	f := fakeherald.New(created)
	f.SetDelay(300 * time.Millisecond)
	f.AddEvents("orders", &heraldv1.PublishEvent{Key: "k"}) // so that Fetch answers after the delay
	c := New(f.Start(t), WithTimeout(50*time.Millisecond))
	_, err := c.ListTopics(context.Background())
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("slow ListTopics: %v, want code %v", err, connect.CodeDeadlineExceeded)
	}
	// Fetch may take as long as it asked the server to wait.
	if _, err := c.Fetch(context.Background(), "orders", FetchOptions{Wait: 5 * time.Second}); err != nil {
		t.Errorf("Fetch waiting 5s with a 50ms timeout: %v", err)
	}
}

func TestNormalizeURL(t *testing.T) {
	tests := map[string]string{
		"":                       DefaultAddress,
		"localhost:7600":         "http://localhost:7600",
		"http://h:1/":            "http://h:1",
		"https://herald.example": "https://herald.example",
	}
	for in, want := range tests {
		if got := normalizeURL(in); got != want {
			t.Errorf("normalizeURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// h2cClient returns an HTTP client that speaks unencrypted HTTP/2 only.
func h2cClient(t *testing.T) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}
