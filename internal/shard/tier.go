package shard

import "fmt"

// Tiering.
//
// A node's reconciler copies ranges of the shard's log entries into
// objects in object storage, records each object in the manifest the
// controller's Raft group holds, and then proposes OpTierAdvance with the
// highest log index it has made durable there: upload first, record
// second, advance last, so that an LRO never names entries the manifest
// cannot find. The shard keeps that index, its last reconciled log index
// (LRO), and nothing else of tiering: which object holds which entries is
// the manifest's business, not the shard's.
//
// An advance is idempotent and monotonic. A new leader's reconciler may
// repeat an advance its predecessor proposed, and advances of one shard
// may be committed out of the order they were proposed in, so an index at
// or below the LRO is a successful no-op rather than an error: the LRO
// never moves back. An index beyond the advance's own log index is
// refused, because the reconciler can only have uploaded entries that
// were applied when it read them.
//
// The LRO does not change CompactIndex, which stays what the queue needs:
// deciding how far local segments may go once the entries are also in the
// object store is the host's (see LRO).

// tierAdvance applies a TierAdvance carried by the log entry at index:
// it raises the LRO to c.From.
func (s *State) tierAdvance(index uint64, c *Command) Result {
	if c.From > index {
		return reject(fmt.Errorf("%w: tier advance to log index %d, beyond its own log index %d: only applied entries can have been tiered",
			ErrInvalidCommand, c.From, index))
	}
	if c.From <= s.lro {
		return Result{} // a repeat, or overtaken by a later advance
	}
	s.lro = c.From
	return Result{}
}

// LRO returns the shard's last reconciled log index: every log entry at
// or below it has been copied to the object store and recorded in the
// controller's manifest, so a host with tiering on may read those entries
// from there and drop them locally, within what its snapshots allow.
// It is 0 while nothing is tiered. It never decreases.
func (s *State) LRO() uint64 { return s.lro }
