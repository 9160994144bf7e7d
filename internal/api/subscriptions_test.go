package api

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	heraldv1 "herald/proto/herald/v1"
)

func TestSubscriptions(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "orders", Attributes: map[string]string{"shards": "1"}})); err != nil {
		t.Fatal(err)
	}

	created, err := c.CreateSubscription(ctx, connect.NewRequest(&heraldv1.CreateSubscriptionRequest{Topic: "orders", Name: "billing",
		Attributes: map[string]string{"filter_policy": `{"type": ["paid"]}`, "signing_secret": "s3cret", "max_in_flight": "2"}}))
	if err != nil {
		t.Fatal(err)
	}
	sub := created.Msg.Subscription
	if sub.Topic != "orders" || sub.Name != "billing" || sub.Id != 1 || sub.Attributes["max_in_flight"] != "2" ||
		sub.Attributes["filter_policy"] != `{"type": ["paid"]}` || sub.CreatedAt == nil || sub.DisabledAt != nil {
		t.Errorf("created %v", sub)
	}
	if got := sub.Attributes["signing_secret"]; got != "(set)" {
		t.Errorf("the signing secret shows as %q, want it redacted", got)
	}

	got, err := c.GetSubscription(ctx, connect.NewRequest(&heraldv1.GetSubscriptionRequest{Topic: "orders", Name: "billing"}))
	if err != nil || got.Msg.Subscription.Id != 1 {
		t.Fatalf("get = %v, %v", got, err)
	}

	set, err := c.SetSubscriptionAttributes(ctx, connect.NewRequest(&heraldv1.SetSubscriptionAttributesRequest{Topic: "orders", Name: "billing",
		Attributes: map[string]string{"key_prefix": "eu/"}}))
	if err != nil || set.Msg.Subscription.Attributes["key_prefix"] != "eu/" || set.Msg.Subscription.Attributes["max_in_flight"] != "2" {
		t.Fatalf("set = %v, %v", set, err)
	}

	dis, err := c.DisableSubscription(ctx, connect.NewRequest(&heraldv1.DisableSubscriptionRequest{Topic: "orders", Name: "billing", Reason: "maintenance"}))
	if err != nil || !dis.Msg.Subscription.Disabled || dis.Msg.Subscription.DisabledReason != "maintenance" || dis.Msg.Subscription.DisabledAt == nil {
		t.Fatalf("disable = %v, %v", dis, err)
	}
	en, err := c.EnableSubscription(ctx, connect.NewRequest(&heraldv1.EnableSubscriptionRequest{Topic: "orders", Name: "billing"}))
	if err != nil || en.Msg.Subscription.Disabled || en.Msg.Subscription.DisabledAt != nil {
		t.Fatalf("enable = %v, %v", en, err)
	}

	list, err := c.ListSubscriptions(ctx, connect.NewRequest(&heraldv1.ListSubscriptionsRequest{Topic: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list.Msg.Subscriptions {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "default,billing" || list.Msg.Subscriptions[0].Id != 0 {
		t.Errorf("listed %v", list.Msg.Subscriptions)
	}

	// Deleting the default subscription detaches it; creating it attaches it.
	for _, name := range []string{"billing", "default"} {
		if _, err := c.DeleteSubscription(ctx, connect.NewRequest(&heraldv1.DeleteSubscriptionRequest{Topic: "orders", Name: name})); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	list, err = c.ListSubscriptions(ctx, connect.NewRequest(&heraldv1.ListSubscriptionsRequest{Topic: "orders"}))
	if err != nil || len(list.Msg.Subscriptions) != 0 {
		t.Fatalf("after deletes, list = %v, %v", list, err)
	}
	if _, err := c.CreateSubscription(ctx, connect.NewRequest(&heraldv1.CreateSubscriptionRequest{Topic: "orders", Name: "default"})); err != nil {
		t.Fatalf("attach the default again: %v", err)
	}
}

func TestSubscriptionErrorCodes(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "t", Attributes: map[string]string{"shards": "1"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSubscription(ctx, connect.NewRequest(&heraldv1.CreateSubscriptionRequest{Topic: "t", Name: "a"})); err != nil {
		t.Fatal(err)
	}
	create := func(topicName, name string, attrs map[string]string) func() error {
		return func() error {
			_, err := c.CreateSubscription(ctx, connect.NewRequest(&heraldv1.CreateSubscriptionRequest{Topic: topicName, Name: name, Attributes: attrs}))
			return err
		}
	}
	for _, tc := range []struct {
		name string
		call func() error
		code connect.Code
		want string
	}{
		{"unknown topic", create("nope", "a", nil), connect.CodeNotFound, `topic "nope" does not exist`},
		{"duplicate", create("t", "a", nil), connect.CodeAlreadyExists, `subscription "a" of topic "t" already exists`},
		{"bad filter", create("t", "b", map[string]string{"filter_policy": `{"price": [{"numeric": ["~", 1]}]}`}), connect.CodeInvalidArgument, `key "price"`},
		{"unknown attribute", create("t", "b", map[string]string{"colour": "red"}), connect.CodeInvalidArgument, "unknown attribute"},
		{"bad name", create("t", "a/b", nil), connect.CodeInvalidArgument, "invalid subscription name"},
		{"unknown subscription", func() error {
			_, err := c.GetSubscription(ctx, connect.NewRequest(&heraldv1.GetSubscriptionRequest{Topic: "t", Name: "zz"}))
			return err
		}, connect.CodeNotFound, `subscription "zz" of topic "t" does not exist`},
		{"start moved", func() error {
			_, err := c.SetSubscriptionAttributes(ctx, connect.NewRequest(&heraldv1.SetSubscriptionAttributesRequest{Topic: "t", Name: "a",
				Attributes: map[string]string{"start": "earliest"}}))
			return err
		}, connect.CodeInvalidArgument, "only when a subscription is created"},
		{"set the default", func() error {
			_, err := c.SetSubscriptionAttributes(ctx, connect.NewRequest(&heraldv1.SetSubscriptionAttributesRequest{Topic: "t", Name: "default",
				Attributes: map[string]string{"key_prefix": "x"}}))
			return err
		}, connect.CodeFailedPrecondition, "herald topic set t"},
		{"delete unknown", func() error {
			_, err := c.DeleteSubscription(ctx, connect.NewRequest(&heraldv1.DeleteSubscriptionRequest{Topic: "t", Name: "zz"}))
			return err
		}, connect.CodeNotFound, "does not exist"},
	} {
		err := tc.call()
		if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v (%v), want %v saying %q", tc.name, connect.CodeOf(err), err, tc.code, tc.want)
		}
	}
}
