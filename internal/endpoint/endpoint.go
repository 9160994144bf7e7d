// Package endpoint defines what herald pushes events to: the Endpoint
// interface, the message it sends, herald's JSON envelope, how a failure
// is classified (retry later, or give up and dead-letter), and the TLS
// settings every endpoint over TLS uses. The protocols live in the
// subpackages webhook (HTTP and HTTPS), amqp, kafka and nats.
package endpoint

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Message is one event on its way to an endpoint.
type Message struct {
	ID         string // topic.EventID or topic.NonPersistentEventID: what receivers de-duplicate on
	Topic      string
	Shard      int
	Offset     uint64 // 0 for an event of a non-persistent topic, which has none
	Key        string
	Time       time.Time // publish time
	Headers    map[string]string
	Payload    []byte
	OpaqueData string // the topic's opaque_data attribute
	Attempt    int    // 1 for the first delivery attempt
	// Encoded, when set, is the event already encoded by a wrapper of
	// the endpoint (package envelope) in a format other than herald's:
	// the endpoint delivers it in place of Body's.
	Encoded *Encoded
}

// Encoded is an event encoded for delivery: the body, and the content
// type and headers that go with it where the protocol carries them (the
// HTTP headers of a webhook request; an AMQP message's content type).
// They never replace the X-Herald headers.
type Encoded struct {
	Body        []byte
	ContentType string
	Headers     map[string]string
}

// The headers (or message properties) every protocol sends with an event,
// so consumers find the same metadata whatever carries it.
const (
	HeaderEventID = "X-Herald-Event-Id"
	HeaderTopic   = "X-Herald-Topic"
	HeaderAttempt = "X-Herald-Attempt"
	HeaderKey     = "X-Herald-Key"
)

// HeaderPublishTime carries the publish time, in the form of FormatTime,
// where the protocol's own timestamp must hold something else: a Kafka
// record's timestamp is the time it was sent (see package kafka).
const HeaderPublishTime = "X-Herald-Publish-Time"

// FormatTime formats a publish time as herald delivers it, in the envelope
// and in headers: RFC 3339 in UTC, with as many fractional digits as
// needed.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Endpoint delivers messages to one push destination. Send must be safe
// for concurrent use: the dispatcher sends events of different keys in
// parallel. Send returns nil only once the destination has accepted the
// message (HTTP 2xx, broker confirm, Kafka ack, ...).
type Endpoint interface {
	Send(ctx context.Context, m *Message) error
	Close() error
}

// PermanentError marks a failure that retrying cannot fix (for example an
// HTTP 400): the event goes to the dead-letter queue at once.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a PermanentError.
func Permanent(err error) error { return &PermanentError{Err: err} }

// IsPermanent reports whether err must not be retried.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// RetryAfterError marks a retryable failure whose destination said how
// long to wait before trying again (HTTP 429 or 503 with Retry-After).
//
// Only webhooks return it. AMQP, NATS and Kafka have no such answer: a
// broker that is short of resources pushes back on its connection (AMQP's
// connection.blocked, TCP flow control), and franz-go honours a Kafka
// broker's throttle_time_ms itself, inside Send.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns how long the destination asked to wait before the
// next attempt, if err says.
func RetryAfter(err error) (time.Duration, bool) {
	var r *RetryAfterError
	if errors.As(err, &r) {
		return r.After, true
	}
	return 0, false
}

// MaxRetryAfter bounds the pause a Retry-After can ask for, so that a
// misconfigured endpoint cannot stall delivery for days; the topic's
// time_to_live still applies.
const MaxRetryAfter = time.Hour

// ParseRetryAfter returns the pause a Retry-After header value asks for:
// delay-seconds, or an HTTP date counted from now (RFC 9110, 10.2.3). The
// pause is at most MaxRetryAfter, and 0 for a date already past. A value
// that is neither form is no advice at all: ok is false, and the caller
// backs off as it would without one.
func ParseRetryAfter(value string, now time.Time) (d time.Duration, ok bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(value, 10, 64); err == nil || isRange(err) {
		// A number too large for any clock still asks for a long pause.
		if err != nil || secs > uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), MaxRetryAfter), true
}

func isRange(err error) bool {
	var ne *strconv.NumError
	return errors.As(err, &ne) && ne.Err == strconv.ErrRange
}

// ErrGone marks a failure whose destination said that it no longer exists
// and will not come back: HTTP 410 Gone. The Standard Webhooks
// specification asks senders to disable such an endpoint rather than
// retry it. Test for it with errors.Is.
//
// Only webhooks return it. A missing AMQP exchange, Kafka topic or
// JetStream stream is not the same: the receiver did not say it is gone
// for good, and the operator of the broker can create it again, so those
// stay permanent errors of the one event.
var ErrGone = errors.New("the endpoint no longer exists")

// Gone wraps err, a refusal by a destination that no longer exists, so
// that errors.Is(err, ErrGone) holds. The result is also permanent
// (IsPermanent), so that callers that cannot disable an endpoint treat it
// as any other refusal: the synchronous push of a non-persistent topic
// fails, and a dispatcher without a disable policy dead-letters the event.
func Gone(err error) error { return &PermanentError{Err: &goneError{err}} }

type goneError struct{ err error }

func (e *goneError) Error() string        { return e.err.Error() }
func (e *goneError) Unwrap() error        { return e.err }
func (e *goneError) Is(target error) bool { return target == ErrGone }
