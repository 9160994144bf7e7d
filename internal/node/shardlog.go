package node

import (
	"context"
	"fmt"
	"slices"

	"herald/internal/consume"
	"herald/internal/delivery"
	"herald/internal/host"
	"herald/internal/shard"
	"herald/internal/topic"
)

// shardLog is a shard this node holds as the packages the node drives
// see it: the push supervisor and the shard's dispatcher (push.Shard, and
// delivery.Log within it), and the consumer side (consume.Group).
type shardLog struct {
	n *Node
	s *shardRuntime
}

// Log returns the shard as the dispatcher of subscription sub reads it and
// records outcomes in (push.Shard).
func (l shardLog) Log(sub uint64) delivery.Log { return subscriptionLog{l, sub} }

// subscriptionLog is a shard's log as one subscription's dispatcher sees
// it: the subscription's cursor (delivery.Log).
type subscriptionLog struct {
	shardLog
	sub uint64
}

// Read reads the subscription's pending events, and keeps those still
// pending in a state confirmed to be the leader's (see
// consume.Shard.Fetch): a dispatcher left running on a leader that was
// replaced without knowing it would send events again that its
// successor's dispatcher has delivered. An empty read needs no
// confirmation, so idle shards stay quiet.
func (l subscriptionLog) Read(ctx context.Context, from uint64, max int) ([]delivery.Event, uint64, error) {
	c := l.consumer(l.sub)
	evs, next, err := c.ReadPending(ctx, from, max)
	if err != nil || len(evs) == 0 {
		return evs, next, err
	}
	if err := l.ReadBarrier(ctx); err != nil {
		return nil, from, err
	}
	acked, err := c.AckedNow(ctx, evs)
	if err != nil {
		return nil, from, err
	}
	evs = slices.DeleteFunc(evs, func(e delivery.Event) bool { return acked[e.Offset] })
	return evs, next, nil
}

// Propose records an outcome of the subscription's deliveries.
func (l subscriptionLog) Propose(ctx context.Context, cmd *shard.Command) (shard.Result, error) {
	cmd.Subscription = l.sub
	return l.n.proposeShard(ctx, l.s, cmd)
}

// Seeks tells the dispatcher when a seek moved the subscription's cursor:
// the shard's leases hear of every command this replica applies.
func (l subscriptionLog) Seeks() (uint64, <-chan struct{}) { return l.s.leases.Seeks(l.sub) }

func (l shardLog) Index() int { return l.s.index }

// consumer is the shard as the consumers of subscription sub read it.
func (l shardLog) consumer(sub uint64) consume.Shard {
	return consume.Shard{Topic: l.s.topic, Index: l.s.index, Group: l, Leases: l.s.leases, Sub: sub}
}

func (l shardLog) View(ctx context.Context, f func(*shard.Machine)) error {
	err := l.n.host.View(ctx, l.s.group, func(sm host.StateMachine, _ uint64) { f(machineOf(sm)) })
	if err != nil {
		return hostError(l.s.name, err)
	}
	return nil
}

func (l shardLog) Entry(offset, index uint64) (shard.Command, error) {
	data, err := l.n.host.Entry(l.s.group, index)
	var cmd shard.Command
	if err == nil {
		cmd, err = shard.UnmarshalCommand(data)
	}
	if err != nil {
		return shard.Command{}, fmt.Errorf("%w: read event %s: %v", ErrUnavailable, topic.EventID(l.s.topic, l.s.index, offset), err)
	}
	return cmd, nil
}

func (l shardLog) ReadBarrier(ctx context.Context) error {
	if err := l.n.host.ReadBarrier(ctx, l.s.group); err != nil {
		return hostError(l.s.name, err)
	}
	return nil
}

func (l shardLog) Leads() bool { return l.n.relay.leads(l.s) }
