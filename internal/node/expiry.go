package node

import (
	"context"
	"log/slog"
	"time"

	"herald/internal/host"
	"herald/internal/shard"
)

// reservationExpiry periodically asks the shards this node leads that
// hold reservations (see reservations.go) to drop those older than the
// timeout. The cutoff travels in the command, so every replica drops the
// same ones.
type reservationExpiry struct {
	timeout   time.Duration
	reserving *groupSet // the groups that hold reservations
	shards    reservingShards
	log       *slog.Logger
	now       func() time.Time
}

// reservingShards is what the expiry needs of the node's shards.
type reservingShards interface {
	// shard returns the runtime of one of this node's groups; false once
	// its topic is deleted.
	shard(group uint64) (*shardRuntime, bool)
	leads(s *shardRuntime) bool
	// oldestReservation returns the time of the shard's oldest
	// reservation; false, and the shard leaves the set, if it has none.
	oldestReservation(ctx context.Context, s *shardRuntime) (oldest int64, ok bool)
	proposeShard(ctx context.Context, s *shardRuntime, cmd *shard.Command) (shard.Result, error)
}

// run expires reservations until stop is closed.
func (e *reservationExpiry) run(stop <-chan struct{}) {
	every(stop, min(e.timeout/4, time.Second), e.check)
}

// check expires the reservations past the timeout of every shard this
// node leads that holds any.
func (e *reservationExpiry) check() {
	groups := e.reserving.list()
	if len(groups) == 0 {
		return
	}
	var shards []*shardRuntime
	for _, g := range groups {
		if s, ok := e.shards.shard(g); ok && s.serves() {
			shards = append(shards, s)
		} else if !ok {
			e.reserving.remove(g) // its topic was deleted
		}
	}
	cutoff := e.now().Add(-e.timeout).UnixNano()
	for _, s := range shards {
		e.expireShard(s, cutoff)
	}
}

func (e *reservationExpiry) expireShard(s *shardRuntime, cutoff int64) {
	if !e.shards.leads(s) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	oldest, ok := e.shards.oldestReservation(ctx, s)
	if !ok || oldest >= cutoff {
		return
	}
	cmd := shard.Command{Op: shard.OpExpire, OlderThan: cutoff}
	if _, err := e.shards.proposeShard(ctx, s, &cmd); err != nil {
		e.log.Warn("expire reservations", "shard", s.name, "err", err)
	}
}

// groupReservations is the node's shards as the reservation expiry and
// the retention trim reach them.
type groupReservations struct {
	*registry
	relay   *relay
	host    *host.Host
	propose func(ctx context.Context, s *shardRuntime, cmd *shard.Command) (shard.Result, error)
}

func (g groupReservations) leads(s *shardRuntime) bool { return g.relay.leads(s) }

func (g groupReservations) proposeShard(ctx context.Context, s *shardRuntime, cmd *shard.Command) (shard.Result, error) {
	return g.propose(ctx, s, cmd)
}

// oldestReservation reads it in a View, where the machine may take the
// shard out of the set in order with the applies that put it there.
func (g groupReservations) oldestReservation(ctx context.Context, s *shardRuntime) (oldest int64, ok bool) {
	g.host.View(ctx, s.group, func(sm host.StateMachine, _ uint64) {
		m := sm.(*shardMachine)
		if oldest, ok = m.OldestReservation(); !ok {
			m.untrack()
		}
	})
	return oldest, ok
}
