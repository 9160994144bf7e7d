package shard

import (
	"errors"
	"fmt"
)

// Errors reported in Result.Err, and by the decoding functions. They are
// wrapped with detail; test for them with errors.Is.
var (
	// ErrQueueFull rejects a Reserve or Publish that would take the shard's
	// pending plus reserved plus dead-letter bytes over the topic's limit.
	// It is transient: the space frees up as consumers acknowledge events,
	// and as dead letters are purged.
	ErrQueueFull = errors.New("shard queue is full; retry later or raise max_queue_bytes")

	// ErrUnknownReservation rejects a Commit of a reservation that does not
	// exist: it was never made, or it was already committed, aborted or
	// expired.
	ErrUnknownReservation = errors.New("shard: unknown reservation")

	// ErrReservationTooSmall rejects a Commit whose events need more bytes,
	// or are more in number, than the reservation holds. The reservation is
	// left in place.
	ErrReservationTooSmall = errors.New("shard: reservation too small")

	// ErrUnknownOffset rejects an Ack naming an offset that has not been
	// assigned yet, and a ReplayDead naming an offset that is not a dead
	// letter.
	ErrUnknownOffset = errors.New("shard: unknown offset")

	// ErrInvalidCommand rejects a malformed command: an unknown op, negative
	// sizes, a Commit or Publish without events, a ReplayDead whose events
	// are not copies of its dead letters in ascending offset order, a
	// TierAdvance beyond its own log index, a log index that does not
	// follow the last applied one, or an encoding that does not decode.
	ErrInvalidCommand = errors.New("shard: invalid command")

	// ErrPartialDuplicate rejects a Publish some but not all of whose
	// events repeat dedup ids published within the window. The Result's
	// Duplicates name them; the proposer publishes the others again on
	// their own. (A Publish all of whose events are duplicates succeeds,
	// appending nothing.)
	ErrPartialDuplicate = errors.New("shard: some events of the publish are duplicates")

	// ErrUnknownSubscription rejects a command for a subscription that has
	// no cursor on the shard: it was never subscribed, or it was
	// unsubscribed (deleted) since.
	ErrUnknownSubscription = errors.New("shard: unknown subscription")

	// ErrInvalidSnapshot is returned by UnmarshalBinary for data that is not
	// a snapshot written by MarshalBinary.
	ErrInvalidSnapshot = errors.New("shard: invalid snapshot")
)

// queueFullError is ErrQueueFull with the numbers behind it. It spells
// out the sizes before the advice so that the message reads naturally
// while still matching ErrQueueFull under errors.Is.
type queueFullError struct {
	pending, reserved, dead, requested, limit int64
}

func (e *queueFullError) Error() string {
	if e.dead == 0 {
		return fmt.Sprintf("shard queue is full (%d pending + %d reserved + %d requested bytes > max_queue_bytes %d); retry later or raise max_queue_bytes",
			e.pending, e.reserved, e.requested, e.limit)
	}
	return fmt.Sprintf("shard queue is full (%d pending + %d reserved + %d dead-letter + %d requested bytes > max_queue_bytes %d); retry later or raise max_queue_bytes, and purge or replay the shard's dead letters",
		e.pending, e.reserved, e.dead, e.requested, e.limit)
}

func (e *queueFullError) Unwrap() error { return ErrQueueFull }
