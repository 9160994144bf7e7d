package node

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"sync"
	"time"

	"herald/internal/delivery"
	"herald/internal/endpoint"
	"herald/internal/host"
	"herald/internal/protocol"
	"herald/internal/shard"
	"herald/internal/topic"
)

// pushTopic is the push side of a topic on this node: its endpoint and the
// dispatchers of the shards this node leads.
type pushTopic struct {
	attrs       topic.Attributes
	firstGroup  uint64
	ep          endpoint.Endpoint
	scheme      string
	dispatchers map[int]*delivery.Dispatcher
}

func (p *pushTopic) close() {
	var wg sync.WaitGroup
	for _, d := range p.dispatchers {
		wg.Go(d.Stop)
	}
	wg.Wait()
	p.ep.Close()
}

// shardLog is a shard as its dispatcher sees it.
type shardLog struct {
	n *Node
	s *shardRuntime
}

// Read reads the pending events, and keeps those still pending in a state
// confirmed to be the leader's (see fetchShard): a dispatcher left running
// on a leader that was replaced without knowing it would send events again
// that its successor's dispatcher has delivered. An empty read needs no
// confirmation, so idle shards stay quiet.
func (l shardLog) Read(ctx context.Context, from uint64, max int) ([]delivery.Event, uint64, error) {
	evs, next, err := l.n.readPending(ctx, l.s, from, max)
	if err != nil || len(evs) == 0 {
		return evs, next, err
	}
	if err := l.n.host.ReadBarrier(ctx, l.s.group); err != nil {
		return nil, from, l.n.hostError(l.s.name, err)
	}
	acked, err := l.n.ackedNow(ctx, l.s, evs)
	if err != nil {
		return nil, from, err
	}
	evs = slices.DeleteFunc(evs, func(e delivery.Event) bool { return acked[e.Offset] })
	return evs, next, nil
}

func (l shardLog) Propose(ctx context.Context, cmd *shard.Command) (shard.Result, error) {
	return l.n.proposeShard(ctx, l.s, cmd)
}

// superviseDispatchers keeps a dispatcher running for every shard of a
// push topic that this node leads, and none elsewhere: it syncs them when
// the host reports a change of leadership (reconcile syncs them when
// topics change), and a second after an endpoint failed to open (say, a
// CA file not yet installed), until it opens.
func (n *Node) superviseDispatchers(leadership *host.LeadershipWatch) {
	defer leadership.Stop()
	var retry <-chan time.Time
	for {
		select {
		case <-n.stop:
			n.pushMu.Lock()
			for name, p := range n.push {
				p.close()
				delete(n.push, name)
			}
			n.pushMu.Unlock()
			return
		case <-leadership.C():
			n.syncLeadership(leadership.Changed())
		case <-n.endpointFailed:
			if retry == nil {
				retry = time.After(endpointRetryPause)
			}
		case <-retry:
			retry = nil
			n.syncDispatchers()
		}
	}
}

// endpointRetryPause is how long the node waits before it tries again to
// open a push endpoint that failed to open.
const endpointRetryPause = time.Second

func (n *Node) syncDispatchers() {
	n.mu.RLock()
	topics := make(map[string]*topicRuntime, len(n.topics))
	for name, tr := range n.topics {
		if tr.info.Attributes.PushEndpoint != "" {
			topics[name] = tr
		}
	}
	n.mu.RUnlock()

	n.pushMu.Lock()
	defer n.pushMu.Unlock()
	for name, p := range n.push {
		tr, ok := topics[name]
		if !ok || tr.info.FirstGroup != p.firstGroup || !reflect.DeepEqual(tr.info.Attributes, p.attrs) {
			p.close() // deleted, recreated or changed: start again below
			delete(n.push, name)
		}
	}
	for name, tr := range topics {
		p := n.push[name]
		if p == nil {
			ep, err := delivery.OpenEndpoint(name, tr.info.Attributes, n.guard)
			if err != nil {
				n.log.Error("cannot open the push endpoint; events stay queued until it is fixed", "topic", name, "err", err)
				select {
				case n.endpointFailed <- struct{}{}:
				default: // a retry is already due
				}
				continue
			}
			u, _ := url.Parse(tr.info.Attributes.PushEndpoint)
			p = &pushTopic{attrs: tr.info.Attributes.Clone(), firstGroup: tr.info.FirstGroup, ep: ep,
				scheme: u.Scheme, dispatchers: make(map[int]*delivery.Dispatcher)}
			n.push[name] = p
		}
		for _, s := range tr.shards {
			n.syncDispatcher(p, name, s)
		}
	}
}

// syncLeadership starts or stops the dispatchers of the given shard
// groups, whose leadership changed. Topics and their endpoints are
// syncDispatchers' business; a group of a topic with no open endpoint, or
// of another incarnation of it, is left to that.
func (n *Node) syncLeadership(groups []uint64) {
	n.mu.RLock()
	shards := make([]*shardRuntime, 0, len(groups))
	for _, id := range groups {
		if s := n.shards[id]; s != nil {
			shards = append(shards, s)
		}
	}
	n.mu.RUnlock()
	n.pushMu.Lock()
	defer n.pushMu.Unlock()
	for _, s := range shards {
		if p := n.push[s.topic]; p != nil && p.firstGroup+uint64(s.index) == s.group {
			n.syncDispatcher(p, s.topic, s)
		}
	}
}

func (n *Node) syncDispatcher(p *pushTopic, topicName string, s *shardRuntime) {
	leads := n.leads(s)
	d := p.dispatchers[s.index]
	switch {
	case leads && d == nil:
		p.dispatchers[s.index] = delivery.Start(context.Background(), shardLog{n, s}, delivery.Config{
			Topic: topicName, Shard: s.index, Attributes: p.attrs, Endpoint: p.ep,
			Scheme: p.scheme, Metrics: n.delivery, Logger: n.log, MaxInFlight: n.cfg.DeliveryConcurrency,
		})
	case !leads && d != nil:
		d.Stop()
		delete(p.dispatchers, s.index)
	}
}

// deliveryHealth returns the health of the shard's dispatcher, if this
// node runs one: it leads the shard, of a topic with a push endpoint.
func (n *Node) deliveryHealth(s *shardRuntime) (DeliveryHealth, bool) {
	n.pushMu.Lock()
	defer n.pushMu.Unlock()
	p := n.push[s.topic]
	if p == nil || p.firstGroup+uint64(s.index) != s.group {
		return DeliveryHealth{}, false
	}
	d := p.dispatchers[s.index]
	if d == nil {
		return DeliveryHealth{}, false
	}
	return DeliveryHealth(d.Health()), true
}

// notifyDispatchers wakes the dispatchers of the given shards of a topic.
func (n *Node) notifyDispatchers(topicName string, shards []int) {
	n.pushMu.Lock()
	defer n.pushMu.Unlock()
	p := n.push[topicName]
	if p == nil {
		return
	}
	for _, i := range shards {
		if d := p.dispatchers[i]; d != nil {
			d.Notify()
		}
	}
}

// pushNow delivers events of a non-persistent topic synchronously: each
// goes to the endpoint and nothing is stored. Events are sent one at a
// time, in request order.
func (n *Node) pushNow(ctx context.Context, tr *topicRuntime, events []shard.Event) ([]string, error) {
	n.pushMu.Lock()
	p := n.push[tr.info.Name]
	n.pushMu.Unlock()
	if p == nil {
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
		if err := p.ep.Send(ctx, m); err != nil {
			what := ErrUnavailable
			if endpoint.IsPermanent(err) {
				what = ErrEndpointRejected
			}
			return nil, fmt.Errorf("%w: push of event %d of %d to %s failed: %v; topic %q is non-persistent, so nothing was stored (events before it were delivered)",
				what, i+1, len(events), p.scheme, err, tr.info.Name)
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
			n.notifyDispatchers(topicName, []int{s.index})
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
