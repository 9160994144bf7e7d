package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"herald/internal/controller"
	"herald/internal/host"
	"herald/internal/node"
	"herald/internal/shard"
	"herald/internal/topic"
)

// retryAfterSeconds is the advice sent with retryable overload errors.
const retryAfterSeconds = "1"

// toConnect gives an error the status code that tells the client what kind
// of failure it is; the message, written where the error arose, says what
// was wrong and what to do.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	ce := connect.NewError(codeOf(err), err)
	if ce.Code() == connect.CodeResourceExhausted || ce.Code() == connect.CodeUnavailable {
		ce.Meta().Set("Retry-After", retryAfterSeconds)
	}
	return ce
}

func codeOf(err error) connect.Code {
	switch {
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, topic.ErrInvalid), errors.Is(err, node.ErrPayloadTooLarge),
		errors.Is(err, shard.ErrReservationTooSmall), errors.Is(err, shard.ErrInvalidCommand):
		return connect.CodeInvalidArgument
	case errors.Is(err, controller.ErrTopicNotFound), errors.Is(err, node.ErrNotFound),
		errors.Is(err, shard.ErrUnknownOffset), errors.Is(err, shard.ErrUnknownReservation):
		return connect.CodeNotFound
	case errors.Is(err, controller.ErrTopicExists):
		return connect.CodeAlreadyExists
	case errors.Is(err, controller.ErrShardsFixed), errors.Is(err, node.ErrPushTopic), errors.Is(err, node.ErrEndpointRejected):
		return connect.CodeFailedPrecondition
	case errors.Is(err, shard.ErrQueueFull), errors.Is(err, host.ErrOverloaded):
		return connect.CodeResourceExhausted
	case errors.Is(err, node.ErrUnavailable), errors.Is(err, host.ErrNoLeader), errors.Is(err, host.ErrClosed):
		return connect.CodeUnavailable
	}
	return connect.CodeInternal
}
