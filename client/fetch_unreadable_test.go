package client

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
)

const damaged = "unavailable: shard orders.1 could not be opened: log corrupted: /data/shards/3-orders.1/log/0000000000000002.seg at byte offset 1948"

func TestFetchReturnsEventsAndUnreadableShards(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		f.AddDeliveries(&heraldv1.Event{Id: "orders/0/4", Topic: "orders", Offset: 4, Key: "k"})
		f.SetUnreadable("orders", false, &heraldv1.UnreadableShard{Shard: 1, Name: "orders.1", Reason: damaged})
		got, err := c.Fetch(context.Background(), "orders", FetchOptions{})
		if len(got) != 1 || got[0].ID != "orders/0/4" {
			t.Errorf("Fetch returned %+v, want the event of the readable shard", got)
		}
		var ue *UnreadableError
		if !errors.As(err, &ue) {
			t.Fatalf("Fetch error = %v, want an *UnreadableError", err)
		}
		want := []UnreadableShard{{Shard: 1, Name: "orders.1", Reason: damaged}}
		if ue.Topic != "orders" || !reflect.DeepEqual(ue.Shards, want) || ue.All() {
			t.Errorf("UnreadableError = %+v (All %v), want topic orders, shards %+v, not All", ue, ue.All(), want)
		}
		if !strings.Contains(err.Error(), "orders.1") || !strings.Contains(err.Error(), damaged) {
			t.Errorf("error %q does not name the shard and the reason", err)
		}
		// Some events came back: retrying the same fetch is not the cure.
		if IsRetryable(err) {
			t.Errorf("IsRetryable(%v) = true for a partial fetch", err)
		}
	})
}

func TestFetchWithNoReadableShard(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		msg := "unavailable: none of the 2 shards of topic \"orders\" could be read: ..."
		ce := connect.NewError(connect.CodeUnavailable, errors.New(msg))
		detail, err := connect.NewErrorDetail(&heraldv1.FetchResponse{UnreadableShards: []*heraldv1.UnreadableShard{
			{Shard: 0, Name: "orders", Reason: "r0"}, {Shard: 1, Name: "orders.1", Reason: damaged},
		}})
		if err != nil {
			t.Fatal(err)
		}
		ce.AddDetail(detail)
		f.SetFail(ce)
		got, err := c.Fetch(context.Background(), "orders", FetchOptions{})
		var ue *UnreadableError
		if len(got) != 0 || !errors.As(err, &ue) || !ue.All() || len(ue.Shards) != 2 || ue.Shards[1].Reason != damaged {
			t.Fatalf("Fetch = %v, %v (%+v); want no events and an *UnreadableError listing both shards", got, err, ue)
		}
		if connect.CodeOf(err) != connect.CodeUnavailable || !IsRetryable(err) || !strings.Contains(err.Error(), msg) {
			t.Errorf("error %v: want the server's unavailable error and message", err)
		}
	})
}

func TestFetchUnavailableWithoutDetailIsNotUnreadable(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		f.SetFail(connect.NewError(connect.CodeUnavailable, errors.New("no leader yet")))
		_, err := c.Fetch(context.Background(), "orders", FetchOptions{})
		var ue *UnreadableError
		if errors.As(err, &ue) || connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("Fetch error = %v (%T), want the plain unavailable error", err, err)
		}
	})
}
