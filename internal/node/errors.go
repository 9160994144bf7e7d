package node

import (
	"context"
	"errors"

	"herald/internal/controller"
	"herald/internal/endpoint"
	"herald/internal/host"
	"herald/internal/shard"
	"herald/internal/topic"
)

// The kinds of error a Node returns. Every error from a Node method either
// matches one of them with errors.Is, or is a context error, or is an
// internal failure; its message says what was wrong and what to do. The
// errors of the packages below the node stay in the chain, for callers
// that need the detail.
var (
	// ErrInvalid: the request is malformed (a bad name, attribute, id or
	// size); retrying it unchanged fails again.
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound: the topic, subscription, event or reservation does not
	// exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: the topic or subscription already exists.
	ErrExists = errors.New("already exists")
	// ErrFailedPrecondition: the request is valid but the topic is not in
	// a state that allows it (its shard count is fixed, it pushes, its
	// endpoint refused the event, it has as many subscriptions as it may).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrOverloaded: a queue is full or a shard has too much in flight;
	// retry later.
	ErrOverloaded = errors.New("overloaded")
	// ErrUnavailable: the shard or controller cannot serve right now.
	ErrUnavailable = errors.New("unavailable")
)

// Errors that name a cause within a kind.
var (
	// ErrPayloadTooLarge (ErrInvalid): an event's payload is over the
	// limit.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrPushTopic (ErrFailedPrecondition): pull consumption of a topic
	// that pushes.
	ErrPushTopic = errors.New("topic pushes to an endpoint")
	// ErrPushSubscription (ErrFailedPrecondition): pull consumption of a
	// subscription that pushes.
	ErrPushSubscription = errors.New("pull from a push subscription")
	// ErrEndpointRejected (ErrFailedPrecondition): a non-persistent
	// topic's endpoint refused an event for good (for example HTTP 400).
	ErrEndpointRejected = errors.New("endpoint rejected the event")
	// ErrSubscriptionLimit (ErrFailedPrecondition): the topic has as many
	// subscriptions as it may.
	ErrSubscriptionLimit = controller.ErrSubscriptionLimit
)

// errInvalidRequest marks requests malformed in a way the topic package
// does not cover (empty batch, bad id, wrong shard for a key).
var errInvalidRequest = topic.ErrInvalid

// kinds maps the errors of the packages below to the node's kinds; the
// first match wins.
var kinds = []struct {
	kind  error
	cause []error
}{
	{ErrInvalid, []error{topic.ErrInvalid, endpoint.ErrRefused, ErrPayloadTooLarge, shard.ErrReservationTooSmall, shard.ErrInvalidCommand}},
	{ErrNotFound, []error{controller.ErrTopicNotFound, controller.ErrSubscriptionNotFound, controller.ErrNodeNotFound, shard.ErrUnknownOffset, shard.ErrUnknownReservation}},
	{ErrExists, []error{controller.ErrTopicExists, controller.ErrSubscriptionExists, controller.ErrNodeExists}},
	{ErrFailedPrecondition, []error{controller.ErrShardsFixed, controller.ErrMembership, controller.ErrSubscriptionLimit, controller.ErrDefaultSubscription,
		ErrPushTopic, ErrPushSubscription, ErrEndpointRejected}},
	{ErrOverloaded, []error{shard.ErrQueueFull, host.ErrOverloaded}},
	{ErrUnavailable, []error{host.ErrNoLeader, host.ErrClosed, host.ErrOutcomeUnknown, host.ErrNotApplied}},
}

// kindError gives an error its kind without changing its message.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// classify gives *err the node's kind of error it is, once, at the
// boundary: exported methods defer it.
func classify(err *error) {
	if *err == nil || errors.Is(*err, context.Canceled) || errors.Is(*err, context.DeadlineExceeded) {
		return
	}
	for _, k := range kinds {
		if errors.Is(*err, k.kind) {
			return // already of a kind
		}
	}
	for _, k := range kinds {
		for _, cause := range k.cause {
			if errors.Is(*err, cause) {
				*err = &kindError{kind: k.kind, err: *err}
				return
			}
		}
	}
}
