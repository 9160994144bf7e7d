package client

import (
	"context"
	"testing"

	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
)

// A fetch, ack or nack of a subscription names it in its request.
func TestConsumeASubscription(t *testing.T) {
	eachProtocol(t, func(t *testing.T, f *fakeherald.Server, c *Client) {
		ctx := context.Background()
		if _, err := c.Fetch(ctx, "orders", FetchOptions{Subscription: "billing"}); err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.FetchRequest{Topic: "orders", Subscription: "billing"})

		f.AddEvents("orders", &heraldv1.PublishEvent{Key: "a"})
		if _, err := c.AckSubscription(ctx, "billing", "orders/0/1"); err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.AckRequest{Ids: []string{"orders/0/1"}, Subscription: "billing"})
		if err := c.NackSubscription(ctx, "billing", "orders/0/1"); err != nil {
			t.Fatal(err)
		}
		wantRequest(t, f, &heraldv1.NackRequest{Ids: []string{"orders/0/1"}, Subscription: "billing"})
	})
}
