// Package envelope encodes herald's events in the formats other systems
// deliver, so that receivers written for those systems read herald's
// deliveries unchanged. SNS wraps an endpoint so that it delivers AWS SNS's
// JSON notification; SNSConfirmation encodes the SubscriptionConfirmation
// SNS sends an HTTP endpoint before its first notification.
//
// The package is pure but for SNS, which only calls the endpoint it wraps.
//
// # SNS notifications
//
// SNS POSTs a JSON document to HTTP endpoints (and delivers the same to
// queues and the like):
//
//	{"Type": "Notification", "MessageId": "orders/2/17",
//	 "TopicArn": "arn:aws:sns:default::orders", "Subject": "...",
//	 "Message": "the payload, as a string",
//	 "Timestamp": "2026-11-21T10:00:00.123Z", "SignatureVersion": "1",
//	 "UnsubscribeURL": "...",
//	 "MessageAttributes": {"color": {"Type": "String", "Value": "red"}}}
//
// with the headers x-amz-sns-message-type, x-amz-sns-message-id,
// x-amz-sns-topic-arn and x-amz-sns-subscription-arn, and Content-Type
// text/plain; charset=UTF-8. herald's MessageId is the event id; Subject is
// the event's Subject header (where the SNS-compatible API's Publish puts
// it) and MessageAttributes are its other headers, each of Type String.
//
// herald cannot sign as SNS does, with an AWS certificate: there is no
// Signature and no SigningCertURL, so a receiver that verifies SNS
// signatures rejects herald's notifications. Sign with herald's own
// signing_secret instead (see package webhook); it covers the body as
// sent.
//
// A notification's Message is a string, and JSON strings hold text: a
// payload that is not valid UTF-8 is base64-encoded, and the message
// attribute herald.payload_encoding, of value base64, says so (as does
// the X-Herald-Payload-Encoding header over HTTP).
//
// With raw delivery (SNS's RawMessageDelivery), the payload itself is
// delivered, byte for byte, with the same headers and
// x-amz-sns-rawdelivery: true; the Subject and message attributes are not
// delivered, as SNS does not deliver them raw.
package envelope

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"herald/internal/endpoint"
)

// The headers SNS sends with every HTTP delivery.
const (
	HeaderMessageType     = "x-amz-sns-message-type"
	HeaderMessageID       = "x-amz-sns-message-id"
	HeaderTopicARN        = "x-amz-sns-topic-arn"
	HeaderSubscriptionARN = "x-amz-sns-subscription-arn"
	// HeaderRawDelivery, "true", marks a raw delivery.
	HeaderRawDelivery = "x-amz-sns-rawdelivery"
)

// HeaderPayloadEncoding says, over HTTP, that a notification's Message is
// its payload base64-encoded; AttributePayloadEncoding says it in the
// notification itself.
const (
	HeaderPayloadEncoding    = "X-Herald-Payload-Encoding"
	AttributePayloadEncoding = "herald.payload_encoding"
)

// contentType is the content type of SNS's deliveries, JSON or raw.
const contentType = "text/plain; charset=UTF-8"

// subjectHeader is the event header holding an SNS Subject.
const subjectHeader = "Subject"

// DefaultZonegroup is the zonegroup of ARNs unless configured, as the
// SNS-compatible API's.
const DefaultZonegroup = "default"

// TopicARN returns the ARN of a topic in the SNS-compatible API:
// arn:aws:sns:<zonegroup>::<topic>. herald has no tenants, so the account
// field is empty.
func TopicARN(zonegroup, topic string) string {
	if zonegroup == "" {
		zonegroup = DefaultZonegroup
	}
	return "arn:aws:sns:" + zonegroup + "::" + topic
}

// SubscriptionARN returns the ARN of a subscription in the SNS-compatible
// API: its topic's ARN, ':' and its name, as SNS's are the topic's ARN and
// an id.
func SubscriptionARN(zonegroup, topic, subscription string) string {
	return TopicARN(zonegroup, topic) + ":" + subscription
}

// SNSInfo describes the subscription whose deliveries SNS encodes.
type SNSInfo struct {
	// Zonegroup is the SNS-compatible API's zonegroup (the server's
	// --sns-zonegroup); empty means DefaultZonegroup.
	Zonegroup string
	// Subscription is the subscription's name; its topic is each
	// message's.
	Subscription string
	// Raw is the subscription's raw_message_delivery: deliver the
	// payload as it is rather than in the JSON notification.
	Raw bool
	// UnsubscribeURL, if set, is where a receiver can end the
	// subscription, given in each notification.
	UnsubscribeURL string
}

// SNS returns an endpoint that delivers each message to inner encoded as
// SNS delivers it: the JSON notification, or with info.Raw the payload,
// and SNS's headers either way (see the package comment). The message
// passed to Send is not modified.
func SNS(inner endpoint.Endpoint, info SNSInfo) endpoint.Endpoint {
	return &snsEndpoint{inner: inner, info: info}
}

type snsEndpoint struct {
	inner endpoint.Endpoint
	info  SNSInfo
}

func (e *snsEndpoint) Send(ctx context.Context, m *endpoint.Message) error {
	enc := *m // the caller's message may be sent again, to be encoded again
	enc.Encoded = Notification(m, e.info)
	return e.inner.Send(ctx, &enc)
}

func (e *snsEndpoint) Close() error { return e.inner.Close() }

// A notification is SNS's JSON notification. Optional fields are
// omitted when empty, as SNS omits them.
type notification struct {
	Type              string                      `json:"Type"`
	MessageID         string                      `json:"MessageId"`
	TopicARN          string                      `json:"TopicArn"`
	Subject           string                      `json:"Subject,omitempty"`
	Message           string                      `json:"Message"`
	Timestamp         string                      `json:"Timestamp"`
	SignatureVersion  string                      `json:"SignatureVersion"`
	UnsubscribeURL    string                      `json:"UnsubscribeURL,omitempty"`
	MessageAttributes map[string]messageAttribute `json:"MessageAttributes,omitempty"`
}

type messageAttribute struct {
	Type  string `json:"Type"`
	Value string `json:"Value"`
}

// Notification returns m encoded as SNS delivers it to the subscription
// info describes: the body, content type and headers.
func Notification(m *endpoint.Message, info SNSInfo) *endpoint.Encoded {
	topicARN := TopicARN(info.Zonegroup, m.Topic)
	headers := map[string]string{
		HeaderMessageType:     "Notification",
		HeaderMessageID:       m.ID,
		HeaderTopicARN:        topicARN,
		HeaderSubscriptionARN: SubscriptionARN(info.Zonegroup, m.Topic, info.Subscription),
	}
	if info.Raw {
		headers[HeaderRawDelivery] = "true"
		return &endpoint.Encoded{Body: m.Payload, ContentType: contentType, Headers: headers}
	}
	n := notification{
		Type:             "Notification",
		MessageID:        m.ID,
		TopicARN:         topicARN,
		Subject:          m.Headers[subjectHeader],
		Timestamp:        Timestamp(m.Time),
		SignatureVersion: "1",
		UnsubscribeURL:   info.UnsubscribeURL,
	}
	n.MessageAttributes = attributesOf(m.Headers)
	if utf8.Valid(m.Payload) {
		n.Message = string(m.Payload)
	} else {
		n.Message = base64.StdEncoding.EncodeToString(m.Payload)
		if n.MessageAttributes == nil {
			n.MessageAttributes = map[string]messageAttribute{}
		}
		n.MessageAttributes[AttributePayloadEncoding] = messageAttribute{Type: "String", Value: "base64"}
		headers[HeaderPayloadEncoding] = "base64"
	}
	return &endpoint.Encoded{Body: marshal(n), ContentType: contentType, Headers: headers}
}

// attributesOf returns an event's headers but Subject as SNS's message
// attributes, or nil if there are none. herald keeps no attribute types,
// so every one is a String.
func attributesOf(headers map[string]string) map[string]messageAttribute {
	var attrs map[string]messageAttribute
	for name, value := range headers {
		if name == subjectHeader {
			continue
		}
		if attrs == nil {
			attrs = make(map[string]messageAttribute, len(headers))
		}
		attrs[name] = messageAttribute{Type: "String", Value: value}
	}
	return attrs
}

// Timestamp formats a time as SNS does: RFC 3339 in UTC, with
// milliseconds.
func Timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// marshal encodes v, a document of strings only, without escaping <, >
// and &, which SNS's documents do not escape either.
func marshal(v any) []byte {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v) // strings and maps of strings: cannot fail
	return []byte(strings.TrimSuffix(b.String(), "\n"))
}

// Confirmation describes a SubscriptionConfirmation.
type Confirmation struct {
	// MessageID identifies the confirmation message.
	MessageID string
	// TopicARN is the ARN of the topic subscribed to.
	TopicARN string
	// Token is what ConfirmSubscription takes.
	Token string
	// SubscribeURL confirms the subscription when visited.
	SubscribeURL string
	Time         time.Time
}

// SNSConfirmation returns the SubscriptionConfirmation SNS POSTs to an HTTP
// endpoint that was subscribed: the body, content type and headers.
func SNSConfirmation(c Confirmation) *endpoint.Encoded {
	doc := struct {
		Type             string `json:"Type"`
		MessageID        string `json:"MessageId"`
		Token            string `json:"Token"`
		TopicARN         string `json:"TopicArn"`
		Message          string `json:"Message"`
		SubscribeURL     string `json:"SubscribeURL"`
		Timestamp        string `json:"Timestamp"`
		SignatureVersion string `json:"SignatureVersion"`
	}{
		Type:      "SubscriptionConfirmation",
		MessageID: c.MessageID,
		Token:     c.Token,
		TopicARN:  c.TopicARN,
		Message: "You have chosen to subscribe to the topic " + c.TopicARN +
			".\nTo confirm the subscription, visit the SubscribeURL included in this message.",
		SubscribeURL:     c.SubscribeURL,
		Timestamp:        Timestamp(c.Time),
		SignatureVersion: "1",
	}
	return &endpoint.Encoded{Body: marshal(doc), ContentType: contentType, Headers: map[string]string{
		HeaderMessageType: "SubscriptionConfirmation",
		HeaderMessageID:   c.MessageID,
		HeaderTopicARN:    c.TopicARN,
	}}
}
