package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"herald/internal/protocol"
	"herald/internal/shard"
	"herald/internal/topic"
)

// Dead letters: the events push delivery gave up on, which the API lists,
// replays into their shards' queues and purges. Each subscription has its
// own; an empty subscription name means the topic's default one.

// DeadLetter is a dead-lettered event with why it was given up on.
type DeadLetter struct {
	Delivery
	Reason    string
	LastError string
	DeadAt    time.Time
}

// ListDeadLetters returns up to max dead letters of a subscription of a
// topic, shard by shard in offset order.
func (n *Node) ListDeadLetters(ctx context.Context, topicName, subscription string, max int) (_ []DeadLetter, err error) {
	defer classify(&err)

	tr, err := n.reg.lookup(topicName)
	if err != nil {
		return nil, err
	}
	sub, err := n.subscriptionID(topicName, subscription)
	if err != nil {
		return nil, err
	}
	if max <= 0 {
		max = protocol.DefaultFetchEvents
	}
	var out []DeadLetter
	for _, s := range tr.shards {
		if len(out) >= max {
			break
		}
		dls, events, err := n.deadLetters(ctx, s, sub, nil, max-len(out))
		if err != nil {
			return nil, err
		}
		for i, dl := range dls {
			out = append(out, DeadLetter{
				Delivery: Delivery{ID: topic.EventID(topicName, s.index, dl.Offset), Shard: s.index, Offset: dl.Offset,
					Event: eventOf(events[i]), Time: time.Unix(0, dl.PublishTime), Attempt: dl.Attempts},
				Reason: dl.Reason, LastError: dl.LastError, DeadAt: time.Unix(0, dl.Time),
			})
		}
	}
	return out, nil
}

// subscriptionID returns the id of a topic's subscription; the empty name
// is the default one's, 0.
func (n *Node) subscriptionID(topicName, name string) (uint64, error) {
	if name == "" {
		return 0, nil
	}
	sub, err := n.subscription(topicName, name)
	return sub.ID, err
}

// deadLetters reads the dead letters of subscription sub on a shard (only
// those in want, if not nil) with their events. A shard that has no cursor
// of the subscription (yet) has none.
func (n *Node) deadLetters(ctx context.Context, s *shardRuntime, sub uint64, want map[uint64]bool, max int) ([]shard.DeadLetter, []shard.Event, error) {
	if err := s.unservable(); err != nil {
		return nil, nil, err
	}
	var dls []shard.DeadLetter
	wanted := slices.Sorted(maps.Keys(want))
	err := shardLog{n, s}.View(ctx, func(m *shard.Machine) {
		c, ok := m.Cursor(sub)
		if !ok {
			return
		}
		if want == nil {
			dls = c.DeadLetters(0, max)
			return
		}
		for _, o := range wanted {
			if dl, ok := c.DeadLetter(o); ok && len(dls) < max {
				dls = append(dls, dl)
			}
		}
	})
	if err != nil {
		return nil, nil, err
	}
	events := make([]shard.Event, len(dls))
	for i, dl := range dls {
		data, err := n.host.Entry(s.group, dl.Index)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: read dead letter %s: %v", ErrUnavailable, topic.EventID(s.topic, s.index, dl.Offset), err)
		}
		if events[i], err = shard.EventAt(data, dl.Slot); err != nil {
			return nil, nil, fmt.Errorf("%w: decode dead letter %s: %v", ErrUnavailable, topic.EventID(s.topic, s.index, dl.Offset), err)
		}
	}
	return dls, events, nil
}

// maxReplayBatch bounds one replay proposal.
const maxReplayBatch = 500

// ReplayDeadLetters puts a subscription's dead letters back into their
// shards' queues, in their original order, as new events (new offsets)
// for that subscription alone. With no ids, every dead letter of the
// subscription is replayed.
func (n *Node) ReplayDeadLetters(ctx context.Context, topicName, subscription string, ids []string) (_ int, err error) {
	defer classify(&err)

	tr, want, err := n.reg.deadLetterTargets(topicName, ids)
	if err != nil {
		return 0, err
	}
	sub, err := n.subscriptionID(topicName, subscription)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, s := range tr.shards {
		if want != nil && want[s.index] == nil {
			continue
		}
		for {
			dls, events, err := n.deadLetters(ctx, s, sub, want[s.index], maxReplayBatch)
			if err != nil {
				return total, err
			}
			if len(dls) == 0 {
				break
			}
			cmd := shard.Command{Op: shard.OpReplayDead, Subscription: sub, Time: time.Now().UnixNano(), Events: events}
			for _, dl := range dls {
				cmd.Offsets = append(cmd.Offsets, dl.Offset)
				if want != nil {
					delete(want[s.index], dl.Offset)
				}
			}
			if _, err := n.proposeShard(ctx, s, &cmd); err != nil {
				return total, fmt.Errorf("replay dead letters of shard %s: %w", s.name, err)
			}
			total += len(dls)
			n.push.Notify(topicName, []int{s.index})
			tr.events.signal()
		}
	}
	return total, nil
}

// PurgeDeadLetters deletes a subscription's dead letters for good; with no
// ids, all of them.
func (n *Node) PurgeDeadLetters(ctx context.Context, topicName, subscription string, ids []string) (_ int, err error) {
	defer classify(&err)

	tr, want, err := n.reg.deadLetterTargets(topicName, ids)
	if err != nil {
		return 0, err
	}
	sub, err := n.subscriptionID(topicName, subscription)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, s := range tr.shards {
		cmd := shard.Command{Op: shard.OpPurgeDead, Subscription: sub}
		if want != nil {
			if want[s.index] == nil {
				continue
			}
			for o := range want[s.index] {
				cmd.Offsets = append(cmd.Offsets, o)
			}
		}
		res, err := n.proposeShard(ctx, s, &cmd)
		if errors.Is(err, shard.ErrUnknownSubscription) {
			continue // the subscription has not started there: no dead letters
		}
		if err != nil {
			return total, fmt.Errorf("purge dead letters of shard %s: %w", s.name, err)
		}
		total += res.Count
	}
	return total, nil
}

// deadLetterTargets resolves ids to offsets per shard index; nil means all.
func (r *registry) deadLetterTargets(topicName string, ids []string) (*topicRuntime, map[int]map[uint64]bool, error) {
	tr, err := r.lookup(topicName)
	if err != nil {
		return nil, nil, err
	}
	if len(ids) == 0 {
		return tr, nil, nil
	}
	want := make(map[int]map[uint64]bool)
	for _, id := range ids {
		t, idx, off, err := topic.ParseEventID(id)
		if err != nil {
			return nil, nil, err
		}
		if t != topicName || idx >= len(tr.shards) {
			return nil, nil, fmt.Errorf("%w: dead letter %s is not in topic %q", ErrNotFound, id, topicName)
		}
		if want[idx] == nil {
			want[idx] = make(map[uint64]bool)
		}
		want[idx][off] = true
	}
	return tr, want, nil
}
