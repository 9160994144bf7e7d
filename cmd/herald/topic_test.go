package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/client"
	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
)

func TestTopicCreate(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	out := cli(t, url, "", "topic", "create", "orders", "--shards", "4", "--persistent=false",
		"--push-endpoint", "http://example.com/hook", "--attr", "max_retries=5", "--attr", "opaque_data=a=b,c")
	reqs := fakeherald.Received[*heraldv1.CreateTopicRequest](f)
	if len(reqs) != 1 {
		t.Fatalf("server received %d CreateTopic requests, want 1", len(reqs))
	}
	wantAttrs := map[string]string{
		"shards": "4", "persistent": "false", "push_endpoint": "http://example.com/hook",
		"max_retries": "5", "opaque_data": "a=b,c",
	}
	if got := reqs[0].GetAttributes(); reqs[0].GetName() != "orders" || !reflect.DeepEqual(got, wantAttrs) {
		t.Errorf("CreateTopic(%q, %v), want (orders, %v)", reqs[0].GetName(), got, wantAttrs)
	}
	for _, want := range []string{"Name:", "orders", "Attributes:", "max_retries", "push_endpoint", "http://example.com/hook"} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not show %q:\n%s", want, out)
		}
	}

	// Without flags, no attribute is sent: the server's defaults apply.
	cli(t, url, "", "topic", "create", "plain")
	if got := fakeherald.Received[*heraldv1.CreateTopicRequest](f)[1].GetAttributes(); len(got) != 0 {
		t.Errorf("topic create without flags sent attributes %v", got)
	}

	stderr := cliFails(t, url, "", "topic", "create", "orders")
	if stderr != "herald: topic \"orders\" already exists\n" {
		t.Errorf("creating a topic twice: stderr %q", stderr)
	}
}

func TestTopicGetListSetDelete(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", map[string]string{"shards": "4", "persistent": "true"})

	// The API's Topic, as its JSON names it.
	var topic heraldv1.Topic
	if err := protojson.Unmarshal([]byte(cli(t, url, "", "topic", "get", "orders", "-o", "json")), &topic); err != nil {
		t.Fatal(err)
	}
	want := &heraldv1.Topic{Name: "orders", Attributes: map[string]string{"shards": "4", "persistent": "true"},
		CreatedAt: timestamppb.New(eventTime), UpdatedAt: timestamppb.New(eventTime)}
	if !proto.Equal(&topic, want) {
		t.Errorf("topic get -o json = %v, want %v", &topic, want)
	}

	out := cli(t, url, "", "topic", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Fields(lines[0])[0] != "NAME" ||
		!reflect.DeepEqual(strings.Fields(lines[1]), []string{"orders", "4", "true", "-"}) {
		t.Errorf("topic list:\n%s", out)
	}

	cli(t, url, "", "topic", "set", "orders", "--attr", "max_retries=3", "--push-endpoint", "nats://h/subj")
	set := fakeherald.Received[*heraldv1.SetTopicAttributesRequest](f)
	wantAttrs := map[string]string{"max_retries": "3", "push_endpoint": "nats://h/subj"}
	if len(set) != 1 || set[0].GetName() != "orders" || !reflect.DeepEqual(set[0].GetAttributes(), wantAttrs) {
		t.Errorf("topic set sent %v, want orders %v", set, wantAttrs)
	}

	f.SetStats(&heraldv1.TopicStatsResponse{Name: "orders", Total: &heraldv1.ShardStats{}}) // it holds nothing
	if out := cli(t, url, "", "topic", "delete", "orders"); out != "deleted topic orders\n" {
		t.Errorf("topic delete printed %q", out)
	}
	if out := cli(t, url, "", "topic", "list", "-o", "json"); out != "{\n  \"topics\": []\n}\n" {
		t.Errorf("topic list -o json with no topics printed %q, want the API's ListTopicsResponse", out)
	}
}

func TestTopicStats(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.SetStats(&heraldv1.TopicStatsResponse{
		Name:  "orders",
		Total: &heraldv1.ShardStats{Events: 5, Bytes: 50, Published: 9, Acked: 4, NextOffset: 9, Head: 4},
		Shards: []*heraldv1.ShardStats{
			{Shard: 0, Name: "orders", Events: 5, Bytes: 50, Published: 9, Acked: 4, NextOffset: 9, Head: 4,
				OldestEventTime: timestamppb.New(time.Now().Add(-time.Hour))},
			{Shard: 1, Name: "orders.1", Error: "log damaged"},
		},
	})
	out := cli(t, url, "", "topic", "stats", "orders")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("topic stats printed %d lines, want a header, 2 shards and a total:\n%s", len(lines), out)
	}
	for i, prefix := range []string{"SHARD", "0 orders 5 50", "1 orders.1 0 0", "total orders 5 50"} {
		if got := strings.Join(strings.Fields(lines[i]), " "); !strings.HasPrefix(got, prefix) {
			t.Errorf("line %d = %q, want it to start with %q", i, got, prefix)
		}
	}
	if !strings.Contains(lines[2], "log damaged") {
		t.Errorf("the shard error is not shown: %q", lines[2])
	}
	if reqs := fakeherald.Received[*heraldv1.TopicStatsRequest](f); len(reqs) != 1 || reqs[0].GetName() != "orders" {
		t.Errorf("server received %v, want one TopicStats for orders", reqs)
	}
}

func TestPrintStats(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	s := &client.TopicStats{
		Name: "t",
		Total: client.ShardStats{Name: "t", Events: 2, Bytes: 20, ReservedBytes: 8, Reservations: 1,
			OldestEventTime: now.Add(-90 * time.Second), Published: 3, Acked: 1, Leased: 1, NextOffset: 3, Head: 1,
			Delivered: 5, Retried: 7, DeadLetters: 4},
		Shards: []client.ShardStats{
			{Shard: 0, Name: "t", Events: 2, Bytes: 20, ReservedBytes: 8, Reservations: 1,
				OldestEventTime: now.Add(-90 * time.Second), Published: 3, Acked: 1, Leased: 1, NextOffset: 3, Head: 1,
				Delivered: 5, Retried: 7, DeadLetters: 4},
			{Shard: 1, Name: "t.1", Error: "log damaged"},
		},
	}
	var b strings.Builder
	if err := printStats(&b, s, now); err != nil {
		t.Fatal(err)
	}
	want := `SHARD  NAME  EVENTS  BYTES  RESERVED  RESERVATIONS  OLDEST  PUBLISHED  ACKED  LEASED  DELIVERED  RETRIED  DEAD  NEXT  HEAD  ERROR
0      t     2       20     8         1             1m30s   3          1      1       5          7        4     3     1     -
1      t.1   0       0      0         0             -       0          0      0       0          0        0     0     0     log damaged
total  t     2       20     8         1             1m30s   3          1      1       5          7        4     3     1     -
`
	if b.String() != want {
		t.Errorf("printStats:\n%s\nwant:\n%s", b.String(), want)
	}
}
