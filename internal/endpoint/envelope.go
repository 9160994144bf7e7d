package endpoint

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// The JSON envelope is the body herald delivers, documented in docs/integrations.md:
//
//	{"id": "orders/2/17", "topic": "orders", "shard": 2, "offset": 17,
//	 "key": "customer-42", "time": "2026-11-21T10:00:00.123Z",
//	 "headers": {"h": "v"}, "payload": {...}, "opaque_data": "...",
//	 "attempt": 1}
//
// A payload that is valid JSON is embedded as JSON. Any other payload is a
// base64 string, and "payload_encoding": "base64" says so. The bytes are
// those encoding/json gives the struct of these fields (envelope_test.go
// keeps it as the reference): the same order, headers sorted by name,
// strings and the embedded payload with its HTML-safe escaping.

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

// Envelope encodes m in herald's JSON envelope. It writes the JSON
// itself: through json.Marshal, with the payload validated and compacted
// twice, building envelopes took a fifth of a webhook drain's CPU.
func Envelope(m *Message) ([]byte, error) {
	b := make([]byte, 0, envelopeSize(m))
	b = append(b, `{"id":`...)
	b = appendString(b, m.ID)
	b = append(b, `,"topic":`...)
	b = appendString(b, m.Topic)
	b = append(b, `,"shard":`...)
	b = strconv.AppendInt(b, int64(m.Shard), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendUint(b, m.Offset, 10)
	b = append(b, `,"key":`...)
	b = appendString(b, m.Key)
	b = append(b, `,"time":`...)
	b = appendString(b, FormatTime(m.Time))
	if len(m.Headers) > 0 {
		b = append(b, `,"headers":`...)
		b = appendHeaders(b, m.Headers)
	}
	b = append(b, `,"payload":`...)
	b, embedded := appendJSONPayload(b, m.Payload)
	if !embedded {
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, m.Payload)
		b = append(b, `","payload_encoding":"base64"`...)
	}
	if m.OpaqueData != "" {
		b = append(b, `,"opaque_data":`...)
		b = appendString(b, m.OpaqueData)
	}
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(m.Attempt), 10)
	return append(b, '}'), nil
}

// envelopeSize is at least the size of m's envelope when its strings need
// no escaping, so that it is built in one allocation: 256 bytes hold the
// field names, numbers, time and punctuation.
func envelopeSize(m *Message) int {
	n := 256 + len(m.ID) + len(m.Topic) + len(m.Key) + len(m.OpaqueData) + base64.StdEncoding.EncodedLen(len(m.Payload))
	for name, value := range m.Headers {
		n += len(name) + len(value) + 6
	}
	return n
}

// appendString appends s as a JSON string, escaped as encoding/json
// escapes it. Most strings (ids, topics, keys) need no escaping and are
// copied as they are.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendHeaders appends headers as a JSON object, names sorted.
func appendHeaders(b []byte, headers map[string]string) []byte {
	b = append(b, '{')
	for i, name := range slices.Sorted(maps.Keys(headers)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, name)
		b = append(b, ':')
		b = appendString(b, headers[name])
	}
	return append(b, '}')
}

// appendJSONPayload appends payload compacted, if it is JSON, and says
// whether it was. Characters that are unsafe in HTML are escaped inside its
// strings, as encoding/json escapes them.
func appendJSONPayload(b, payload []byte) ([]byte, bool) {
	if len(payload) == 0 {
		return b, false
	}
	if !maybeJSON(payload) {
		return b, false // spares Compact growing b by the payload's size
	}
	start := len(b)
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, payload); err != nil {
		return b[:start], false
	}
	b = buf.Bytes()
	if bytes.ContainsAny(b[start:], "<>&\u2028\u2029") {
		compacted := bytes.Clone(b[start:])
		buf = bytes.NewBuffer(b[:start])
		json.HTMLEscape(buf, compacted)
		b = buf.Bytes()
	}
	return b, true
}

// maybeJSON says whether payload starts as a JSON value may start: most
// binary and text payloads are told from JSON by their first byte.
func maybeJSON(payload []byte) bool {
	trimmed := bytes.TrimLeft(payload, " \t\r\n")
	return len(trimmed) > 0 && strings.IndexByte(`{["-0123456789tfn`, trimmed[0]) >= 0
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
