package endpoint_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
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

// referenceEnvelope is the envelope as encoding/json writes it from a
// struct: the reference Envelope's hand-written encoding must match byte
// for byte.
func referenceEnvelope(m *endpoint.Message) []byte {
	e := struct {
		ID              string            `json:"id"`
		Topic           string            `json:"topic"`
		Shard           int               `json:"shard"`
		Offset          uint64            `json:"offset"`
		Key             string            `json:"key"`
		Time            string            `json:"time"`
		Headers         map[string]string `json:"headers,omitempty"`
		Payload         json.RawMessage   `json:"payload"`
		PayloadEncoding string            `json:"payload_encoding,omitempty"`
		OpaqueData      string            `json:"opaque_data,omitempty"`
		Attempt         int               `json:"attempt"`
	}{
		ID: m.ID, Topic: m.Topic, Shard: m.Shard, Offset: m.Offset, Key: m.Key,
		Time: endpoint.FormatTime(m.Time), Headers: m.Headers,
		OpaqueData: m.OpaqueData, Attempt: m.Attempt,
	}
	if len(m.Payload) > 0 && json.Valid(m.Payload) {
		e.Payload = m.Payload // Marshal compacts it
	} else {
		e.Payload, _ = json.Marshal(base64.StdEncoding.EncodeToString(m.Payload))
		e.PayloadEncoding = "base64"
	}
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	return b
}

func FuzzEnvelopeMatchesEncodingJSON(f *testing.F) {
	for _, c := range []struct{ key, header, opaque, payload string }{
		{"customer-42", "v", "tenant-7", `{"total": 42}`},
		{"", "", "", ""},
		{"a<b>&c", "x\"y\\z", "\u2028line\u2029", ` [1, "<&>", {"a": "\u2028"}] `},
		{"caf\xc3\xa9 \xff", "tab\there\n", "ctl\x01", "\xff\x00binary"},
		{"k", "\x7f", "é", `{"truncated": `},
		{"k", "h", "o", `"just a string with </script>"`},
		{"k", "h", "o", "\t\n 17 \n"},
		{"k", "h", "o", `{"Records": "not S3"}`},
	} {
		f.Add(c.key, c.header, c.opaque, []byte(c.payload), uint64(17), 3)
	}
	f.Fuzz(func(t *testing.T, key, header, opaque string, payload []byte, offset uint64, attempt int) {
		m := message("")
		m.Key, m.OpaqueData, m.Payload, m.Offset, m.Attempt = key, opaque, payload, offset, attempt
		m.Headers = map[string]string{"z-last": header, "a-first": key, header: opaque}
		if header == "" {
			m.Headers = nil
		}
		got, err := endpoint.Envelope(m)
		if err != nil {
			t.Fatal(err)
		}
		if want := referenceEnvelope(m); !bytes.Equal(got, want) {
			t.Errorf("Envelope wrote\n%s\nencoding/json writes\n%s", got, want)
		}
	})
}

// BenchmarkEnvelope compares Envelope with encoding/json's encoding of the
// same envelope (referenceEnvelope), side by side.
func BenchmarkEnvelope(b *testing.B) {
	binary := bytes.Repeat([]byte{0xff, 0x01, 0x7f, 0x00}, 256)
	object := []byte(`{"order": 42, "customer": "c-42", "items": [` + strings.Repeat(`{"sku": "a-1", "qty": 2}, `, 36) + `{"sku": "z"}]}`)
	encoders := []struct {
		name   string
		encode func(*endpoint.Message) []byte
	}{
		{"Envelope", func(m *endpoint.Message) []byte { b, _ := endpoint.Envelope(m); return b }},
		{"encoding-json", referenceEnvelope},
	}
	for _, payload := range []struct {
		name  string
		bytes []byte
	}{{"binary-1KiB", binary}, {"json-1KiB", object}} {
		for _, enc := range encoders {
			b.Run(payload.name+"/"+enc.name, func(b *testing.B) {
				m := message("")
				m.Payload = payload.bytes
				b.ReportAllocs()
				for b.Loop() {
					if len(enc.encode(m)) == 0 {
						b.Fatal("empty envelope")
					}
				}
			})
		}
	}
}
