package node

import (
	"maps"
	"slices"
	"sync"

	"herald/internal/consume"
	"herald/internal/host"
	"herald/internal/shard"
)

// Reservations expire by a command the shard's leader proposes. Few shards
// hold reservations at any time, so the node keeps the set of those that
// do, and checks only them: a node with ten thousand shards must not read
// every one every second to find the few with something to expire.

// shardMachine is a shard's state machine as the node runs it: a
// shard.Machine that puts its group in the node's set of shards holding
// reservations when it applies or restores one, and in the set of shards
// that retain events (see retention.go) likewise. Only the group's
// goroutine calls it (Apply, Restore, and View functions), so tracked
// and retains need no lock, and a shard leaves a set
// (groupReservations.oldestReservation and retention, in a View) in
// order with the applies that put it there.
type shardMachine struct {
	*shard.Machine
	group     uint64
	reserving *groupSet
	tracked   bool // the group is in reserving
	retaining *groupSet
	retains   bool // the group is in retaining

	beforeOpen func(group uint64) // Config.BeforeShardOpen; called at the first Restore
	restored   bool

	leases *consume.Leases // hears of applied commands (acks end leases) and of restores

	tier *tiering // nil unless the node tiers
}

func newShardMachine(group uint64, leases *consume.Leases, reserving, retaining *groupSet, tier *tiering, beforeOpen func(group uint64)) *shardMachine {
	return &shardMachine{Machine: shard.NewMachine(), group: group, reserving: reserving, retaining: retaining, beforeOpen: beforeOpen, leases: leases, tier: tier}
}

// TieredBelow is the index below which every entry the shard needs is in
// the object store (host.Tiered): one past its LRO, on a node that
// tiers.
func (m *shardMachine) TieredBelow() uint64 {
	if lro := m.Machine.LRO(); m.tier != nil && lro > 0 {
		return lro + 1
	}
	return 0
}

// cachedFrom is the lowest log index of the shard worth keeping in the
// node's cache of entries (consume.Leases.Cached): the lowest any
// subscription still reads, and on a node that tiers, past the LRO: the
// entries below are in the object store, read back through the tier's
// own cache, as the local log's retention keeps only the newest on disk.
func (m *shardMachine) cachedFrom() uint64 {
	return max(m.CompactIndex(), m.TieredBelow())
}

// LocalRetention is how many bytes of the shard's newest log stay on the
// local disk (host.Tiered).
func (m *shardMachine) LocalRetention() int64 {
	if m.tier == nil {
		return 0
	}
	return m.tier.localRetention(m.group)
}

// machineOf returns the shard machine a View of a shard's group sees.
func machineOf(sm host.StateMachine) *shard.Machine { return sm.(*shardMachine).Machine }

func (m *shardMachine) Apply(index uint64, data []byte) any {
	cmd, err := shard.UnmarshalCommand(data)
	r := m.Machine.ApplyDecoded(index, &cmd, err)
	m.track()
	m.leases.Applied(&cmd, r)
	m.leases.Cached(index, cmd, r, m.cachedFrom())
	return r
}

func (m *shardMachine) Restore(data []byte) error {
	if !m.restored && m.beforeOpen != nil {
		m.beforeOpen(m.group)
	}
	m.restored = true
	err := m.Machine.Restore(data)
	m.track()
	m.leases.Restored()
	return err
}

// track adds the group to the set once it holds a reservation, and to
// the retaining set once it retains events. While it is not in the set it
// holds none, so the check is a look at an empty map (and, for retention,
// at a flag).
func (m *shardMachine) track() {
	if !m.retains && m.retaining != nil && m.Retaining() {
		m.retains = true
		m.retaining.add(m.group)
	}
	if m.tracked {
		return
	}
	if _, ok := m.OldestReservation(); ok {
		m.tracked = true
		m.reserving.add(m.group)
	}
}

// untrack takes the group out of the set: it holds no reservation.
func (m *shardMachine) untrack() {
	m.tracked = false
	m.reserving.remove(m.group)
}

// groupSet is a set of groups: those that hold reservations, those that
// retain events (see retention.go).
type groupSet struct {
	mu     sync.Mutex
	groups map[uint64]struct{}
}

func newGroupSet() *groupSet {
	return &groupSet{groups: make(map[uint64]struct{})}
}

func (r *groupSet) add(group uint64) {
	r.mu.Lock()
	r.groups[group] = struct{}{}
	r.mu.Unlock()
}

func (r *groupSet) remove(group uint64) {
	r.mu.Lock()
	delete(r.groups, group)
	r.mu.Unlock()
}

func (r *groupSet) list() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Keys(r.groups))
}
