package s3ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"herald/internal/endpoint"
	"herald/internal/node"
)

func openNode(t *testing.T) *node.Node {
	t.Helper()
	n, err := node.Open(context.Background(), node.Config{
		DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		PushGuard: endpoint.GuardConfig{Allow: []string{"127.0.0.0/8", "::1/128"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// post sends a notification to /s3/{topic} through a mux, as api mounts
// the handler.
func post(t *testing.T, n *node.Node, topicName, body string) (int, map[string]any) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("POST /s3/{topic}", New(n, toConnect))
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/s3/"+topicName, strings.NewReader(body)))
	var resp map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatalf("response %s: %v", w.Body, err)
	}
	return w.Code, resp
}

// toConnect is the part of api's error codes these tests need.
func toConnect(err error) *connect.Error {
	switch {
	case errors.Is(err, node.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, node.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

// cephRecord is a record as Ceph RGW sends it, abridged.
func cephRecord(event, bucket, object string, seq int) string {
	return fmt.Sprintf(`{"eventVersion": "2.2", "eventSource": "ceph:s3", "awsRegion": "default",
	 "eventTime": "2026-11-23T10:00:00.000000Z", "eventName": %q, "s3": {"s3SchemaVersion": "1.0",
	 "configurationId": "notif1", "bucket": {"name": %q, "arn": "arn:aws:s3:default::%s"},
	 "object": {"key": %q, "size": 7, "sequencer": "%08d"}}, "eventId": "e%d", "opaqueData": ""}`,
		event, bucket, bucket, object, seq, seq)
}

func notify(records ...string) string {
	return `{"Records": [` + strings.Join(records, ",") + `]}`
}

func ids(t *testing.T, resp map[string]any) []string {
	t.Helper()
	raw, _ := resp["ids"].([]any)
	out := make([]string, len(raw))
	for i, v := range raw {
		out[i], _ = v.(string)
	}
	return out
}

func TestRecordsArePublishedKeyedByBucketAndObject(t *testing.T) {
	n := openNode(t)
	if _, err := n.CreateTopic(context.Background(), "objects", map[string]string{"shards": "4"}); err != nil {
		t.Fatal(err)
	}
	// Three events of one object and one of another, in one notification.
	body := notify(
		cephRecord("ObjectCreated:Put", "fish", "a.txt", 1),
		cephRecord("ObjectCreated:Put", "fish", "b.txt", 2),
		cephRecord("ObjectCreated:Copy", "fish", "a.txt", 3),
		cephRecord("ObjectRemoved:Delete", "fish", "a.txt", 4))
	status, resp := post(t, n, "objects", body)
	if status != http.StatusOK || len(ids(t, resp)) != 4 {
		t.Fatalf("POST: %d %v", status, resp)
	}
	got := ids(t, resp)

	// A store that sends the notification again does not publish twice.
	status, resp = post(t, n, "objects", body)
	if status != http.StatusOK || fmt.Sprint(ids(t, resp)) != fmt.Sprint(got) {
		t.Fatalf("resent notification: %d %v, want ids %v", status, resp, got)
	}

	res, err := n.Fetch(context.Background(), "objects", node.FetchOptions{Max: 100, Visibility: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Each key's events come in order: a.txt's three, and b.txt's one.
	byKey := map[string]node.Delivery{}
	for _, d := range res.Deliveries {
		if _, ok := byKey[d.Event.Key]; !ok {
			byKey[d.Event.Key] = d
		}
	}
	if len(res.Deliveries) != len(got) || byKey["fish:a.txt"].ID != got[0] || byKey["fish:b.txt"].ID != got[1] {
		t.Fatalf("fetched %+v, want every event, fish:a.txt's from %s and fish:b.txt's %s first", res.Deliveries, got[0], got[1])
	}
	var doc struct {
		Records []struct {
			EventName string `json:"eventName"`
			S3        struct {
				Object struct {
					Key string `json:"key"`
				} `json:"object"`
			} `json:"s3"`
		} `json:"Records"`
	}
	if err := json.Unmarshal(byKey["fish:a.txt"].Event.Payload, &doc); err != nil || len(doc.Records) != 1 ||
		doc.Records[0].EventName != "ObjectCreated:Put" || doc.Records[0].S3.Object.Key != "a.txt" {
		t.Fatalf("payload %s is not the one record (%v)", byKey["fish:a.txt"].Event.Payload, err)
	}
	// a.txt's events are in the order the store sent them, in one shard.
	shardOf := func(id string) string { return id[:strings.LastIndex(id, "/")] }
	if shardOf(got[0]) != shardOf(got[2]) || shardOf(got[2]) != shardOf(got[3]) || !(got[0] < got[2] && got[2] < got[3]) {
		t.Fatalf("ids of fish:a.txt's events %s %s %s are not in order in one shard", got[0], got[2], got[3])
	}
}

func TestMalformedNotificationsPublishNothing(t *testing.T) {
	n := openNode(t)
	if _, err := n.CreateTopic(context.Background(), "objects", map[string]string{"shards": "2"}); err != nil {
		t.Fatal(err)
	}
	good := cephRecord("ObjectCreated:Put", "fish", "a.txt", 1)
	for _, tt := range []struct{ name, body, says string }{
		{"not JSON", "hello", "not an S3 event notification"},
		{"no records", `{"Records": []}`, "no records"},
		{"records not a list", `{"Records": {"a": 1}}`, "not an S3 event notification"},
		{"record not an object", notify(good, `"x"`), "record 1: not an S3 event record"},
		{"no bucket", notify(good, strings.Replace(good, `"name": "fish"`, `"nom": "fish"`, 1)), "record 1: s3.bucket.name is missing"},
		{"no object key", notify(good, cephRecord("ObjectCreated:Put", "fish", "b.txt", 2), strings.Replace(good, `"key": "a.txt"`, `"key": ""`, 1)), "record 2: s3.object.key is missing"},
		{"no event name", notify(strings.Replace(good, `"eventName"`, `"event"`, 1)), "record 0: eventName is missing"},
		{"not S3", notify(strings.Replace(good, "ceph:s3", "aws:sqs", 1)), "record 0: eventSource"},
		{"repeated record", notify(good, good), "record 1 repeats record 0"},
	} {
		status, resp := post(t, n, "objects", tt.body)
		msg, _ := resp["message"].(string)
		if status != http.StatusBadRequest || resp["code"] != "invalid_argument" || !strings.Contains(msg, tt.says) || !strings.Contains(msg, "nothing was published") {
			t.Errorf("%s: %d %v, want 400 saying %q", tt.name, status, resp, tt.says)
		}
	}
	st, err := n.TopicStats(context.Background(), "objects")
	if err != nil || st.Total.Stats.Published != 0 {
		t.Fatalf("malformed notifications published %d events (%v)", st.Total.Stats.Published, err)
	}
	if status, resp := post(t, n, "nope", notify(good)); status != http.StatusNotFound || resp["code"] != "not_found" || !strings.Contains(resp["message"].(string), "nope") {
		t.Errorf("unknown topic: %d %v, want 404", status, resp)
	}
	// AWS's test event, sent when a notification is configured.
	if status, resp := post(t, n, "objects", `{"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "fish"}`); status != http.StatusOK || len(ids(t, resp)) != 0 {
		t.Errorf("test event: %d %v, want 200 and no ids", status, resp)
	}
}

// TestEndpointReceivesRecordsWithOpaqueData: a webhook topic pushes the
// S3 records back, as the store sent them, with the topic's opaque_data.
func TestEndpointReceivesRecordsWithOpaqueData(t *testing.T) {
	got := make(chan []byte, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case got <- b:
		default:
		}
	}))
	defer hook.Close()
	n := openNode(t)
	if _, err := n.CreateTopic(context.Background(), "objects", map[string]string{
		"shards": "1", "push_endpoint": hook.URL, "opaque_data": "from-herald"}); err != nil {
		t.Fatal(err)
	}
	if status, resp := post(t, n, "objects", notify(cephRecord("ObjectCreated:Put", "fish", "a.txt", 1))); status != http.StatusOK {
		t.Fatalf("POST: %d %v", status, resp)
	}
	select {
	case body := <-got:
		var doc struct {
			Records []map[string]any `json:"Records"`
		}
		if err := json.Unmarshal(body, &doc); err != nil || len(doc.Records) != 1 {
			t.Fatalf("webhook body %s (%v)", body, err)
		}
		r := doc.Records[0]
		if r["eventSource"] != "ceph:s3" || r["opaqueData"] != "from-herald" || r["eventId"] != "e1" {
			t.Fatalf("webhook record %v, want the Ceph record with opaqueData from-herald", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook received nothing within 30s")
	}
}
