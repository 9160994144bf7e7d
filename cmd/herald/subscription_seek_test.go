package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
)

func TestSubscriptionSeek(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	f.PutSubscription(&heraldv1.Subscription{Topic: "orders", Name: "billing", Id: 3})

	at := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		args []string
		want *heraldv1.SeekSubscriptionRequest
	}{
		{[]string{"--to-time", "2026-11-26T09:00:00Z"}, &heraldv1.SeekSubscriptionRequest{Topic: "orders", Subscription: "billing",
			Target: &heraldv1.SeekSubscriptionRequest_Time{Time: timestamppb.New(at)}}},
		{[]string{"--to-event", "orders/3/1042"}, &heraldv1.SeekSubscriptionRequest{Topic: "orders", Subscription: "billing",
			Target: &heraldv1.SeekSubscriptionRequest_EventId{EventId: "orders/3/1042"}}},
		{[]string{"--earliest"}, &heraldv1.SeekSubscriptionRequest{Topic: "orders", Subscription: "billing",
			Target: &heraldv1.SeekSubscriptionRequest_Earliest{Earliest: true}}},
	} {
		out := cli(t, url, "", append([]string{"subscription", "seek", "orders", "billing"}, tc.args...)...)
		reqs := fakeherald.Received[*heraldv1.SeekSubscriptionRequest](f)
		if got := reqs[len(reqs)-1]; !proto.Equal(got, tc.want) {
			t.Errorf("seek %v sent %v, want %v", tc.args, got, tc.want)
		}
		if want := "sought: 7 events to deliver again\n"; out != want {
			t.Errorf("seek %v printed %q, want %q", tc.args, out, want)
		}
	}
	if out := cli(t, url, "", "subscription", "seek", "orders", "billing", "--earliest", "-o", "json"); !strings.Contains(out, `"replayed": 7`) {
		t.Errorf("seek --json printed %q", out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "give one of --to-time, --to-event and --earliest"},
		{[]string{"--earliest", "--to-event", "orders/0/1"}, "give one of --to-time, --to-event and --earliest"},
		{[]string{"--to-time", "yesterday"}, "give a time as RFC 3339"},
	} {
		if stderr := cliFails(t, url, "", append([]string{"subscription", "seek", "orders", "billing"}, tc.args...)...); !strings.Contains(stderr, tc.want) {
			t.Errorf("seek %v: stderr %q, want %q", tc.args, stderr, tc.want)
		}
	}
	if stderr := cliFails(t, url, "", "subscription", "seek", "orders", "nobody", "--earliest"); !strings.Contains(stderr, "does not exist") {
		t.Errorf("seek of an unknown subscription: stderr %q", stderr)
	}
}
