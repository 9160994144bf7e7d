package main

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"herald/client"
	heraldv1 "herald/proto/herald/v1"
)

// consumeFixture starts a fake with topic orders holding three events, one
// of them binary.
func consumeFixture(t *testing.T) (*fakeHerald, string) {
	f := newFakeHerald()
	url := f.start(t)
	f.addTopic("orders", nil)
	f.addEvents("orders",
		&heraldv1.PublishEvent{Key: "a", Payload: []byte("hello world")},
		&heraldv1.PublishEvent{Key: "b", Payload: []byte{0xff, 0x00, 0x01}},
		&heraldv1.PublishEvent{Payload: []byte("two\nlines")},
	)
	return f, url
}

func ackedIDs(f *fakeHerald) []string {
	var ids []string
	for _, req := range received[*heraldv1.AckRequest](f) {
		ids = append(ids, req.GetIds()...)
	}
	return ids
}

func TestConsumeAcks(t *testing.T) {
	f, url := consumeFixture(t)
	out := cli(t, url, "", "consume", "orders", "--wait", "0", "--visibility", "1m")
	want := "orders/0/0 a hello world\n" +
		"orders/0/1 b base64:/wAB\n" +
		"orders/0/2 - base64:dHdvCmxpbmVz\n"
	if out != want {
		t.Errorf("consume printed:\n%s\nwant:\n%s", out, want)
	}
	if got, want := ackedIDs(f), []string{"orders/0/0", "orders/0/1", "orders/0/2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("acked %q, want %q", got, want)
	}
	fetches := received[*heraldv1.FetchRequest](f)
	if len(fetches) != 2 {
		t.Errorf("%d fetches, want 2 (the second one empty)", len(fetches))
	}
	if got := fetches[0]; got.GetMaxEvents() != 100 || got.GetVisibilityTimeout().AsDuration() != time.Minute ||
		got.GetWait() != nil || got.GetTopic() != "orders" {
		t.Errorf("fetch request %v", got)
	}
	if out := cli(t, url, "", "consume", "orders", "--wait", "0"); out != "" {
		t.Errorf("a second consume printed %q, want nothing", out)
	}
}

func TestConsumeMaxNoAck(t *testing.T) {
	f, url := consumeFixture(t)
	out := cli(t, url, "", "consume", "orders", "--max", "2", "--no-ack", "--wait", "0")
	if n := strings.Count(out, "\n"); n != 2 {
		t.Errorf("consume --max 2 printed %d events:\n%s", n, out)
	}
	fetches := received[*heraldv1.FetchRequest](f)
	if len(fetches) != 1 || fetches[0].GetMaxEvents() != 2 {
		t.Errorf("fetches %v, want one for 2 events", fetches)
	}
	if ids := ackedIDs(f); len(ids) != 0 {
		t.Errorf("consume --no-ack acked %q", ids)
	}
}

func TestConsumeJSON(t *testing.T) {
	_, url := consumeFixture(t)
	out := cli(t, url, "", "consume", "orders", "-o", "json", "--wait", "0")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("printed %d lines, want 3:\n%s", len(lines), out)
	}
	var d client.Delivery
	if err := json.Unmarshal([]byte(lines[1]), &d); err != nil {
		t.Fatal(err)
	}
	want := client.Delivery{ID: "orders/0/1", Topic: "orders", Offset: 1, Key: "b",
		Payload: []byte{0xff, 0x00, 0x01}, Time: eventTime}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("line 2 = %+v, want %+v", d, want)
	}
}

func TestConsumeFollowStopsOnInterrupt(t *testing.T) {
	f, url := consumeFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--server", url, "consume", "orders", "--follow", "--wait", "20ms"},
			strings.NewReader(""), &out, &errOut)
	}()
	waitLines(t, &out, 3)
	f.addEvents("orders", &heraldv1.PublishEvent{Key: "late", Payload: []byte("late event")})
	waitLines(t, &out, 4)
	cancel()
	select {
	case code := <-done:
		if code != 0 || errOut.String() != "" {
			t.Errorf("interrupted consume: exit %d, stderr %q", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("consume --follow did not stop when interrupted")
	}
	if !strings.HasSuffix(out.String(), "orders/0/3 late late event\n") {
		t.Errorf("the event published while following is missing:\n%s", out.String())
	}
	if ids := ackedIDs(f); !slices.Contains(ids, "orders/0/3") || len(ids) != 4 {
		t.Errorf("acked %q, want all 4 events", ids)
	}
}

// waitLines waits until b holds n lines.
func waitLines(t *testing.T, b *syncBuffer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(b.String(), "\n") < n {
		if time.Now().After(deadline) {
			t.Fatalf("waited for %d lines, got:\n%s", n, b.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPayloadText(t *testing.T) {
	tests := map[string]string{
		"plain":       "plain",
		"tab\there":   "tab\there",
		"héllo ✓":     "héllo ✓",
		"":            "",
		"line\nbreak": "base64:bGluZQpicmVhaw==",
		"\xff":        "base64:/w==",
	}
	for in, want := range tests {
		if got := payloadText([]byte(in)); got != want {
			t.Errorf("payloadText(%q) = %q, want %q", in, got, want)
		}
	}
}
