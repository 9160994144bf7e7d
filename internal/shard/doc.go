// Package shard implements the replicated state machine of one shard of a
// herald topic: an event queue with two-phase commit.
//
// A producer either publishes events in one step (OpPublish), or first
// reserves queue space (OpReserve) and later commits events into the
// reservation (OpCommit) or aborts it (OpAbort). Reservations that are never
// resolved are dropped by OpExpire. Consumers acknowledge events by offset
// (OpAck), in any order; the delivery head advances over the contiguous
// prefix of done offsets.
//
// Push delivery records each failed attempt (OpAttempt), so that attempt
// counts survive a change of leader, and gives up on an event by moving it
// to the shard's dead-letter queue (OpDeadLetter) with a reason and the
// last error. A dead-lettered event is done as far as the head is
// concerned, so later events of its key can go, but its log entry is kept
// and its bytes still count against max_queue_bytes until the dead letter
// is replayed (OpReplayDead: appended again as a new event, with a new
// offset) or purged (OpPurgeDead).
//
// A Publish may give its events client-chosen dedup ids (idempotent
// publish). The shard remembers the ids it appended, with their offsets,
// for the command's DedupWindow before its Time, at most MaxDedupEntries of
// them; a Publish whose every event repeats a remembered id appends
// nothing and returns the earlier offsets (Result.Duplicates), so a
// client's retry of a publish that was committed does not append it again.
// The table is in the snapshot, so restarts and new leaders remember it.
//
// The shard's Raft log is the queue. Events live only in the log entries
// that carry Commit, Publish and ReplayDead commands; State keeps just the
// metadata needed to find them again (which log entry holds which offsets),
// which of them are still pending, attempt counts, dead-letter records, byte
// accounting for flow control, and a 4-byte hash of each held event's key
// (KeyHashOf), with which a pull consumer's fetch tells keys apart without
// reading the log. Snapshots therefore grow with the number
// of pending events, reservations and dead letters, not with payload bytes.
// To read an event back, the host asks Locate for the log index of the entry
// holding it and the event's slot within that entry, and decodes just that
// event from the entry's data with EventAt; a dead letter's record
// (DeadLetter) carries the same location. The host may truncate its
// log below the smaller of CompactIndex and its latest snapshot index.
//
// With tiering, a node's reconciler copies log entries to object storage
// and then advances the shard's last reconciled log index (OpTierAdvance,
// read back with LRO): the entries at or below it can be read from the
// object store. The LRO only rises, and an advance may be repeated; see
// tier.go.
//
// State is deterministic. It does no I/O and never reads the clock: every
// timestamp arrives inside a Command, chosen by the proposer. Replicas that
// apply the same commands at the same log indexes reach byte-identical
// state, as observed through MarshalBinary. SnapshotFunc captures those
// bytes at an applied index for a fraction of MarshalBinary's cost, to be
// encoded later on another goroutine while commands go on being applied.
//
// A rejected command (a Result with a non-nil Err) leaves the state unchanged
// except for Applied, which still advances: the log entry was applied, and
// its effect was to do nothing.
package shard
