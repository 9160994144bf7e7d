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
	tr, err := n.reg.lookup(topicName)
	if err != nil {
		return TopicStats{}, err
	}
	out := TopicStats{Name: topicName, Total: ShardStats{Shard: -1, Name: topicName}}
	for _, s := range tr.shards {
		ss := n.cursorStats(ctx, s, sub.ID)
		out.Shards = append(out.Shards, ss)
		addStats(&out.Total, ss)
	}
	return out, nil
}

// cursorStats returns a shard's stats as subscription sub sees them.
func (n *Node) cursorStats(ctx context.Context, s *shardRuntime, sub uint64) ShardStats {
	ss := ShardStats{Shard: s.index, Name: s.name, Err: s.unservable()}
	if h, ok := n.push.SubscriptionHealth(s.topic, s.group-uint64(s.index), sub, s.index); ok {
		dh := DeliveryHealth(h)
		ss.Delivery = &dh
	}
	if ss.Err != nil {
		return ss
	}
	err := n.host.View(ctx, s.group, func(sm host.StateMachine, _ uint64) {
		m := machineOf(sm)
		c, ok := m.Cursor(sub)
		if !ok {
			// Not on this shard yet: cursorSync is starting it.
			ss.Err = fmt.Errorf("%w: shard %s has not started subscription %d yet; try again shortly", ErrUnavailable, s.name, sub)
			return
		}
		ss.Stats = QueueStats(c.Stats())
	})
	if err != nil {
		ss.Err = err
	}
	return ss
}
