package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"herald/internal/shard"
	"herald/internal/transport"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// A node that holds no replica of a shard (a cluster of more nodes than a
// shard has replicas) still serves it: it relays. A write goes to one of
// the shard's replicas (the Propose rpc), which proposes it through raft like
// any replica; a fetch or a nack goes to a replica flagged as relayed,
// which passes it on to the leader if it does not lead. One hop more than
// asking a replica directly, never a loop: a relayed call is not relayed
// again.

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
	a := &clusterv1.ProposeResponse{ReservationId: res.ReservationID, FirstOffset: res.FirstOffset, Count: uint32(res.Count)}
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
	res := shard.Result{ReservationID: a.GetReservationId(), FirstOffset: a.GetFirstOffset(), Count: int(a.GetCount())}
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

// handleRelayedCalls registers the calls a node that holds no replica of
// a shard makes on one that does.
func (n *Node) handleRelayedCalls(h *transport.Handlers) {
	h.Propose = func(ctx context.Context, c *clusterv1.ProposeRequest) (*clusterv1.ProposeResponse, error) {
		rs, err := n.shardOf(c.GetTopic(), int(c.GetShard()))
		if err != nil {
			return encodeAnswer(shard.Result{}, err), nil
		}
		if !rs.rt.local {
			return encodeAnswer(shard.Result{}, notHostedError(rs.rt)), nil // placements differ for a moment: the caller retries
		}
		cmd, err := shard.UnmarshalCommand(c.GetCommand())
		if err != nil {
			return nil, fmt.Errorf("relayed command does not decode: %w", err)
		}
		return encodeAnswer(n.proposeShard(ctx, rs.rt, &cmd)), nil
	}
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
	req := &clusterv1.ProposeRequest{Topic: s.topic, Shard: uint32(s.index), Command: cmd.AppendBinary(nil)}
	out, err := callLeader(ctx, n, s, to, (*transport.Transport).Propose, req)
	if err != nil {
		return shard.Result{}, fmt.Errorf("%w (relayed to node %d, which holds the shard; the outcome is unknown: retry, with dedup ids when publishing)", err, to)
	}
	return decodeAnswer(out)
}
