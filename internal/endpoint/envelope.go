package endpoint

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
)

// The JSON envelope is the body herald delivers, documented in docs/integrations.md:
//
//	{"id": "orders/2/17", "topic": "orders", "shard": 2, "offset": 17,
//	 "key": "customer-42", "time": "2026-11-21T10:00:00.123Z",
//	 "headers": {"h": "v"}, "payload": {...}, "opaque_data": "...",
//	 "attempt": 1}
//
// A payload that is valid JSON is embedded as JSON. Any other payload is a
// base64 string, and "payload_encoding": "base64" says so.
type envelope struct {
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
}

// Body returns what is delivered for m: m.Encoded's body if it has one,
// the S3 event records when the payload is an S3 event notification (so
// S3 consumers read them as they would from S3, with opaqueData filled
// in), else herald's JSON envelope.
func Body(m *Message) ([]byte, error) {
	if m.Encoded != nil {
		return m.Encoded.Body, nil
	}
	if b, ok := s3Body(m); ok {
		return b, nil
	}
	return Envelope(m)
}

// Envelope encodes m in herald's JSON envelope.
func Envelope(m *Message) ([]byte, error) {
	e := envelope{
		ID: m.ID, Topic: m.Topic, Shard: m.Shard, Offset: m.Offset, Key: m.Key,
		Time: FormatTime(m.Time), Headers: m.Headers,
		OpaqueData: m.OpaqueData, Attempt: m.Attempt,
	}
	if len(m.Payload) > 0 && json.Valid(m.Payload) {
		e.Payload = compact(m.Payload)
	} else {
		s, _ := json.Marshal(base64.StdEncoding.EncodeToString(m.Payload))
		e.Payload, e.PayloadEncoding = s, "base64"
	}
	return json.Marshal(e)
}

func compact(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}

// s3Sources are the eventSource values of S3 event records: AWS's, Ceph
// RGW's and MinIO's.
var s3Sources = map[string]bool{"aws:s3": true, "ceph:s3": true, "minio:s3": true}

// s3Body recognises an S3 event notification ({"Records": [{"eventSource":
// "aws:s3", ...}]}, or "ceph:s3" or "minio:s3") and returns it with each record's opaqueData set to the
// topic's opaque_data, as S3-compatible stores that push notifications do.
func s3Body(m *Message) ([]byte, bool) {
	if len(m.Payload) == 0 || m.Payload[0] != '{' {
		return nil, false
	}
	var doc struct {
		Records []map[string]json.RawMessage `json:"Records"`
	}
	if err := json.Unmarshal(m.Payload, &doc); err != nil || len(doc.Records) == 0 {
		return nil, false
	}
	for _, r := range doc.Records {
		var source string
		if json.Unmarshal(r["eventSource"], &source) != nil || !s3Sources[source] {
			return nil, false
		}
	}
	if m.OpaqueData != "" {
		od, _ := json.Marshal(m.OpaqueData)
		for _, r := range doc.Records {
			r["opaqueData"] = od
		}
	}
	b, err := json.Marshal(doc)
	return b, err == nil
}
