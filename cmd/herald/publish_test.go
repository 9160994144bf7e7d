package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"herald/client"
	"herald/internal/testkit/fakeherald"
	heraldv1 "herald/proto/herald/v1"
	"herald/tests/framework"
)

// publishedBatches returns the events of each Publish request, as
// "key:payload" strings.
func publishedBatches(f *fakeherald.Server) [][]string {
	var batches [][]string
	for _, req := range fakeherald.Received[*heraldv1.PublishRequest](f) {
		var batch []string
		for _, e := range req.GetEvents() {
			batch = append(batch, e.GetKey()+":"+string(e.GetPayload()))
		}
		batches = append(batches, batch)
	}
	return batches
}

func TestPublishArgsInBatches(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	out := cli(t, url, "", "publish", "orders", "--key", "k", "--header", "Type=created",
		"--header", "Trace=a=b", "--batch", "2", "one", "two", "three")
	want := [][]string{{"k:one", "k:two"}, {"k:three"}}
	if got := publishedBatches(f); !reflect.DeepEqual(got, want) {
		t.Errorf("batches %q, want %q", got, want)
	}
	wantHeaders := map[string]string{"Type": "created", "Trace": "a=b"}
	for _, req := range fakeherald.Received[*heraldv1.PublishRequest](f) {
		for _, e := range req.GetEvents() {
			if !reflect.DeepEqual(e.GetHeaders(), wantHeaders) {
				t.Errorf("event headers %v, want %v", e.GetHeaders(), wantHeaders)
			}
		}
		if req.GetTopic() != "orders" {
			t.Errorf("published to %q, want orders", req.GetTopic())
		}
	}
	if want := "orders/0/0\norders/0/1\norders/0/2\n"; out != want {
		t.Errorf("printed %q, want %q", out, want)
	}
}

func TestPublishStdin(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	// Empty lines are skipped, CRLF endings removed, a last line without
	// a newline kept.
	out := cli(t, url, "a\n\nb\r\nc", "publish", "orders")
	if want := [][]string{{":a", ":b", ":c"}}; !reflect.DeepEqual(publishedBatches(f), want) {
		t.Errorf("batches %q, want %q", publishedBatches(f), want)
	}
	if strings.Count(out, "\n") != 3 {
		t.Errorf("printed %q, want 3 ids", out)
	}
}

func TestPublishFileKeyed(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	path := filepath.Join(t.TempDir(), "events")
	if err := os.WriteFile(path, []byte("k1\tp1\nk2\tp\t2\nk3\tp3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cli(t, url, "", "publish", "orders", "--keyed", "--file", path, "--batch", "2")
	want := [][]string{{"k1:p1", "k2:p\t2"}, {"k3:p3"}}
	if got := publishedBatches(f); !reflect.DeepEqual(got, want) {
		t.Errorf("batches %q, want %q", got, want)
	}

	// "-" is standard input.
	cli(t, url, "k4\tp4\n", "publish", "orders", "--keyed", "--file", "-")
	if got := publishedBatches(f); len(got) != 3 || !reflect.DeepEqual(got[2], []string{"k4:p4"}) {
		t.Errorf("batches %q, want a third with k4:p4", got)
	}
}

func TestPublishKeyedLineWithoutTab(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	stderr := cliFails(t, url, "a\tone\nno tab here\n", "publish", "orders", "--keyed", "--batch", "1")
	for _, want := range []string{"standard input line 2", "KEY<TAB>PAYLOAD", "1 events were published"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not mention %q", stderr, want)
		}
	}
}

func TestPublishJSON(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	out := cli(t, url, "", "publish", "orders", "-o", "json", "--key", "k", "x", "y")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("printed %q, want 2 JSON lines", out)
	}
	for i, line := range lines {
		var got map[string]string
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		want := map[string]string{"id": "orders/0/" + string(rune('0'+i)), "key": "k"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("line %d = %v, want %v", i, got, want)
		}
	}
}

func TestReserveCommitAbort(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	if out := cli(t, url, "", "reserve", "orders", "--key", "k", "--bytes", "100", "--count", "2"); out != "orders/0/r1\n" {
		t.Errorf("reserve printed %q", out)
	}
	want := &heraldv1.ReserveRequest{Topic: "orders", Key: "k", Bytes: 100, Count: 2}
	if got := fakeherald.Received[*heraldv1.ReserveRequest](f); len(got) != 1 || got[0].String() != want.String() {
		t.Errorf("server received %v, want %v", got, want)
	}

	out := cli(t, url, "", "commit", "orders/0/r1", "--key", "k", "--header", "H=v", "a", "b")
	if out != "orders/0/0\norders/0/1\n" {
		t.Errorf("commit printed %q", out)
	}
	commits := fakeherald.Received[*heraldv1.CommitRequest](f)
	if len(commits) != 1 || commits[0].GetReservationId() != "orders/0/r1" || len(commits[0].GetEvents()) != 2 ||
		commits[0].GetEvents()[1].GetKey() != "k" || string(commits[0].GetEvents()[1].GetPayload()) != "b" ||
		commits[0].GetEvents()[0].GetHeaders()["H"] != "v" {
		t.Errorf("server received %v", commits)
	}

	if out := cli(t, url, "", "abort", "orders/0/r1"); out != "aborted orders/0/r1\n" {
		t.Errorf("abort printed %q", out)
	}
	if got := fakeherald.Received[*heraldv1.AbortRequest](f); len(got) != 1 || got[0].GetReservationId() != "orders/0/r1" {
		t.Errorf("server received %v", got)
	}
}

// TestPublishStreamsSlowInput checks that events of a slow input, such as
// "tail -f", are published as they come, not held until a batch is full,
// and that an interruption stops reading at once.
func TestPublishStreamsSlowInput(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("logs", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdin, input := io.Pipe()
	defer input.Close()
	var out, errOut framework.SyncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--server", url, "publish", "logs", "--batch", "100"}, stdin, &out, &errOut)
	}()

	io.WriteString(input, "first\nsecond\n")
	waitLines(t, &out, 2)
	io.WriteString(input, "third\n")
	waitLines(t, &out, 3)
	want := [][]string{{":first", ":second"}, {":third"}}
	if got := publishedBatches(f); !reflect.DeepEqual(got, want) {
		t.Errorf("batches %q, want %q", got, want)
	}

	cancel() // the input stays open: herald must not wait for it
	select {
	case code := <-done:
		if code != 0 || errOut.String() != "" {
			t.Errorf("interrupted publish: exit %d, stderr %q", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("publish did not stop when interrupted")
	}
}

func TestReadLines(t *testing.T) {
	items := make(chan lineItem)
	go readLines(context.Background(), strings.NewReader("a\n\nb\r\nc"), items)
	var got []string
	for it := range items {
		switch {
		case it.idle:
			got = append(got, "idle")
		case it.eof:
			got = append(got, "eof")
		case it.err != nil:
			t.Fatal(it.err)
		default:
			got = append(got, fmt.Sprintf("%d:%s", it.n, it.line))
		}
		if it.eof {
			break
		}
	}
	want := []string{"idle", "1:a", "3:b", "4:c", "eof"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("items %q, want %q", got, want)
	}
}

// TestPublishRetriesWithTheSameDedupIDs: a batch the server refuses as
// unavailable is sent again, --retries times in all, each time with the
// same dedup ids, one per event.
func TestPublishRetriesWithTheSameDedupIDs(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	f.SetFail(connect.NewError(connect.CodeUnavailable, errors.New("no leader yet")))
	cliFails(t, url, "", "publish", "orders", "--key", "k", "--retries", "3", "one", "two")
	reqs := fakeherald.Received[*heraldv1.PublishRequest](f)
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3 (--retries 3)", len(reqs))
	}
	ids := func(r *heraldv1.PublishRequest) []string {
		var out []string
		for _, e := range r.GetEvents() {
			out = append(out, e.GetDedupId())
		}
		return out
	}
	first := ids(reqs[0])
	if len(first) != 2 || first[0] == "" || first[1] == "" || first[0] == first[1] {
		t.Fatalf("dedup ids %q, want two distinct ones", first)
	}
	for _, r := range reqs[1:] {
		if got := ids(r); !reflect.DeepEqual(got, first) {
			t.Fatalf("a retry sent dedup ids %q, the first attempt %q", got, first)
		}
	}

	// Once the server is back, the batch goes through.
	f.SetFail(nil)
	if out := cli(t, url, "", "publish", "orders", "--key", "k", "three"); out != "orders/0/0\n" {
		t.Fatalf("printed %q", out)
	}
	// --retries 1 sends once, without dedup ids; 0 is refused.
	f.SetFail(connect.NewError(connect.CodeUnavailable, errors.New("down")))
	before := len(fakeherald.Received[*heraldv1.PublishRequest](f))
	cliFails(t, url, "", "publish", "orders", "--key", "k", "--retries", "1", "four")
	reqs = fakeherald.Received[*heraldv1.PublishRequest](f)
	if len(reqs) != before+1 || reqs[len(reqs)-1].GetEvents()[0].GetDedupId() != "" {
		t.Fatalf("--retries 1: %d requests, the last %v", len(reqs)-before, reqs[len(reqs)-1])
	}
	if msg := cliFails(t, url, "", "publish", "orders", "--retries", "0", "x"); !strings.Contains(msg, "--retries 0: want at least 1") {
		t.Fatalf("--retries 0: %q", msg)
	}
}

// TestPublishBatchesStayUnderRequestLimit: a batch is cut where the next
// event would take its request over the limit, whatever --batch says.
func TestPublishBatchesStayUnderRequestLimit(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	third := strings.Repeat("x", client.MaxRequestBytes/3)
	stdin := strings.Repeat(third+"\n", 4) + "small\n"
	out := cli(t, url, stdin, "publish", "orders", "--batch", "100")
	var sizes []int
	for _, b := range publishedBatches(f) {
		sizes = append(sizes, len(b))
	}
	if want := []int{2, 3}; !reflect.DeepEqual(sizes, want) {
		t.Errorf("batches of %v events, want %v", sizes, want)
	}
	if strings.Count(out, "\n") != 5 {
		t.Errorf("printed %d ids, want 5", strings.Count(out, "\n"))
	}
}

// TestPublishLineOverRequestLimit: a line no request can carry is refused
// by its number, as any bad line is, and the batch it would have joined
// is not sent: nothing is published.
func TestPublishLineOverRequestLimit(t *testing.T) {
	f := fakeherald.New(eventTime)
	url := f.Start(t)
	f.AddTopic("orders", nil)
	stdin := "small\n" + strings.Repeat("x", client.MaxRequestBytes) + "\n"
	stderr := cliFails(t, url, stdin, "publish", "orders")
	for _, want := range []string{"standard input line 2", "more than a request to the server may carry", "split it"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not mention %q", stderr, want)
		}
	}
	if got := publishedBatches(f); len(got) != 0 || strings.Contains(stderr, "were published") {
		t.Errorf("published %d batches (%q), want none", len(got), stderr)
	}
}
