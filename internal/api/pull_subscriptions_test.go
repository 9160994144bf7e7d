package api

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	heraldv1 "herald/proto/herald/v1"
)

// Fetch, Ack and Nack pass the subscription they name to the node, whose
// errors say which is wrong and how.
func TestPullSubscriptionCodes(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "orders", Attributes: map[string]string{"shards": "1"}})); err != nil {
		t.Fatal(err)
	}
	for name, attrs := range map[string]map[string]string{
		"billing": nil,
		"hooks":   {"push_endpoint": "http://93.184.216.34/events"},
	} {
		if _, err := c.CreateSubscription(ctx, connect.NewRequest(&heraldv1.CreateSubscriptionRequest{Topic: "orders", Name: name, Attributes: attrs})); err != nil {
			t.Fatal(err)
		}
	}
	// Disabled before anything is published: its endpoint is never called.
	if _, err := c.DisableSubscription(ctx, connect.NewRequest(&heraldv1.DisableSubscriptionRequest{Topic: "orders", Name: "hooks", Reason: "test"})); err != nil {
		t.Fatal(err)
	}
	pub, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "orders", Events: []*heraldv1.PublishEvent{{Key: "a", Payload: []byte("one")}}}))
	if err != nil {
		t.Fatal(err)
	}

	fetch := func(sub string) error {
		_, err := c.Fetch(ctx, connect.NewRequest(&heraldv1.FetchRequest{Topic: "orders", Subscription: sub}))
		return err
	}
	ack := func(sub string) error {
		_, err := c.Ack(ctx, connect.NewRequest(&heraldv1.AckRequest{Ids: pub.Msg.Ids, Subscription: sub}))
		return err
	}
	nack := func(sub string) error {
		_, err := c.Nack(ctx, connect.NewRequest(&heraldv1.NackRequest{Ids: pub.Msg.Ids, Subscription: sub}))
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		code connect.Code
	}{
		{"fetch of an unknown subscription", fetch("nope"), connect.CodeNotFound},
		{"fetch of a push subscription", fetch("hooks"), connect.CodeFailedPrecondition},
		{"ack in an unknown subscription", ack("nope"), connect.CodeNotFound},
		{"nack in an unknown subscription", nack("nope"), connect.CodeNotFound},
	} {
		if connect.CodeOf(tc.err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.code)
		}
	}
	if err := fetch("billing"); err != nil {
		t.Errorf("fetch of a pull subscription: %v", err)
	}
	// The default subscription, by name or not, has the event.
	for _, sub := range []string{"", "default"} {
		f, err := c.Fetch(ctx, connect.NewRequest(&heraldv1.FetchRequest{Topic: "orders", Subscription: sub}))
		if err != nil || len(f.Msg.Events) != 1 && sub == "" {
			t.Errorf("fetch of the default subscription named %q = %v, %v; want the event", sub, f, err)
		}
	}
}
