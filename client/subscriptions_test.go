package client

import (
	"context"
	"reflect"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
)

func protoSubscription() *heraldv1.Subscription {
	return &heraldv1.Subscription{
		Topic: "orders", Name: "billing", Id: 7,
		Attributes: map[string]string{"filter_policy": `{"type": ["paid"]}`},
		Disabled:   true, DisabledReason: "maintenance", DisabledAt: timestamppb.New(updated),
		CreatedAt: timestamppb.New(created), UpdatedAt: timestamppb.New(updated),
	}
}

func wantSubscription() *Subscription {
	return &Subscription{
		Topic: "orders", Name: "billing", ID: 7,
		Attributes: map[string]string{"filter_policy": `{"type": ["paid"]}`},
		Disabled:   true, DisabledReason: "maintenance", DisabledAt: updated,
		CreatedAt: created, UpdatedAt: updated,
	}
}

func TestCreateSubscription(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		f.AddTopic("orders", nil)
		attrs := map[string]string{"push_endpoint": "https://h/x"}
		got, err := c.CreateSubscription(context.Background(), "orders", "billing", attrs)
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.CreateSubscriptionRequest{Topic: "orders", Name: "billing", Attributes: attrs})
		want := &Subscription{Topic: "orders", Name: "billing", ID: 1, Attributes: attrs, CreatedAt: created, UpdatedAt: created}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("CreateSubscription = %+v, want %+v", got, want)
		}
	})
}

func TestGetAndListSubscriptions(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		f.AddTopic("orders", nil)
		f.PutSubscription(protoSubscription())
		f.PutSubscription(&heraldv1.Subscription{Topic: "orders", Name: "default"})
		got, err := c.GetSubscription(context.Background(), "orders", "billing")
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.GetSubscriptionRequest{Topic: "orders", Name: "billing"})
		if !reflect.DeepEqual(got, wantSubscription()) {
			t.Errorf("GetSubscription = %+v, want %+v", got, wantSubscription())
		}
		list, err := c.ListSubscriptions(context.Background(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.ListSubscriptionsRequest{Topic: "orders"})
		want := []*Subscription{{Topic: "orders", Name: "default", Attributes: map[string]string{}}, wantSubscription()}
		if !reflect.DeepEqual(list, want) {
			t.Errorf("ListSubscriptions = %+v, want %+v", list, want)
		}
	})
}

// The WithStats calls ask for the statistics and convert them as
// TopicStats does; the plain calls neither ask nor get them.
func TestSubscriptionsWithStats(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		ctx := context.Background()
		f.AddTopic("orders", nil)
		p := protoSubscription()
		failing := &heraldv1.DeliveryHealth{LastError: "HTTP 503", LastErrorTime: timestamppb.New(updated),
			ConsecutiveFailures: 4, FailingSince: timestamppb.New(created), PausedUntil: timestamppb.New(updated)}
		p.Stats = &heraldv1.ShardStats{Name: "orders", Events: 5, OldestEventTime: timestamppb.New(created),
			Delivered: 9, Skipped: 3, Retried: 4, DeadLetters: 1, Delivery: failing}
		p.ShardStats = []*heraldv1.ShardStats{{Name: "orders", Events: 5}, {Shard: 1, Name: "orders.1", Error: "damaged"}}
		f.PutSubscription(p)

		want := wantSubscription()
		want.Stats = &ShardStats{Name: "orders", Events: 5, OldestEventTime: created, Delivered: 9, Skipped: 3, Retried: 4, DeadLetters: 1,
			Delivery: &DeliveryHealth{LastError: "HTTP 503", LastErrorTime: updated, ConsecutiveFailures: 4, FailingSince: created, PausedUntil: updated}}
		want.ShardStats = []ShardStats{{Name: "orders", Events: 5}, {Shard: 1, Name: "orders.1", Error: "damaged"}}
		got, err := c.GetSubscriptionWithStats(ctx, "orders", "billing")
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.GetSubscriptionRequest{Topic: "orders", Name: "billing", WithStats: true})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("GetSubscriptionWithStats = %+v, want %+v", got, want)
		}
		list, err := c.ListSubscriptionsWithStats(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.ListSubscriptionsRequest{Topic: "orders", WithStats: true})
		if len(list) != 1 || !reflect.DeepEqual(list[0], want) {
			t.Errorf("ListSubscriptionsWithStats = %+v, want [%+v]", list, want)
		}
		if got, err := c.GetSubscription(ctx, "orders", "billing"); err != nil || got.Stats != nil || got.ShardStats != nil {
			t.Errorf("GetSubscription = %+v, %v; want no statistics", got, err)
		}
	})
}

func TestChangeSubscriptions(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		ctx := context.Background()
		f.PutSubscription(protoSubscription())
		got, err := c.EnableSubscription(ctx, "orders", "billing")
		if err != nil || got.Disabled || !got.DisabledAt.IsZero() {
			t.Fatalf("EnableSubscription = %+v, %v", got, err)
		}
		wantRequest(t, f, &heraldv1.EnableSubscriptionRequest{Topic: "orders", Name: "billing"})
		got, err = c.DisableSubscription(ctx, "orders", "billing", "why")
		if err != nil || !got.Disabled || got.DisabledReason != "why" || !got.DisabledAt.Equal(created) {
			t.Fatalf("DisableSubscription = %+v, %v", got, err)
		}
		wantRequest(t, f, &heraldv1.DisableSubscriptionRequest{Topic: "orders", Name: "billing", Reason: "why"})
		attrs := map[string]string{"key_prefix": "eu/"}
		got, err = c.SetSubscriptionAttributes(ctx, "orders", "billing", attrs)
		if err != nil || got.Attributes["key_prefix"] != "eu/" || got.Attributes["filter_policy"] == "" {
			t.Fatalf("SetSubscriptionAttributes = %+v, %v", got, err)
		}
		wantRequest(t, f, &heraldv1.SetSubscriptionAttributesRequest{Topic: "orders", Name: "billing", Attributes: attrs})
		if err := c.DeleteSubscription(ctx, "orders", "billing"); err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.DeleteSubscriptionRequest{Topic: "orders", Name: "billing"})
		if _, err := c.GetSubscription(ctx, "orders", "billing"); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("GetSubscription after delete: %v, want not found", err)
		}
	})
}
