package node

import (
	"context"
	"log/slog"
	"time"

	"herald/internal/host"
	"herald/internal/shard"
)

// retentionTrim has the shards this node leads keep what their topic's
// retention asks, as reservationExpiry has them drop stale reservations:
// a shard has no clock, so its leader proposes shard.OpRetain with the
// cutoff, now less the retention, and every replica frees the same
// events. The first Retain a shard applies starts it retaining; a shard
// whose topic's retention went back to 0 is told to stop (RetainNone),
// and then frees events as it did before, at no cost.
//
// The shards of topics with retention are few and known from the topics;
// the shards that retain though their topic no longer asks it are found
// in a set the state machines keep (shardMachine.track), so that the
// trim never reads every shard of the node.
type retentionTrim struct {
	retaining *groupSet // the groups that retain events
	shards    retentionShards
	log       *slog.Logger
	now       func() time.Time
}

// retentionShards is what the trim needs of the node's shards.
type retentionShards interface {
	topicList() []*topicRuntime
	// shard returns the runtime of one of this node's groups; false once
	// its topic is deleted.
	shard(group uint64) (*shardRuntime, bool)
	lookup(name string) (*topicRuntime, error)
	leads(s *shardRuntime) bool
	// retention reads whether the shard retains, and the publish time of
	// its oldest event retained beyond what its cursors hold (ok false
	// if none). A shard that does not retain leaves the set.
	retention(ctx context.Context, s *shardRuntime) (retaining bool, oldest int64, ok bool)
	proposeShard(ctx context.Context, s *shardRuntime, cmd *shard.Command) (shard.Result, error)
}

// retentionPeriod is how often the trim runs: retention is in seconds.
const retentionPeriod = time.Second

// run trims until stop is closed.
func (r *retentionTrim) run(stop <-chan struct{}) { every(stop, retentionPeriod, r.check) }

// check proposes what is due to every shard this node leads of a topic
// with retention, or that retains without it.
func (r *retentionTrim) check() {
	now := r.now()
	cutoffs := make(map[*shardRuntime]int64)
	seen := make(map[uint64]bool)
	for _, tr := range r.shards.topicList() {
		ret := tr.info.Attributes.Retention
		if ret <= 0 {
			continue
		}
		cutoff := now.Add(-time.Duration(ret) * time.Second).UnixNano()
		for _, s := range tr.shards {
			if s.local {
				cutoffs[s] = cutoff
				seen[s.group] = true
			}
		}
	}
	for _, g := range r.retaining.list() {
		if seen[g] {
			continue
		}
		s, ok := r.shards.shard(g)
		if !ok {
			r.retaining.remove(g) // its topic was deleted
			continue
		}
		if tr, err := r.shards.lookup(s.topic); err == nil && tr.info.Attributes.Retention > 0 {
			continue // a topic created since the list above: next time
		}
		cutoffs[s] = shard.RetainNone
	}
	for s, cutoff := range cutoffs {
		if s.serves() && r.shards.leads(s) {
			r.trimShard(s, cutoff)
		}
	}
}

func (r *retentionTrim) trimShard(s *shardRuntime, cutoff int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	retaining, oldest, ok := r.shards.retention(ctx, s)
	switch {
	case cutoff == shard.RetainNone && !retaining:
		return
	case cutoff != shard.RetainNone && retaining && (!ok || oldest >= cutoff):
		return // nothing to free yet
	}
	cmd := shard.Command{Op: shard.OpRetain, OlderThan: cutoff}
	if _, err := r.shards.proposeShard(ctx, s, &cmd); err != nil {
		r.log.Warn("trim retained events", "shard", s.name, "err", err)
	}
}

// retention reads it in a View, where the machine may leave the retaining
// set in order with the applies that put it there.
func (g groupReservations) retention(ctx context.Context, s *shardRuntime) (retaining bool, oldest int64, ok bool) {
	g.host.View(ctx, s.group, func(sm host.StateMachine, _ uint64) {
		m := sm.(*shardMachine)
		if retaining = m.Retaining(); !retaining {
			m.retains = false
			m.retaining.remove(m.group)
			return
		}
		oldest, ok = m.OldestRetained()
	})
	return retaining, oldest, ok
}

// retainNow has every shard of a topic whose retention was just set keep
// what it asks at once, rather than from the trim's next round: the
// events delivered from now on are retained. A shard that does not take
// it now gets it from the trim.
func (n *Node) retainNow(ctx context.Context, topicName string, retention int64) {
	cmd := shard.Command{Op: shard.OpRetain, OlderThan: shard.RetainNone}
	if retention > 0 {
		cmd.OlderThan = time.Now().Add(-time.Duration(retention) * time.Second).UnixNano()
	}
	tr, err := n.reg.lookup(topicName)
	if err != nil {
		return // deleted meanwhile
	}
	if failed := n.proposeToShards(ctx, tr, cmd); len(failed) > 0 {
		n.log.Info("some shards did not take the topic's retention yet; the trim gives it to them",
			"topic", topicName, "shards", failed)
	}
}
