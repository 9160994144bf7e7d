package node

import (
	"context"
	"errors"

	"herald/internal/shard"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// A shard.Result travels as a ProposeResponse. The error travels as its
// message and the sentinel it wraps, so that the relaying node tells
// users the same, and classifies it the same, as the replica would.

// causes are the sentinels an answer's error may wrap, by name.
var causes = map[string]error{
	"queue_full":           shard.ErrQueueFull,
	"unknown_reservation":  shard.ErrUnknownReservation,
	"reservation_small":    shard.ErrReservationTooSmall,
	"unknown_offset":       shard.ErrUnknownOffset,
	"invalid_command":      shard.ErrInvalidCommand,
	"partial_duplicate":    shard.ErrPartialDuplicate,
	"invalid":              ErrInvalid,
	"not_found":            ErrNotFound,
	"failed_precondition":  ErrFailedPrecondition,
	"overloaded":           ErrOverloaded,
	"unavailable":          ErrUnavailable,
	"exists":               ErrExists,
	"payload_too_large":    ErrPayloadTooLarge,
	"push_topic":           ErrPushTopic,
	"endpoint_rejected":    ErrEndpointRejected,
	"deadline_or_canceled": context.DeadlineExceeded,
}

// remoteError is an error a replica answered: its message, and the
// sentinel it wrapped there.
type remoteError struct {
	msg   string
	cause error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.cause }

func encodeAnswer(res shard.Result, err error) *clusterv1.ProposeResponse {
	a := &clusterv1.ProposeResponse{ReservationId: res.ReservationID, FirstOffset: res.FirstOffset, Count: uint32(res.Count), Time: res.Time}
	for _, d := range res.Duplicates {
		a.Duplicates = append(a.Duplicates, &clusterv1.Duplicate{Slot: uint32(d.Slot), Offset: d.Offset})
	}
	if err != nil {
		classify(&err)
		a.Err, a.Cause = err.Error(), "unavailable"
		for name, c := range causes {
			// Shard sentinels are more precise than the node's kinds.
			if errors.Is(err, c) && (a.Cause == "unavailable" || isShardCause(c)) {
				a.Cause = name
			}
		}
	}
	return a
}

func isShardCause(err error) bool {
	for _, c := range []error{shard.ErrQueueFull, shard.ErrUnknownReservation, shard.ErrReservationTooSmall,
		shard.ErrUnknownOffset, shard.ErrInvalidCommand, shard.ErrPartialDuplicate} {
		if err == c {
			return true
		}
	}
	return false
}

func decodeAnswer(a *clusterv1.ProposeResponse) (shard.Result, error) {
	res := shard.Result{ReservationID: a.GetReservationId(), FirstOffset: a.GetFirstOffset(), Count: int(a.GetCount()), Time: a.GetTime()}
	for _, d := range a.GetDuplicates() {
		res.Duplicates = append(res.Duplicates, shard.Duplicate{Slot: int(d.GetSlot()), Offset: d.GetOffset()})
	}
	if a.Err != "" {
		cause, ok := causes[a.Cause]
		if !ok {
			cause = ErrUnavailable
		}
		res.Err = &remoteError{msg: a.Err, cause: cause}
	}
	return res, res.Err
}
