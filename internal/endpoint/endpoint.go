// Package endpoint defines what herald pushes events to: the Endpoint
// interface, the message it sends, herald's JSON envelope, how a failure
// is classified (retry later, or give up and dead-letter), and the TLS
// settings every endpoint over TLS uses. The protocols live in the
// subpackages webhook (HTTP and HTTPS), amqp, kafka and nats.
package endpoint

import (
	"context"
	"errors"
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
