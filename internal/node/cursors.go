package node

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"herald/internal/controller"
	"herald/internal/host"
	"herald/internal/shard"
	"herald/internal/topic"
)

// cursorSyncEvery is how often cursorSync looks at every shard the node
// leads even if nothing told it to: it finishes what a subscription's
// creation or deletion could not (a shard without a leader at the time).
const cursorSyncEvery = 10 * time.Second

// cursorSync keeps the cursors of the shards this node leads in line with
// their topics' subscriptions as the controller records them: a
// subscription created gets a cursor on every shard (shard.OpSubscribe),
// one deleted loses it (shard.OpUnsubscribe), and the log lets go of what
// only that one still held. CreateSubscription and DeleteSubscription
// propose these on every shard before they return; cursorSync does what
// they could not, when topics or leadership change and every
// cursorSyncEvery.
type cursorSync struct {
	reg     *registry
	leads   func(*shardRuntime) bool
	view    func(ctx context.Context, s *shardRuntime, f func(*shard.Machine)) error
	propose func(ctx context.Context, s *shardRuntime, cmd *shard.Command) (shard.Result, error)
	log     *slog.Logger
	kick    chan struct{} // cap 1: topics or leadership changed
}

// changed tells the sync to run soon.
func (c *cursorSync) changed() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// run syncs until stop is closed, then stops leadership.
func (c *cursorSync) run(stop <-chan struct{}, leadership *host.LeadershipWatch) {
	defer leadership.Stop()
	tick := time.NewTicker(cursorSyncEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-c.kick:
		case <-leadership.C():
			leadership.Changed() // which ones does not matter: all are looked at
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), cursorSyncEvery)
		c.syncAll(ctx)
		cancel()
	}
}

// syncAll syncs the cursors of every shard this node leads.
func (c *cursorSync) syncAll(ctx context.Context) {
	c.reg.mu.RLock()
	topics := make([]*topicRuntime, 0, len(c.reg.topics))
	for _, tr := range c.reg.topics {
		topics = append(topics, tr)
	}
	last := c.reg.lastSubscription
	c.reg.mu.RUnlock()
	if last == 0 {
		// No subscription was ever created, so every shard has the
		// default cursor alone, unless the default was deleted: most
		// clusters, whose shards need no look.
		topics = slices.DeleteFunc(topics, func(tr *topicRuntime) bool { return !tr.info.Default.Detached })
	}
	for _, tr := range topics {
		want := wantedCursors(&tr.info)
		for _, s := range tr.shards {
			if !s.local || !c.leads(s) {
				continue
			}
			if err := c.syncShard(ctx, s, want, last); err != nil && ctx.Err() == nil {
				c.log.Warn("cannot sync the shard's subscriptions; trying again later", "shard", s.name, "err", err)
			}
		}
	}
}

// wantedCursors returns the cursors a topic's shards should have: for
// each subscription, where a new cursor of it starts (shard.Command's
// From).
func wantedCursors(t *controller.Topic) map[uint64]uint64 {
	want := make(map[uint64]uint64)
	for _, sub := range t.SubscriptionList() {
		want[sub.ID] = startOffset(sub)
	}
	return want
}

// startOffset is where a new cursor of sub starts: at the next event, or
// at the earliest the shard still holds.
func startOffset(sub controller.Subscription) uint64 {
	if sub.ID != 0 && sub.Attributes.Start == topic.StartEarliest {
		return 0
	}
	return shard.FromNow
}

// syncShard subscribes and unsubscribes one shard's cursors. A cursor of
// an id beyond last belongs to a subscription this node's view of the
// controller does not know yet, not to a deleted one: it stays.
func (c *cursorSync) syncShard(ctx context.Context, s *shardRuntime, want map[uint64]uint64, last uint64) error {
	var have []uint64
	if err := c.view(ctx, s, func(m *shard.Machine) { have = m.Subscriptions() }); err != nil {
		return err
	}
	for id, from := range want {
		if !slices.Contains(have, id) {
			if _, err := c.propose(ctx, s, &shard.Command{Op: shard.OpSubscribe, Subscription: id, From: from}); err != nil {
				return err
			}
		}
	}
	for _, id := range have {
		if _, ok := want[id]; !ok && id <= last {
			if _, err := c.propose(ctx, s, &shard.Command{Op: shard.OpUnsubscribe, Subscription: id}); err != nil {
				return err
			}
		}
	}
	return nil
}

// syncSubscriptions brings delivery in line with the topics the node
// knows, after a reconcile: the push dispatchers, and the shards'
// cursors.
func (n *Node) syncSubscriptions() {
	n.push.Sync()
	n.cursors.changed()
}

// viewShard runs f on a shard's state as this node has applied it.
func (n *Node) viewShard(ctx context.Context, s *shardRuntime, f func(*shard.Machine)) error {
	return shardLog{n, s}.View(ctx, f)
}

// proposeToShards proposes a command to every shard of a topic, in
// parallel, and returns the names of those that did not take it.
func (n *Node) proposeToShards(ctx context.Context, tr *topicRuntime, cmd shard.Command) (failed []string) {
	waits := make([]func() (shard.Result, error), len(tr.shards))
	for i, s := range tr.shards {
		c := cmd
		waits[i] = n.startShard(ctx, s, &c)
	}
	for i, wait := range waits {
		if _, err := wait(); err != nil {
			failed = append(failed, tr.shards[i].name)
		}
	}
	return failed
}
