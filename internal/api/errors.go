package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"herald/internal/node"
	heraldv1 "herald/proto/herald/v1"
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
	return connectError(err)
}

// connectError is toConnect for an error known not to be nil.
func connectError(err error) *connect.Error {
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
	case errors.Is(err, node.ErrInvalid):
		return connect.CodeInvalidArgument
	case errors.Is(err, node.ErrNotFound):
		return connect.CodeNotFound
	case errors.Is(err, node.ErrExists):
		return connect.CodeAlreadyExists
	case errors.Is(err, node.ErrFailedPrecondition):
		return connect.CodeFailedPrecondition
	case errors.Is(err, node.ErrOverloaded):
		return connect.CodeResourceExhausted
	case errors.Is(err, node.ErrUnavailable):
		return connect.CodeUnavailable
	}
	return connect.CodeInternal
}

// fetchError is toConnect for Fetch. When no shard of the topic could be
// read, the error carries the shards as a FetchResponse detail, so that
// clients can list them as they do beside the events of a partial fetch.
func fetchError(err error) error {
	ce := connectError(err)
	var ue *node.UnreadableError
	if !errors.As(err, &ue) {
		return ce
	}
	// Marshalling a message of ours cannot fail; were it to, the message
	// still names every shard.
	if detail, derr := connect.NewErrorDetail(&heraldv1.FetchResponse{UnreadableShards: unreadableProto(ue.Shards)}); derr == nil {
		ce.AddDetail(detail)
	}
	return ce
}
