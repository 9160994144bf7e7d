package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"herald/internal/controller"
	"herald/internal/host"
	"herald/internal/shard"
)

// TestClassifyGivesEveryErrorItsKind: errors from below the node get the
// node's kind, keep their message and their cause, and are classified
// once; context errors and unknown errors are left alone.
func TestClassifyGivesEveryErrorItsKind(t *testing.T) {
	cases := []struct {
		err  error
		kind error
	}{
		{fmt.Errorf("shard t.1: %w", shard.ErrQueueFull), ErrOverloaded},
		{hostError("t.1", host.ErrOverloaded), ErrOverloaded},
		{hostError("t.1", host.ErrNoLeader), ErrUnavailable},
		{hostError("t.1", fmt.Errorf("group 3: %w", host.ErrClosed)), ErrUnavailable},
		{controller.NotFoundError("t"), ErrNotFound},
		{fmt.Errorf("commit: %w", shard.ErrUnknownReservation), ErrNotFound},
		{controller.ErrTopicExists, ErrExists},
		{controller.ErrShardsFixed, ErrFailedPrecondition},
		{fmt.Errorf("%w: x", ErrPushTopic), ErrFailedPrecondition},
		{fmt.Errorf("%w: event 0", ErrPayloadTooLarge), ErrInvalid},
		{fmt.Errorf("%w: no events", errInvalidRequest), ErrInvalid},
		{shard.ErrReservationTooSmall, ErrInvalid},
	}
	for _, c := range cases {
		err := c.err
		classify(&err)
		if !errors.Is(err, c.kind) {
			t.Errorf("%v: classified as something other than %v", c.err, c.kind)
		}
		if !errors.Is(err, c.err) || err.Error() != c.err.Error() {
			t.Errorf("%v: classified as %v, which lost the cause or changed the message", c.err, err)
		}
		again := err
		classify(&again)
		if again != err {
			t.Errorf("%v: classified twice", c.err)
		}
	}
	for _, err := range []error{context.Canceled, fmt.Errorf("fetch: %w", context.DeadlineExceeded), errors.New("disk on fire")} {
		got := err
		classify(&got)
		if got != err {
			t.Errorf("%v: changed to %v", err, got)
		}
	}
}
