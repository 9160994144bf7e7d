package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"

	"herald/internal/shard"
	"herald/internal/transport"
)

// A node that holds no replica of a shard (a cluster of more nodes than a
// shard has replicas) still serves it: it relays. A write goes to one of
// the shard's replicas (opPropose), which proposes it through raft like
// any replica; a fetch or a nack goes to a replica flagged as relayed,
// which passes it on to the leader if it does not lead. One hop more than
// asking a replica directly, never a loop: a relayed call is not relayed
// again.

const opPropose = "propose"

// proposeCall carries a shard command to a replica.
type proposeCall struct {
	Topic   string `json:"topic"`
	Shard   int    `json:"shard"`
	Command []byte `json:"command"`
}

// proposeAnswer is a shard.Result on the wire. The error travels as its
// message and the sentinel it wraps, so that the relaying node tells
// users the same, and classifies it the same, as the replica would.
type proposeAnswer struct {
	ReservationID uint64            `json:"reservation_id,omitempty"`
	FirstOffset   uint64            `json:"first_offset,omitempty"`
	Count         int               `json:"count,omitempty"`
	Duplicates    []shard.Duplicate `json:"duplicates,omitempty"`
	Err           string            `json:"err,omitempty"`
	Cause         string            `json:"cause,omitempty"`
}

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

func encodeAnswer(res shard.Result, err error) ([]byte, error) {
	a := proposeAnswer{ReservationID: res.ReservationID, FirstOffset: res.FirstOffset, Count: res.Count, Duplicates: res.Duplicates}
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
	return json.Marshal(a)
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

func decodeAnswer(out []byte) (shard.Result, error) {
	var a proposeAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		return shard.Result{}, fmt.Errorf("%w: the replica's answer does not decode: %v", ErrUnavailable, err)
	}
	res := shard.Result{ReservationID: a.ReservationID, FirstOffset: a.FirstOffset, Count: a.Count, Duplicates: a.Duplicates}
	if a.Err != "" {
		cause, ok := causes[a.Cause]
		if !ok {
			cause = ErrUnavailable
		}
		res.Err = &remoteError{msg: a.Err, cause: cause}
	}
	return res, res.Err
}

// handleRelayedCalls registers the calls a node that holds no replica of
// a shard makes on one that does.
func (n *Node) handleRelayedCalls(t *transport.Transport) {
	t.HandleCall(opPropose, func(ctx context.Context, payload []byte) ([]byte, error) {
		var c proposeCall
		if err := json.Unmarshal(payload, &c); err != nil {
			return nil, fmt.Errorf("propose call does not decode: %w", err)
		}
		rs, err := n.shardOf(c.Topic, c.Shard)
		if err != nil {
			return encodeAnswer(shard.Result{}, err)
		}
		if !rs.rt.local {
			return encodeAnswer(shard.Result{}, notHostedError(rs.rt)) // placements differ for a moment: the caller retries
		}
		cmd, err := shard.UnmarshalCommand(c.Command)
		if err != nil {
			return nil, fmt.Errorf("relayed command does not decode: %w", err)
		}
		return encodeAnswer(n.proposeShard(ctx, rs.rt, &cmd))
	})
}

// relayTarget picks a replica of a shard this node does not hold; a
// random one, so that relayed load spreads and a retry after a failure
// likely tries another.
func relayTarget(s *shardRuntime) uint64 {
	return s.replicas[rand.IntN(len(s.replicas))]
}

// relayPropose has a replica of s propose cmd.
func (n *Node) relayPropose(ctx context.Context, s *shardRuntime, cmd *shard.Command) (shard.Result, error) {
	to := relayTarget(s)
	n.forwarded(ctx, "relay")
	out, err := n.callLeader(ctx, s, to, opPropose, proposeCall{Topic: s.topic, Shard: s.index, Command: cmd.AppendBinary(nil)})
	if err != nil {
		return shard.Result{}, fmt.Errorf("%w (relayed to node %d, which holds the shard; the outcome is unknown: retry, with dedup ids when publishing)", err, to)
	}
	return decodeAnswer(out)
}
