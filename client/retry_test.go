package client

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"connectrpc.com/connect"

	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
)

func TestPublishRetriesKeepTheirDedupIDs(t *testing.T) {
	f := fakeherald.New(created)
	c := New(f.Start(t), WithPublishRetries(3))
	f.AddTopic("orders", nil)
	f.SetFail(connect.NewError(connect.CodeUnavailable, errors.New("restarting")))
	events := []Event{{Key: "a", Payload: []byte("1")}, {Key: "b", Payload: []byte("2"), DedupID: "mine"}}
	if _, err := c.Publish(context.Background(), "orders", events...); !IsRetryable(err) {
		t.Fatalf("Publish against a failing server: %v, want its retryable error after the attempts", err)
	}
	reqs := fakeherald.Received[*heraldv1.PublishRequest](f)
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	first := []string{reqs[0].GetEvents()[0].GetDedupId(), reqs[0].GetEvents()[1].GetDedupId()}
	if len(first[0]) != 32 || first[1] != "mine" {
		t.Fatalf("dedup ids %q: want a random one, and the caller's", first)
	}
	for _, r := range reqs[1:] {
		if got := []string{r.GetEvents()[0].GetDedupId(), r.GetEvents()[1].GetDedupId()}; !reflect.DeepEqual(got, first) {
			t.Fatalf("retry with dedup ids %q, first attempt %q", got, first)
		}
	}
	if events[0].DedupID != "" {
		t.Fatal("Publish changed the caller's event")
	}

	// A permanent error is not retried.
	f.SetFail(connect.NewError(connect.CodeInvalidArgument, errors.New("bad")))
	if _, err := c.Publish(context.Background(), "orders", events...); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("got %v", err)
	}
	if n := len(fakeherald.Received[*heraldv1.PublishRequest](f)); n != 4 {
		t.Fatalf("%d requests after an invalid_argument, want 4: it was retried", n)
	}
}
