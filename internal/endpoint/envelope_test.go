package endpoint_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"herald/internal/endpoint"
)

func message(payload string) *endpoint.Message {
	return &endpoint.Message{
		ID:         "orders/2/17",
		Topic:      "orders",
		Shard:      2,
		Offset:     17,
		Key:        "customer-42",
		Time:       time.Date(2026, 11, 21, 11, 0, 0, 123e6, time.FixedZone("CET", 3600)),
		Headers:    map[string]string{"h": "v"},
		Payload:    []byte(payload),
		OpaqueData: "tenant-7",
		Attempt:    1,
	}
}

// decode decodes b as one JSON object, field by field.
func decode(t *testing.T, b []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s is not a JSON object: %v", b, err)
	}
	return m
}

func TestEnvelopeJSONPayload(t *testing.T) {
	b, err := endpoint.Envelope(message("{\n  \"total\": 42,\n  \"items\": [1, 2]\n}"))
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, b)
	for field, want := range map[string]string{
		"id":          `"orders/2/17"`,
		"topic":       `"orders"`,
		"shard":       `2`,
		"offset":      `17`,
		"key":         `"customer-42"`,
		"time":        `"2026-11-21T10:00:00.123Z"`, // in UTC
		"headers":     `{"h":"v"}`,
		"payload":     `{"total":42,"items":[1,2]}`, // embedded as JSON, compacted
		"opaque_data": `"tenant-7"`,
		"attempt":     `1`,
	} {
		if string(got[field]) != want {
			t.Errorf("%s = %s, want %s", field, got[field], want)
		}
	}
	if enc, ok := got["payload_encoding"]; ok {
		t.Errorf("payload_encoding = %s for a JSON payload, want none", enc)
	}
}

func TestEnvelopeBinaryPayload(t *testing.T) {
	for _, payload := range []string{"\xff\x00binary", "plain text", `{"truncated": `, ""} {
		b, err := endpoint.Envelope(message(payload))
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Payload         string `json:"payload"`
			PayloadEncoding string `json:"payload_encoding"`
		}
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatalf("payload %q: envelope %s: %v", payload, b, err)
		}
		dec, err := base64.StdEncoding.DecodeString(env.Payload)
		if env.PayloadEncoding != "base64" || err != nil || string(dec) != payload {
			t.Errorf("payload %q sent as %q with payload_encoding %q, want it base64-encoded", payload, env.Payload, env.PayloadEncoding)
		}
	}
}

func TestEnvelopeOmitsEmpty(t *testing.T) {
	m := message(`{}`)
	m.Headers, m.OpaqueData = nil, ""
	b, err := endpoint.Envelope(m)
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, b)
	for _, field := range []string{"headers", "opaque_data"} {
		if v, ok := got[field]; ok {
			t.Errorf("%s = %s, want it left out when empty", field, v)
		}
	}
}

const s3Event = `{"Records": [
	{"eventVersion": "2.2", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
	 "s3": {"bucket": {"name": "photos"}, "object": {"key": "cat.jpg", "size": 1024}}},
	{"eventVersion": "2.2", "eventSource": "aws:s3", "eventName": "ObjectRemoved:Delete",
	 "s3": {"bucket": {"name": "photos"}, "object": {"key": "dog.jpg"}}}
]}`

type s3Records struct {
	Records []struct {
		EventSource string `json:"eventSource"`
		EventName   string `json:"eventName"`
		OpaqueData  string `json:"opaqueData"`
		S3          struct {
			Object struct {
				Key string `json:"key"`
			} `json:"object"`
		} `json:"s3"`
	} `json:"Records"`
}

func TestBodyS3Event(t *testing.T) {
	b, err := endpoint.Body(message(s3Event))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := decode(t, b)["id"]; ok {
		t.Fatalf("an S3 event was wrapped in the envelope: %s", b)
	}
	var got s3Records
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Records) != 2 {
		t.Fatalf("%d records, want 2: %s", len(got.Records), b)
	}
	for i, want := range []struct{ name, key string }{{"ObjectCreated:Put", "cat.jpg"}, {"ObjectRemoved:Delete", "dog.jpg"}} {
		r := got.Records[i]
		if r.EventSource != "aws:s3" || r.EventName != want.name || r.S3.Object.Key != want.key || r.OpaqueData != "tenant-7" {
			t.Errorf("record %d = %+v, want %s of %s with opaqueData tenant-7", i, r, want.name, want.key)
		}
	}
}

func TestBodyS3EventWithoutOpaqueData(t *testing.T) {
	m := message(s3Event)
	m.OpaqueData = ""
	b, err := endpoint.Body(m)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("opaqueData")) {
		t.Errorf("records got an opaqueData the topic does not have: %s", b)
	}
	var got s3Records
	if err := json.Unmarshal(b, &got); err != nil || len(got.Records) != 2 {
		t.Errorf("body %s is not the 2 S3 records (%v)", b, err)
	}
}

func TestBodyS3FromCephAndMinIO(t *testing.T) {
	for _, source := range []string{"ceph:s3", "minio:s3"} {
		m := message(`{"Records": [{"eventSource": "` + source + `", "eventName": "ObjectCreated:Put"}]}`)
		m.OpaqueData = "od"
		b, err := endpoint.Body(m)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"Records":[{"eventName":"ObjectCreated:Put","eventSource":"` + source + `","opaqueData":"od"}]}`
		if string(b) != want {
			t.Errorf("%s: Body = %s, want %s", source, b, want)
		}
	}
}

// Only S3 event notifications are delivered as they are: any other
// payload, even one with "Records", gets the envelope.
func TestBodyNotS3(t *testing.T) {
	for name, payload := range map[string]string{
		"SQS records":    `{"Records": [{"eventSource": "aws:sqs", "body": "x"}]}`,
		"other s3":       `{"Records": [{"eventSource": "other:s3"}]}`,
		"mixed records":  `{"Records": [{"eventSource": "aws:s3"}, {"eventSource": "aws:sns"}]}`,
		"no source":      `{"Records": [{"eventName": "ObjectCreated:Put"}]}`,
		"no records":     `{"Records": []}`,
		"records string": `{"Records": "aws:s3"}`,
		"plain JSON":     `{"total": 42}`,
		"JSON array":     `[{"eventSource": "aws:s3"}]`,
		"binary":         "\xff\x00",
	} {
		t.Run(name, func(t *testing.T) {
			m := message(payload)
			b, err := endpoint.Body(m)
			if err != nil {
				t.Fatal(err)
			}
			want, err := endpoint.Envelope(m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, want) {
				t.Errorf("Body = %s, want the envelope %s", b, want)
			}
		})
	}
}
