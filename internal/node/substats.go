package node

import (
	"context"
	"fmt"

	"herald/internal/host"
)

// SubscriptionStats gathers a subscription's counters on every shard of
// its topic, as TopicStats does the default subscription's: its pending
// events (its lag), delivered, skipped (its filter rejected them),
// retried and dead-lettered ones. The delivery health is that of the
// shards this node leads.
func (n *Node) SubscriptionStats(ctx context.Context, topicName, name string) (_ TopicStats, err error) {
	defer classify(&err)

	sub, err := n.subscription(topicName, name)
	if err != nil {
		return TopicStats{}, err
	}
	all, err := n.subscriptionsStats(ctx, topicName, []uint64{sub.ID})
	if err != nil {
		return TopicStats{}, err
	}
	return all[0], nil
}

// SubscriptionsStats is SubscriptionStats for several subscriptions of a
// topic, given in subs (as ListSubscriptions returns them), in the same
// order. It reads each shard once for all of them, so that listing a
// topic's subscriptions with their statistics costs a read per shard, not
// one per shard and subscription.
func (n *Node) SubscriptionsStats(ctx context.Context, topicName string, subs []Subscription) (_ []TopicStats, err error) {
	defer classify(&err)

	ids := make([]uint64, len(subs))
	for i, s := range subs {
		ids[i] = s.ID
	}
	return n.subscriptionsStats(ctx, topicName, ids)
}

// subscriptionsStats returns the stats of the subscriptions ids of a
// topic, in the order of ids.
func (n *Node) subscriptionsStats(ctx context.Context, topicName string, ids []uint64) ([]TopicStats, error) {
	tr, err := n.reg.lookup(topicName)
	if err != nil {
		return nil, err
	}
	out := make([]TopicStats, len(ids))
	for i := range out {
		out[i] = TopicStats{Name: topicName, Total: ShardStats{Shard: -1, Name: topicName}}
	}
	for _, s := range tr.shards {
		for i, ss := range n.cursorsStats(ctx, s, ids) {
			out[i].Shards = append(out[i].Shards, ss)
			addStats(&out[i].Total, ss)
		}
	}
	return out, nil
}

// cursorsStats returns a shard's stats as each subscription of ids sees
// them, in the order of ids, from one read of the shard.
func (n *Node) cursorsStats(ctx context.Context, s *shardRuntime, ids []uint64) []ShardStats {
	out := make([]ShardStats, len(ids))
	for i, sub := range ids {
		out[i] = ShardStats{Shard: s.index, Name: s.name, Err: s.unservable()}
		if h, ok := n.push.SubscriptionHealth(s.topic, s.group-uint64(s.index), sub, s.index); ok {
			dh := DeliveryHealth(h)
			out[i].Delivery = &dh
		}
	}
	if s.unservable() != nil {
		return out
	}
	if applied, err := n.host.Applied(s.group); err == nil && s.stats.getCursors(applied, ids, out) {
		return out
	}
	err := n.host.View(ctx, s.group, func(sm host.StateMachine, applied uint64) {
		m := machineOf(sm)
		for i, sub := range ids {
			c, ok := m.Cursor(sub)
			if !ok {
				// Not on this shard yet: cursorSync is starting it.
				out[i].Err = fmt.Errorf("%w: shard %s has not started subscription %d yet; try again shortly", ErrUnavailable, s.name, sub)
				continue
			}
			out[i].Stats = QueueStats(c.Stats())
		}
		s.stats.putCursors(applied, ids, out)
	})
	if err != nil {
		for i := range out {
			out[i].Err = err
		}
	}
	return out
}
