// Package controller implements the replicated state machine of herald's
// controller: the cluster-wide metadata, held by one Raft group of its own
// (ControllerGroup): the topics with their subscriptions, the Raft group
// ids of their shards and where these are placed, the cluster's members,
// and the manifest of the objects that hold shards' tiered log entries.
//
// Proposers encode a Command with Marshal; the Raft host commits it and
// hands it to State.Apply on every replica, which returns a Result to the
// proposer. State does no I/O and never reads the clock (times arrive in
// commands), and it checks every command again on apply, so replicas that
// apply the same log reach identical state, byte for byte in Snapshot.
//
// A rejected command leaves the state unchanged except for Applied, which
// still advances: the log entry was applied, and its effect was nothing.
package controller
