package main

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"herald/client"
	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
	"herald/tests/framework"
)

// consumeFixture starts a fake with topic orders holding three events, one
// of them binary.
func consumeFixture(t *testing.T) (*fakeherald.Server, string) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	f.AddEvents("orders",
		&heraldv1.PublishEvent{Key: "a", Payload: []byte("hello world")},
		&heraldv1.PublishEvent{Key: "b", Payload: []byte{0xff, 0x00, 0x01}},
		&heraldv1.PublishEvent{Payload: []byte("two\nlines")},
	)
	return f, url
}

func ackedIDs(f *fakeherald.Server) []string {
	var ids []string
	for _, req := range fakeherald.Received[*heraldv1.AckRequest](f) {
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
	fetches := fakeherald.Received[*heraldv1.FetchRequest](f)
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
	fetches := fakeherald.Received[*heraldv1.FetchRequest](f)
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
	// Each line is the API's Event, as its JSON names it.
	var d heraldv1.Event
	if err := protojson.Unmarshal([]byte(lines[1]), &d); err != nil {
		t.Fatal(err)
	}
	want := &heraldv1.Event{Id: "orders/0/1", Topic: "orders", Offset: 1, Key: "b",
		Payload: []byte{0xff, 0x00, 0x01}, Time: timestamppb.New(eventTime)}
	if !proto.Equal(&d, want) {
		t.Errorf("line 2 = %v, want %v", &d, want)
	}
	for _, field := range []string{`"offset":"1"`, `"deliveryAttempt":0`, `"time":"2025-03-01T10:00:00Z"`} {
		if !strings.Contains(lines[1], field) {
			t.Errorf("line 2 %s lacks %s", lines[1], field)
		}
	}
}

func TestConsumeFollowStopsOnInterrupt(t *testing.T) {
	f, url := consumeFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut framework.SyncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--server", url, "consume", "orders", "--follow", "--wait", "20ms"},
			strings.NewReader(""), &out, &errOut)
	}()
	waitLines(t, &out, 3)
	f.AddEvents("orders", &heraldv1.PublishEvent{Key: "late", Payload: []byte("late event")})
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
func waitLines(t *testing.T, b *framework.SyncBuffer, n int) {
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

// damagedShard is how the server reports a shard whose log is damaged.
func damagedShard(reason string) *heraldv1.UnreadableShard {
	return &heraldv1.UnreadableShard{Shard: 1, Name: "orders.1", Reason: reason}
}

const damagedReason = "unavailable: shard orders.1 could not be opened: log corrupted: /data/shards/3-orders.1/log/0002.seg at byte offset 1948"

// warningLine is what consume prints on stderr for shard orders.1.
func warningLine(reason string) string {
	return `herald: shard orders.1 (index 1) of topic "orders" could not be read: ` + reason + "\n"
}

func TestConsumeUnreadableShardFailsAfterTheOthers(t *testing.T) {
	f, url := consumeFixture(t)
	f.SetUnreadable("orders", false, damagedShard(damagedReason))
	r := runCLI(context.Background(), "", "--server", url, "consume", "orders", "--wait", "0")
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	if n := strings.Count(r.stdout, "\n"); n != 3 {
		t.Errorf("printed %d events of the readable shard, want 3:\n%s", n, r.stdout)
	}
	if got := ackedIDs(f); len(got) != 3 {
		t.Errorf("acked %q, want the 3 events printed", got)
	}
	lines := strings.SplitAfter(r.stderr, "\n")
	// Two fetches saw the shard; it is reported once, then the failure.
	if len(lines) < 2 || lines[0] != warningLine(damagedReason) || strings.Count(r.stderr, "could not be read: ") != 1 ||
		!strings.Contains(lines[1], `herald: topic "orders": some shards could not be read`) ||
		!strings.Contains(r.stderr, "printed and acknowledged") || !strings.Contains(r.stderr, "--allow-unreadable") {
		t.Errorf("stderr:\n%s\nwant the shard named once with its reason, then the failure and --allow-unreadable", r.stderr)
	}
}

func TestConsumeAllowUnreadableWarnsAndExitsZero(t *testing.T) {
	f, url := consumeFixture(t)
	f.SetUnreadable("orders", false, damagedShard(damagedReason))
	r := runCLI(context.Background(), "", "--server", url, "consume", "orders", "--wait", "0", "--allow-unreadable")
	if r.code != 0 || r.stderr != warningLine(damagedReason) {
		t.Errorf("exit %d, stderr %q; want 0 and the one warning %q", r.code, r.stderr, warningLine(damagedReason))
	}
	if n := strings.Count(r.stdout, "\n"); n != 3 || len(ackedIDs(f)) != 3 {
		t.Errorf("printed %d events and acked %d, want 3 and 3", n, len(ackedIDs(f)))
	}
}

// An ack whose lease lapsed (the event went to another consumer) is a
// warning that names the receipt and the flag that avoids it, not a
// failure: the events are with their new holder, and consume goes on.
func TestConsumeWarnsOfLapsedAcksAndGoesOn(t *testing.T) {
	f, url := consumeFixture(t)
	f.SetLapsed("orders/0/1")
	r := runCLI(context.Background(), "", "--server", url, "consume", "orders", "--wait", "0", "--batch", "2")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q; want 0", r.code, r.stderr)
	}
	want := "herald consume: warning: ack: 1 receipt lapsed (orders/0/1): handed out again since, so acknowledged by the current holder instead; " +
		"a --visibility longer than the time to handle a batch avoids this\n"
	if r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	if n := strings.Count(r.stdout, "\n"); n != 3 {
		t.Errorf("printed %d events, want all 3 (the batch after the lapse too):\n%s", n, r.stdout)
	}
	if got, want := ackedIDs(f), []string{"orders/0/0", "orders/0/1", "orders/0/2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ack requests named %q, want %q", got, want)
	}
}

func TestConsumeJSONListsUnreadableShards(t *testing.T) {
	f, url := consumeFixture(t)
	f.SetUnreadable("orders", false, damagedShard(damagedReason))
	r := runCLI(context.Background(), "", "--server", url, "consume", "orders", "--wait", "0", "-o", "json", "--allow-unreadable")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	var events, unreadable int
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var v struct {
			ID         string                  `json:"id"`
			Unreadable *client.UnreadableShard `json:"unreadableShard"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		switch {
		case v.ID != "":
			events++
		case v.Unreadable != nil:
			unreadable++
			want := client.UnreadableShard{Shard: 1, Name: "orders.1", Reason: damagedReason}
			if *v.Unreadable != want || !strings.Contains(line, `"topic":"orders"`) {
				t.Errorf("line %s, want %+v in topic orders", line, want)
			}
		}
	}
	if events != 3 || unreadable != 1 {
		t.Errorf("stdout has %d events and %d unreadable shards, want 3 and 1:\n%s", events, unreadable, r.stdout)
	}
}

func TestConsumeNoReadableShardFails(t *testing.T) {
	// --allow-unreadable accepts a partial read, not a topic that cannot
	// be read at all.
	for _, flags := range [][]string{nil, {"--allow-unreadable"}} {
		f, url := consumeFixture(t)
		f.SetUnreadable("orders", true,
			&heraldv1.UnreadableShard{Shard: 0, Name: "orders", Reason: "r0"}, damagedShard(damagedReason))
		args := append([]string{"--server", url, "consume", "orders", "--wait", "0"}, flags...)
		r := runCLI(context.Background(), "", args...)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, `shard orders (index 0) of topic "orders" could not be read: r0`) ||
			!strings.Contains(r.stderr, warningLine(damagedReason)) || !strings.Contains(r.stderr, "no shard could be read") {
			t.Errorf("consume %q of a topic with no readable shard: exit %d, stdout %q, stderr:\n%s", flags, r.code, r.stdout, r.stderr)
		}
	}
}

func TestConsumeFollowStopsAtUnreadableShard(t *testing.T) {
	f, url := consumeFixture(t)
	f.SetUnreadable("orders", false, damagedShard(damagedReason))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := runCLI(ctx, "", "--server", url, "consume", "orders", "--follow", "--wait", "20ms")
	if ctx.Err() != nil {
		t.Fatal("consume --follow kept going past an unreadable shard")
	}
	if r.code != 1 || !strings.HasPrefix(r.stderr, warningLine(damagedReason)) || strings.Count(r.stdout, "\n") != 3 || len(ackedIDs(f)) != 3 {
		t.Errorf("exit %d, %d events printed, %d acked, stderr:\n%s\nwant 1 after printing and acking the 3 readable events",
			r.code, strings.Count(r.stdout, "\n"), len(ackedIDs(f)), r.stderr)
	}
}

func TestConsumeFollowAllowUnreadableWarnsOncePerChange(t *testing.T) {
	f, url := consumeFixture(t)
	f.SetUnreadable("orders", false, damagedShard(damagedReason))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut framework.SyncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--server", url, "consume", "orders", "--follow", "--wait", "10ms", "--allow-unreadable"},
			strings.NewReader(""), &out, &errOut)
	}()
	waitLines(t, &out, 3)
	waitFetches(t, f, 10)
	if errOut.String() != warningLine(damagedReason) {
		t.Errorf("after 10 polls, stderr:\n%s\nwant the one warning", errOut.String())
	}
	f.SetUnreadable("orders", false, damagedShard("still damaged, differently"))
	waitLines(t, &errOut, 2)
	f.AddEvents("orders", &heraldv1.PublishEvent{Key: "late", Payload: []byte("late event")})
	waitLines(t, &out, 4)
	cancel()
	select {
	case code := <-done:
		want := warningLine(damagedReason) + warningLine("still damaged, differently")
		if code != 0 || errOut.String() != want {
			t.Errorf("exit %d, stderr:\n%s\nwant 0 and:\n%s", code, errOut.String(), want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("consume --follow did not stop when interrupted")
	}
}

func TestConsumeFollowAllowUnreadableWaitsForAShard(t *testing.T) {
	f, url := consumeFixture(t)
	f.SetUnreadable("orders", true, damagedShard(damagedReason))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut framework.SyncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--server", url, "consume", "orders", "--follow", "--wait", "10ms", "--allow-unreadable"},
			strings.NewReader(""), &out, &errOut)
	}()
	waitFetches(t, f, 2) // the second after a pause
	if errOut.String() != warningLine(damagedReason) || out.String() != "" {
		t.Errorf("with no readable shard: stdout %q, stderr:\n%s\nwant only the one warning", out.String(), errOut.String())
	}
	f.SetUnreadable("orders", false) // repaired
	waitLines(t, &out, 3)
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
}

// waitFetches waits until f received n fetches.
func waitFetches(t *testing.T, f *fakeherald.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(fakeherald.Received[*heraldv1.FetchRequest](f)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("waited for %d fetches, got %d", n, len(fakeherald.Received[*heraldv1.FetchRequest](f)))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConsumeFollowRetriesWhileUnavailable: a fetch failing because the
// server is unavailable is retried after a pause of a second at most (less
// the jitter), said on stderr, until the server answers again.
func TestConsumeFollowRetriesWhileUnavailable(t *testing.T) {
	f, url := consumeFixture(t)
	f.SetFail(connect.NewError(connect.CodeUnavailable, errors.New("no leader")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut framework.SyncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--server", url, "consume", "orders", "--follow", "--wait", "10ms"},
			strings.NewReader(""), &out, &errOut)
	}()
	waitLines(t, &errOut, 1)
	line := errOut.String()
	_, after, ok := strings.Cut(line, "; retrying in ")
	pause, err := time.ParseDuration(strings.TrimSpace(after))
	if !ok || err != nil || !strings.Contains(line, "no leader") ||
		pause < time.Duration((1-fetchRetryPause.Jitter)*float64(time.Second)) || pause > time.Second {
		t.Errorf("stderr %q, want the error and a first pause of at most 1s, less at most the jitter", line)
	}
	f.SetFail(nil)
	waitLines(t, &out, 3)
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
}

// With --subscription, consume fetches from that subscription, and acks
// in it.
func TestConsumeSubscription(t *testing.T) {
	f, url := consumeFixture(t)
	cli(t, url, "", "consume", "orders", "--subscription", "billing", "--wait", "0", "--max", "1")
	fetches := fakeherald.Received[*heraldv1.FetchRequest](f)
	acks := fakeherald.Received[*heraldv1.AckRequest](f)
	if len(fetches) == 0 || fetches[0].GetSubscription() != "billing" {
		t.Errorf("fetches %v, want them of subscription billing", fetches)
	}
	if len(acks) != 1 || acks[0].GetSubscription() != "billing" {
		t.Errorf("acks %v, want one in subscription billing", acks)
	}
}
