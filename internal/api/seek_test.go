package api

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	heraldv1 "herald/proto/herald/v1"
)

// A seek goes back to what a shard holds: here the default subscription
// holds the events billing acknowledged, so billing gets them again.
func TestSeekSubscription(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "orders", Attributes: map[string]string{"shards": "1", "retention": "60"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSubscription(ctx, connect.NewRequest(&heraldv1.CreateSubscriptionRequest{Topic: "orders", Name: "billing"})); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if _, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "orders", Events: []*heraldv1.PublishEvent{{Key: "a"}, {Key: "b"}}})); err != nil {
		t.Fatal(err)
	}
	fetched, err := c.Fetch(ctx, connect.NewRequest(&heraldv1.FetchRequest{Topic: "orders", Subscription: "billing", MaxEvents: 10}))
	if err != nil {
		t.Fatal(err)
	}
	var receipts []string
	for _, d := range fetched.Msg.GetEvents() {
		receipts = append(receipts, d.GetReceipt())
	}
	if _, err := c.Ack(ctx, connect.NewRequest(&heraldv1.AckRequest{Subscription: "billing", Ids: receipts})); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		target any
		want   int64
	}{
		{&heraldv1.SeekSubscriptionRequest_Earliest{Earliest: true}, 2},
		{&heraldv1.SeekSubscriptionRequest_Time{Time: timestamppb.New(before.Add(time.Hour))}, 0},
		{&heraldv1.SeekSubscriptionRequest_Time{Time: timestamppb.New(before)}, 2},
	} {
		req := &heraldv1.SeekSubscriptionRequest{Topic: "orders", Subscription: "billing"}
		switch t := tc.target.(type) {
		case *heraldv1.SeekSubscriptionRequest_Earliest:
			req.Target = t
		case *heraldv1.SeekSubscriptionRequest_Time:
			req.Target = t
		}
		res, err := c.SeekSubscription(ctx, connect.NewRequest(req))
		if err != nil || res.Msg.GetReplayed() != tc.want {
			t.Errorf("seek to %v = %v, %v; want %d replayed", req.Target, res, err, tc.want)
		}
	}
	_, err = c.SeekSubscription(ctx, connect.NewRequest(&heraldv1.SeekSubscriptionRequest{Topic: "orders", Subscription: "billing"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("seek without a target: %v, want invalid argument", err)
	}
	_, err = c.SeekSubscription(ctx, connect.NewRequest(&heraldv1.SeekSubscriptionRequest{Topic: "orders", Subscription: "nobody",
		Target: &heraldv1.SeekSubscriptionRequest_Earliest{Earliest: true}}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("seek of an unknown subscription: %v, want not found", err)
	}
}
