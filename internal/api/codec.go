package api

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// jsonCodec is connect's JSON codec, except for what it does with a body
// it cannot read. Connect's discards unknown fields, so that a misspelled
// field ("evnts") is silently dropped and the call fails for another
// reason, or worse succeeds without it; and its errors are the protobuf
// decoder's. jsonCodec refuses unknown fields, and its errors name the
// message, what was wrong, and the fields the message has.
type jsonCodec struct {
	name string // "json" or "json; charset=utf-8", the names connect serves JSON under
}

// jsonCodecs are the handler options that serve JSON with jsonCodec.
func jsonCodecs() connect.HandlerOption {
	return connect.WithHandlerOptions(
		connect.WithCodec(jsonCodec{name: "json"}),
		connect.WithCodec(jsonCodec{name: "json; charset=utf-8"}),
	)
}

func (c jsonCodec) Name() string { return c.name }

func (c jsonCodec) IsBinary() bool { return false }

func (c jsonCodec) Marshal(m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return protojson.Marshal(msg)
}

// MarshalAppend spares connect a copy of every response.
func (c jsonCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, msg)
}

// Unmarshal's error follows connect's "unmarshal message: " in the
// response, and is an invalid_argument.
func (c jsonCodec) Unmarshal(data []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	desc := msg.ProtoReflect().Descriptor()
	if len(data) == 0 {
		return fmt.Errorf("the body is empty; send a JSON object (%s)", fieldsHint(desc))
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(data, msg); err != nil {
		return fmt.Errorf("the body is not a %s in JSON: %s; %s", desc.Name(), decoderWords(err), fieldsHint(desc))
	}
	return nil
}

// decoderWords is the protobuf decoder's error without its "proto: "
// prefix: where in the body, and what was wrong.
func decoderWords(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "proto:")
	s = strings.TrimPrefix(s, "\u00a0") // protojson's errors are unstable on purpose: a space may be non-breaking
	return strings.TrimSpace(strings.TrimPrefix(s, "syntax error"))
}

// fieldsHint says what a body for desc may hold: the JSON names of its
// fields and of the messages in them, and where they are described.
func fieldsHint(desc protoreflect.MessageDescriptor) string {
	h := hint{pkg: desc.ParentFile().Package(), seen: map[protoreflect.FullName]bool{}}
	h.walk(desc)
	if h.bytes {
		h.parts = append(h.parts, "bytes fields such as payload are base64")
	}
	if h.durations {
		h.parts = append(h.parts, `durations are strings such as "5s"`)
	}
	return strings.Join(h.parts, "; ") + "; see docs/api.md and proto/herald/v1/herald.proto"
}

type hint struct {
	pkg              protoreflect.FullName // herald's: messages of other packages are well-known types
	seen             map[protoreflect.FullName]bool
	parts            []string
	bytes, durations bool
}

func (h *hint) walk(md protoreflect.MessageDescriptor) {
	if h.seen[md.FullName()] {
		return
	}
	h.seen[md.FullName()] = true
	fields := md.Fields()
	if fields.Len() == 0 {
		h.parts = append(h.parts, fmt.Sprintf("%s has no fields: send {}", md.Name()))
		return
	}
	names := make([]string, fields.Len())
	var subs []protoreflect.MessageDescriptor
	for i := range fields.Len() {
		f := fields.Get(i)
		names[i] = f.JSONName()
		if f.IsMap() {
			f = f.MapValue()
		}
		switch {
		case f.Kind() == protoreflect.BytesKind:
			h.bytes = true
		case f.Message() == nil:
		case f.Message().FullName() == "google.protobuf.Duration":
			h.durations = true
		case f.Message().ParentFile().Package() == h.pkg:
			subs = append(subs, f.Message())
		}
	}
	h.parts = append(h.parts, fmt.Sprintf("the fields of %s are %s", md.Name(), strings.Join(names, ", ")))
	for _, sub := range subs {
		h.walk(sub)
	}
}
