package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"herald/internal/protocol"
	"herald/internal/shard"
	"herald/internal/topic"
)

// Dead letters: the events push delivery gave up on, which the API lists,
// replays into their shards' queues and purges.

// DeadLetter is a dead-lettered event with why it was given up on.
type DeadLetter struct {
	Delivery
	Reason    string
	LastError string
	DeadAt    time.Time
}

// ListDeadLetters returns up to max dead letters of a topic, shard by
// shard in offset order.
func (n *Node) ListDeadLetters(ctx context.Context, topicName string, max int) (_ []DeadLetter, err error) {
	defer classify(&err)

	tr, err := n.reg.lookup(topicName)
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
		dls, events, err := n.deadLetters(ctx, s, nil, max-len(out))
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

// deadLetters reads a shard's dead letters (only those in want, if not
// nil) with their events.
func (n *Node) deadLetters(ctx context.Context, s *shardRuntime, want map[uint64]bool, max int) ([]shard.DeadLetter, []shard.Event, error) {
	if err := s.unservable(); err != nil {
		return nil, nil, err
	}
	var dls []shard.DeadLetter
	wanted := slices.Sorted(maps.Keys(want))
	err := shardLog{n, s}.View(ctx, func(m *shard.Machine) {
		if want == nil {
			dls = m.DeadLetters(0, max)
			return
		}
		for _, o := range wanted {
			if dl, ok := m.DeadLetter(o); ok && len(dls) < max {
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

// ReplayDeadLetters puts dead letters back into their shards' queues, in
// their original order, as new events (new offsets). With no ids, every
// dead letter of the topic is replayed.
func (n *Node) ReplayDeadLetters(ctx context.Context, topicName string, ids []string) (_ int, err error) {
	defer classify(&err)

	tr, want, err := n.reg.deadLetterTargets(topicName, ids)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, s := range tr.shards {
		if want != nil && want[s.index] == nil {
			continue
		}
		for {
			dls, events, err := n.deadLetters(ctx, s, want[s.index], maxReplayBatch)
			if err != nil {
				return total, err
			}
			if len(dls) == 0 {
				break
			}
			cmd := shard.Command{Op: shard.OpReplayDead, Time: time.Now().UnixNano(), Events: events}
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

// PurgeDeadLetters deletes dead letters for good; with no ids, all of the
// topic's.
func (n *Node) PurgeDeadLetters(ctx context.Context, topicName string, ids []string) (_ int, err error) {
	defer classify(&err)

	tr, want, err := n.reg.deadLetterTargets(topicName, ids)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, s := range tr.shards {
		cmd := shard.Command{Op: shard.OpPurgeDead}
		if want != nil {
			if want[s.index] == nil {
				continue
			}
			for o := range want[s.index] {
				cmd.Offsets = append(cmd.Offsets, o)
			}
		}
		res, err := n.proposeShard(ctx, s, &cmd)
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
