package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"herald/internal/consume"
	"herald/internal/delivery"
	"herald/internal/endpoint"
	"herald/internal/host"
	"herald/internal/protocol"
	"herald/internal/push"
	"herald/internal/shard"
	"herald/internal/topic"
)

// shardLog is a shard as its dispatcher, and the push supervisor, see it.
type shardLog struct {
	n *Node
	s *shardRuntime
}

// Read reads the pending events, and keeps those still pending in a state
// confirmed to be the leader's (see consume.Shard.Fetch): a dispatcher left running
// on a leader that was replaced without knowing it would send events again
// that its successor's dispatcher has delivered. An empty read needs no
// confirmation, so idle shards stay quiet.
func (l shardLog) Read(ctx context.Context, from uint64, max int) ([]delivery.Event, uint64, error) {
	c := l.consumer()
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

func (l shardLog) Propose(ctx context.Context, cmd *shard.Command) (shard.Result, error) {
	return l.n.proposeShard(ctx, l.s, cmd)
}

func (l shardLog) Index() int { return l.s.index }

// consumer is the shard as its consumers' side reads it.
func (l shardLog) consumer() consume.Shard {
	return consume.Shard{Topic: l.s.topic, Index: l.s.index, Group: l, Leases: l.s.leases}
}

func (l shardLog) View(ctx context.Context, f func(*shard.Machine)) error {
	err := l.n.host.View(ctx, l.s.group, func(sm host.StateMachine, _ uint64) { f(machineOf(sm)) })
	if err != nil {
		return l.n.hostError(l.s.name, err)
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
		return l.n.hostError(l.s.name, err)
	}
	return nil
}

func (l shardLog) Leads() bool { return l.n.leads(l.s) }

// pushSource is the node as its push supervisor sees it.
type pushSource struct{ n *Node }

func (ps pushSource) PushTopics() []push.Topic {
	n := ps.n
	n.mu.RLock()
	defer n.mu.RUnlock()
	var out []push.Topic
	for name, tr := range n.topics {
		if tr.info.Attributes.PushEndpoint == "" {
			continue
		}
		t := push.Topic{Name: name, FirstGroup: tr.info.FirstGroup, Attributes: tr.info.Attributes}
		for _, s := range tr.shards {
			t.Shards = append(t.Shards, shardLog{n, s})
		}
		out = append(out, t)
	}
	return out
}

func (ps pushSource) ShardOfGroup(group uint64) (string, push.Shard, bool) {
	n := ps.n
	n.mu.RLock()
	s := n.shards[group]
	n.mu.RUnlock()
	if s == nil {
		return "", nil, false
	}
	return s.topic, shardLog{n, s}, true
}

// deliveryHealth returns the health of the shard's dispatcher, if this
// node runs one: it leads the shard, of a topic with a push endpoint.
func (n *Node) deliveryHealth(s *shardRuntime) (DeliveryHealth, bool) {
	h, ok := n.push.Health(s.topic, s.group-uint64(s.index), s.index)
	return DeliveryHealth(h), ok
}

// pushNow delivers events of a non-persistent topic synchronously: each
// goes to the endpoint and nothing is stored. Events are sent one at a
// time, in request order.
func (n *Node) pushNow(ctx context.Context, tr *topicRuntime, events []shard.Event) ([]string, error) {
	ep, scheme, ok := n.push.Endpoint(tr.info.Name)
	if !ok {
		return nil, fmt.Errorf("%w: the push endpoint of topic %q is not open (see the server log); nothing was stored", ErrUnavailable, tr.info.Name)
	}
	if n.bootEpoch == 0 {
		return nil, fmt.Errorf("%w: this node started on a full disk and could not store its boot epoch (%s in %s), without which non-persistent event ids could repeat; free space on the disk and restart the node",
			ErrUnavailable, bootEpochFile, n.cfg.DataDir)
	}
	ids := make([]string, len(events))
	now := time.Now()
	for i, e := range events {
		s := tr.shardFor(e.Key)
		ids[i] = topic.NonPersistentEventID(tr.info.Name, s.index, n.bootEpoch, n.nonPersistentSeq.Add(1))
		m := &endpoint.Message{ID: ids[i], Topic: tr.info.Name, Shard: s.index, Key: e.Key, Time: now,
			Headers: e.HeaderMap(), Payload: e.Payload, OpaqueData: tr.info.Attributes.OpaqueData, Attempt: 1}
		if err := ep.Send(ctx, m); err != nil {
			what := ErrUnavailable
			if endpoint.IsPermanent(err) {
				what = ErrEndpointRejected
			}
			return nil, fmt.Errorf("%w: push of event %d of %d to %s failed: %v; topic %q is non-persistent, so nothing was stored (events before it were delivered)",
				what, i+1, len(events), scheme, err, tr.info.Name)
		}
	}
	return ids, nil
}

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

	tr, err := n.lookup(topicName)
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
	err := n.host.View(ctx, s.group, func(sm host.StateMachine, _ uint64) {
		m := machineOf(sm)
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
		return nil, nil, n.hostError(s.name, err)
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

	tr, want, err := n.deadLetterTargets(topicName, ids)
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

	tr, want, err := n.deadLetterTargets(topicName, ids)
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
func (n *Node) deadLetterTargets(topicName string, ids []string) (*topicRuntime, map[int]map[uint64]bool, error) {
	tr, err := n.lookup(topicName)
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

// redactURL is topic.RedactEndpoint, the one redaction of endpoint URIs,
// under the name consume.go still calls it by.
func redactURL(s string) string { return topic.RedactEndpoint(s) }
