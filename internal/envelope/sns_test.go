package envelope

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"time"

	"herald/internal/endpoint"
)

// fake records what it is sent and answers err.
type fake struct {
	sent   []*endpoint.Message
	err    error
	closed bool
}

func (f *fake) Send(_ context.Context, m *endpoint.Message) error {
	f.sent = append(f.sent, m)
	return f.err
}

func (f *fake) Close() error { f.closed = true; return nil }

func message() *endpoint.Message {
	return &endpoint.Message{
		ID: "orders/2/17", Topic: "orders", Shard: 2, Offset: 17, Key: "customer-42",
		Time:    time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.FixedZone("CET", 3600)),
		Headers: map[string]string{"Subject": "new order", "color": "red"},
		Payload: []byte(`{"total": 42, "note": "<a&b>"}`), Attempt: 1,
	}
}

// sent sends m through SNS(info) and returns what the inner endpoint got.
func sent(t *testing.T, info SNSInfo, m *endpoint.Message) *endpoint.Message {
	t.Helper()
	inner := &fake{}
	if err := SNS(inner, info).Send(context.Background(), m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if len(inner.sent) != 1 || inner.sent[0].Encoded == nil {
		t.Fatalf("the inner endpoint got %+v, want one encoded message", inner.sent)
	}
	return inner.sent[0]
}

func TestNotification(t *testing.T) {
	m := message()
	info := SNSInfo{Zonegroup: "zg1", Subscription: "sns-abc", UnsubscribeURL: "http://herald/?Action=Unsubscribe"}
	got := sent(t, info, m)
	if m.Encoded != nil {
		t.Error("Send modified the caller's message")
	}
	if got.ID != m.ID || got.Key != m.Key || string(got.Payload) != string(m.Payload) {
		t.Errorf("the inner endpoint got another event: %+v", got)
	}
	enc := got.Encoded
	var doc map[string]any
	if err := json.Unmarshal(enc.Body, &doc); err != nil {
		t.Fatalf("body %s: %v", enc.Body, err)
	}
	want := map[string]any{
		"Type": "Notification", "MessageId": "orders/2/17", "TopicArn": "arn:aws:sns:zg1::orders",
		"Subject": "new order", "Message": `{"total": 42, "note": "<a&b>"}`,
		"Timestamp": "2026-11-21T09:00:00.123Z", "SignatureVersion": "1",
		"UnsubscribeURL":    "http://herald/?Action=Unsubscribe",
		"MessageAttributes": map[string]any{"color": map[string]any{"Type": "String", "Value": "red"}},
	}
	if !equalJSON(doc, want) {
		t.Errorf("notification\n%s\nwant\n%v", enc.Body, want)
	}
	wantHeaders := map[string]string{
		"x-amz-sns-message-type": "Notification", "x-amz-sns-message-id": "orders/2/17",
		"x-amz-sns-topic-arn": "arn:aws:sns:zg1::orders", "x-amz-sns-subscription-arn": "arn:aws:sns:zg1::orders:sns-abc",
	}
	if !maps.Equal(enc.Headers, wantHeaders) || enc.ContentType != "text/plain; charset=UTF-8" {
		t.Errorf("headers %v, content type %q", enc.Headers, enc.ContentType)
	}
}

func TestNotificationOmitsWhatIsNotThere(t *testing.T) {
	m := message()
	m.Headers = nil
	m.Payload = nil
	var doc map[string]any
	if err := json.Unmarshal(sent(t, SNSInfo{Subscription: "s"}, m).Encoded.Body, &doc); err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{"Subject", "MessageAttributes", "UnsubscribeURL", "Signature", "SigningCertURL"} {
		if _, ok := doc[absent]; ok {
			t.Errorf("notification has %s: %v", absent, doc)
		}
	}
	if doc["Message"] != "" || doc["TopicArn"] != "arn:aws:sns:default::orders" {
		t.Errorf("notification %v", doc)
	}
}

// A notification's Message is a JSON string: a payload that is not UTF-8
// text is base64-encoded, and says so.
func TestNotificationBinaryPayload(t *testing.T) {
	m := message()
	m.Payload = []byte{0xff, 0xfe, 0, '"', '\n'}
	enc := sent(t, SNSInfo{Subscription: "s"}, m).Encoded
	var doc struct {
		Message           string
		MessageAttributes map[string]struct{ Type, Value string }
	}
	if err := json.Unmarshal(enc.Body, &doc); err != nil {
		t.Fatalf("body %q: %v", enc.Body, err)
	}
	if b, err := base64.StdEncoding.DecodeString(doc.Message); err != nil || string(b) != string(m.Payload) {
		t.Errorf("Message %q does not decode to the payload (%v)", doc.Message, err)
	}
	if a := doc.MessageAttributes[AttributePayloadEncoding]; a.Value != "base64" || a.Type != "String" {
		t.Errorf("MessageAttributes %v lack %s", doc.MessageAttributes, AttributePayloadEncoding)
	}
	if enc.Headers[HeaderPayloadEncoding] != "base64" {
		t.Errorf("headers %v lack %s", enc.Headers, HeaderPayloadEncoding)
	}
	// Text with control characters and quotes is text: escaped, not encoded.
	m.Payload = []byte("line\n\"quoted\"\t\u00e9")
	enc = sent(t, SNSInfo{Subscription: "s"}, m).Encoded
	if err := json.Unmarshal(enc.Body, &doc); err != nil || doc.Message != string(m.Payload) {
		t.Errorf("Message %q, want %q (%v)", doc.Message, m.Payload, err)
	}
	if _, ok := enc.Headers[HeaderPayloadEncoding]; ok {
		t.Errorf("a text payload is marked as base64")
	}
}

func TestRaw(t *testing.T) {
	m := message()
	m.Payload = []byte{0xff, 'x'}
	enc := sent(t, SNSInfo{Subscription: "s", Raw: true}, m).Encoded
	if string(enc.Body) != string(m.Payload) {
		t.Errorf("raw body %q, want the payload %q", enc.Body, m.Payload)
	}
	if enc.Headers[HeaderMessageType] != "Notification" || enc.Headers[HeaderSubscriptionARN] != "arn:aws:sns:default::orders:s" ||
		enc.Headers[HeaderRawDelivery] != "true" {
		t.Errorf("raw headers %v", enc.Headers)
	}
}

func TestSNSPassesErrorsAndClose(t *testing.T) {
	boom := endpoint.Permanent(errors.New("boom"))
	inner := &fake{err: boom}
	e := SNS(inner, SNSInfo{Subscription: "s"})
	if err := e.Send(context.Background(), message()); !errors.Is(err, boom) || !endpoint.IsPermanent(err) {
		t.Errorf("Send = %v, want the inner endpoint's error", err)
	}
	if e.Close(); !inner.closed {
		t.Error("Close did not close the inner endpoint")
	}
}

func TestSNSConfirmation(t *testing.T) {
	enc := SNSConfirmation(Confirmation{
		MessageID: "m-1", TopicARN: "arn:aws:sns:default::orders", Token: "tok",
		SubscribeURL: "http://herald:7600/?Action=ConfirmSubscription&TopicArn=x&Token=tok",
		Time:         time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC),
	})
	var doc map[string]any
	if err := json.Unmarshal(enc.Body, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"Type": "SubscriptionConfirmation", "MessageId": "m-1", "Token": "tok", "TopicArn": "arn:aws:sns:default::orders",
		"Message":      "You have chosen to subscribe to the topic arn:aws:sns:default::orders.\nTo confirm the subscription, visit the SubscribeURL included in this message.",
		"SubscribeURL": "http://herald:7600/?Action=ConfirmSubscription&TopicArn=x&Token=tok",
		"Timestamp":    "2026-11-21T10:00:00.000Z", "SignatureVersion": "1",
	}
	if !equalJSON(doc, want) {
		t.Errorf("confirmation %s", enc.Body)
	}
	if enc.Headers[HeaderMessageType] != "SubscriptionConfirmation" || enc.Headers[HeaderTopicARN] != "arn:aws:sns:default::orders" ||
		enc.Headers[HeaderMessageID] != "m-1" {
		t.Errorf("confirmation headers %v", enc.Headers)
	}
}

func equalJSON(got, want map[string]any) bool {
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	return string(a) == string(b)
}
