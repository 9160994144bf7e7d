package main

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
)

func TestSubscriptionCreate(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	out := cli(t, url, "", "subscription", "create", "orders", "billing", "--push-endpoint", "https://example.com/hook",
		"--filter-policy", `{"type": ["order.paid"]}`, "--attr", "start=earliest", "--attr", "max_retries=5")
	reqs := fakeherald.Received[*heraldv1.CreateSubscriptionRequest](f)
	if len(reqs) != 1 {
		t.Fatalf("server received %d CreateSubscription requests, want 1", len(reqs))
	}
	wantAttrs := map[string]string{"push_endpoint": "https://example.com/hook", "filter_policy": `{"type": ["order.paid"]}`,
		"start": "earliest", "max_retries": "5"}
	if r := reqs[0]; r.GetTopic() != "orders" || r.GetName() != "billing" || !reflect.DeepEqual(r.GetAttributes(), wantAttrs) {
		t.Errorf("CreateSubscription(%q, %q, %v), want (orders, billing, %v)", r.GetTopic(), r.GetName(), r.GetAttributes(), wantAttrs)
	}
	for _, want := range []string{"Topic:", "orders", "Name:", "billing", "ID:", "1", "State:", "enabled", "filter_policy", "order.paid"} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not show %q:\n%s", want, out)
		}
	}

	// Without flags, no attribute is sent: the server's defaults apply.
	cli(t, url, "", "subscription", "create", "orders", "audit")
	if got := fakeherald.Received[*heraldv1.CreateSubscriptionRequest](f)[1].GetAttributes(); len(got) != 0 {
		t.Errorf("subscription create without flags sent attributes %v", got)
	}

	if stderr := cliFails(t, url, "", "subscription", "create", "orders", "billing"); stderr != "herald: subscription \"billing\" of topic \"orders\" already exists\n" {
		t.Errorf("creating a subscription twice: stderr %q", stderr)
	}
	if stderr := cliFails(t, url, "", "subscription", "create", "orders", "x", "--filter-policy", "{}", "--attr", "filter_policy={}"); !strings.Contains(stderr, "filter_policy is set by both --filter-policy and --attr") {
		t.Errorf("an attribute given twice: stderr %q", stderr)
	}
	if stderr := cliFails(t, url, "", "subscription", "create", "orders"); !strings.Contains(stderr, "usage: herald subscription create TOPIC NAME") {
		t.Errorf("a missing name: stderr %q", stderr)
	}
}

func TestSubscriptionGetListSetDisableDelete(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	f.PutSubscription(&heraldv1.Subscription{Topic: "orders", Name: "default", Attributes: map[string]string{"push_endpoint": "nats://h"},
		CreatedAt: timestamppb.New(eventTime), UpdatedAt: timestamppb.New(eventTime)})
	f.PutSubscription(&heraldv1.Subscription{Topic: "orders", Name: "billing", Id: 3,
		Attributes: map[string]string{"filter_policy": "{\n  \"type\": [\"paid\"]\n}"},
		CreatedAt:  timestamppb.New(eventTime), UpdatedAt: timestamppb.New(eventTime)})

	// The API's Subscription, as its JSON names it.
	var sub heraldv1.Subscription
	if err := protojson.Unmarshal([]byte(cli(t, url, "", "subscription", "get", "orders", "billing", "-o", "json")), &sub); err != nil {
		t.Fatal(err)
	}
	want := &heraldv1.Subscription{Topic: "orders", Name: "billing", Id: 3, Attributes: map[string]string{"filter_policy": "{\n  \"type\": [\"paid\"]\n}"},
		CreatedAt: timestamppb.New(eventTime), UpdatedAt: timestamppb.New(eventTime)}
	if !proto.Equal(&sub, want) {
		t.Errorf("subscription get -o json = %v, want %v", &sub, want)
	}

	out := cli(t, url, "", "subscription", "list", "orders")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Fields(lines[0])[0] != "NAME" ||
		!reflect.DeepEqual(strings.Fields(lines[1]), []string{"default", "0", "enabled", "-", "-", "-", "-", "?", "nats://h", "-"}) ||
		!reflect.DeepEqual(strings.Fields(lines[2]), []string{"billing", "3", "enabled", "-", "-", "-", "-", "-", "-", "{", `"type":`, `["paid"]`, "}"}) {
		t.Errorf("subscription list:\n%s", out)
	}

	cli(t, url, "", "subscription", "set", "orders", "billing", "--attr", "key_prefix=eu/")
	set := fakeherald.Received[*heraldv1.SetSubscriptionAttributesRequest](f)
	if len(set) != 1 || set[0].GetName() != "billing" || !reflect.DeepEqual(set[0].GetAttributes(), map[string]string{"key_prefix": "eu/"}) {
		t.Errorf("subscription set sent %v", set)
	}
	if stderr := cliFails(t, url, "", "subscription", "set", "orders", "billing"); !strings.Contains(stderr, "nothing to set") {
		t.Errorf("subscription set without attributes: stderr %q", stderr)
	}

	out = cli(t, url, "", "subscription", "disable", "orders", "billing", "--reason", "moving")
	if !strings.Contains(out, "disabled since") || !strings.Contains(out, ": moving") {
		t.Errorf("subscription disable printed:\n%s", out)
	}
	if dis := fakeherald.Received[*heraldv1.DisableSubscriptionRequest](f); len(dis) != 1 || dis[0].GetReason() != "moving" {
		t.Errorf("subscription disable sent %v", dis)
	}
	if out := cli(t, url, "", "subscription", "enable", "orders", "billing"); !strings.Contains(out, "enabled") {
		t.Errorf("subscription enable printed:\n%s", out)
	}

	if out := cli(t, url, "", "subscription", "delete", "orders", "billing"); out != "deleted subscription billing of topic orders\n" {
		t.Errorf("subscription delete printed %q", out)
	}
	if out := cli(t, url, "", "subscription", "delete", "orders", "default"); !strings.HasPrefix(out, "detached the default subscription of topic orders") {
		t.Errorf("subscription delete of the default printed %q", out)
	}
	if out := cli(t, url, "", "subscription", "list", "orders", "-o", "json"); out != "{\n  \"subscriptions\": []\n}\n" {
		t.Errorf("subscription list -o json with none printed %q, want the API's ListSubscriptionsResponse", out)
	}
	if stderr := cliFails(t, url, "", "subscription", "get", "orders", "billing"); !strings.Contains(stderr, `subscription "billing" of topic "orders" does not exist`) {
		t.Errorf("get of a deleted subscription: stderr %q", stderr)
	}
}
