package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"herald/internal/controller"
	"herald/internal/delivery"
	"herald/internal/host"
	"herald/internal/topic"
)

// CreateTopic creates a topic with attrs applied over the defaults, and
// opens all its shards before returning.
func (n *Node) CreateTopic(ctx context.Context, name string, attrs map[string]string) (_ Topic, err error) {
	defer classify(&err)

	if err := topic.ValidateName(name); err != nil {
		return Topic{}, err
	}
	a, err := topic.Defaults().With(attrs)
	if err != nil {
		return Topic{}, err
	}
	if err := a.Validate(); err != nil {
		return Topic{}, err
	}
	if err := n.guard.Check(ctx, a); err != nil {
		return Topic{}, err
	}
	t, err := n.proposeController(ctx, controller.Command{Op: "create", Name: name, Attributes: &a,
		Members: n.cfg.Members, Time: time.Now().UnixNano()})
	if err == nil && a.Retention > 0 {
		n.retainNow(ctx, name, a.Retention)
	}
	return topicOf(t), err
}

// SetTopicAttributes changes attributes of a topic. Queued events are kept
// whatever changes: switching a topic to non-persistent only changes how
// new events are published; the shards keep what they hold until it is
// consumed.
func (n *Node) SetTopicAttributes(ctx context.Context, name string, attrs map[string]string) (_ Topic, err error) {
	defer classify(&err)

	tr, err := n.reg.lookup(name)
	if err != nil {
		return Topic{}, err
	}
	// Validate here for a prompt error; the controller validates again.
	a, err := tr.info.Attributes.With(attrs)
	if err != nil {
		return Topic{}, err
	}
	if err := a.Validate(); err != nil {
		return Topic{}, err
	}
	// Where the endpoint points is checked here, not in the controller,
	// whose state machine does no I/O; dialling checks it again.
	if err := n.guard.Check(ctx, a); err != nil {
		return Topic{}, err
	}
	t, err := n.proposeController(ctx, controller.Command{Op: "set", Name: name, Changes: attrs, Time: time.Now().UnixNano()})
	if err == nil && a.Retention != tr.info.Attributes.Retention {
		n.retainNow(ctx, name, a.Retention)
	}
	return topicOf(t), err
}

// DeleteTopic deletes a topic with all its shards and their events.
func (n *Node) DeleteTopic(ctx context.Context, name string) (err error) {
	defer classify(&err)

	if _, err := n.reg.lookup(name); err != nil {
		return err
	}
	_, err = n.proposeController(ctx, controller.Command{Op: "delete", Name: name, Time: time.Now().UnixNano()})
	return err
}

// GetTopic returns a topic.
func (n *Node) GetTopic(name string) (_ Topic, err error) {
	defer classify(&err)

	tr, err := n.reg.lookup(name)
	if err != nil {
		return Topic{}, err
	}
	return topicOf(tr.info), nil
}

// ListTopics returns every topic, sorted by name.
func (n *Node) ListTopics() []Topic {
	topics := n.reg.topicList()
	out := make([]Topic, 0, len(topics))
	for _, tr := range topics {
		out = append(out, topicOf(tr.info))
	}
	slices.SortFunc(out, func(a, b Topic) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// TopicNames returns the names of the topics, sorted: ListTopics without
// their attributes, for callers that visit every topic often.
func (n *Node) TopicNames() []string {
	topics := n.reg.topicList()
	out := make([]string, 0, len(topics))
	for _, tr := range topics {
		out = append(out, tr.info.Name)
	}
	slices.Sort(out)
	return out
}

// proposeController replicates a controller command, then brings local
// shards in line before returning so the caller can use the topic at once.
func (n *Node) proposeController(ctx context.Context, cmd controller.Command) (controller.Topic, error) {
	res, err := n.proposeControllerResult(ctx, cmd)
	return res.Topic, err
}

// proposeControllerResult is proposeController returning the whole
// result; a command the controller rejected is an error.
func (n *Node) proposeControllerResult(ctx context.Context, cmd controller.Command) (controller.Result, error) {
	res, err := n.ctrlGroup.propose(ctx, cmd)
	if err != nil {
		return controller.Result{}, err
	}
	if res.Err != nil {
		return controller.Result{}, res.Err
	}
	if err := n.reconciler.reconcile(ctx); err != nil {
		return controller.Result{}, err
	}
	return res, nil
}

// ShardStats are one shard's counters.
type ShardStats struct {
	Shard  int
	Name   string
	Stats  QueueStats
	Leased int
	Err    error // the shard cannot serve
	// Delivery is the health of the shard's push delivery, on the node
	// that runs its dispatcher (the shard's leader); nil elsewhere, and
	// for topics without a push endpoint. In the total, it sums the
	// shards': the newest error and success, failures added up.
	Delivery *DeliveryHealth
	// Tiering, on a node that tiers (serve --tier-url): the shard's LRO
	// (0 in a total), the first index of its log on this node's disk (0
	// in a total; what it needs below it is read from the object store),
	// the bytes of that log, and the bytes of its entries the manifest
	// records in the object store.
	LRO         uint64
	LocalFirst  uint64
	LocalBytes  int64
	TieredBytes int64
	// TierError is why the last tiering cycle failed, on the node that
	// leads the shard; "" if it went well, and elsewhere.
	TierError string
}

// DeliveryHealth is how a shard's pushes are going, kept in the memory of
// its leader (delivery.Health).
type DeliveryHealth delivery.Health

// TopicStats are a topic's counters, summed over shards and per shard.
type TopicStats struct {
	Name   string
	Total  ShardStats
	Shards []ShardStats
}

// TopicStats gathers the counters of every shard of a topic.
func (n *Node) TopicStats(ctx context.Context, name string) (_ TopicStats, err error) {
	defer classify(&err)

	tr, err := n.reg.lookup(name)
	if err != nil {
		return TopicStats{}, err
	}
	out := TopicStats{Name: name, Total: ShardStats{Shard: -1, Name: name}}
	now := time.Now()
	tiered := n.tieredBytes(ctx, tr)
	for _, s := range tr.shards {
		ss := n.shardStats(ctx, s, now)
		n.addTierStats(s, &ss, tiered)
		out.Shards = append(out.Shards, ss)
		addStats(&out.Total, ss)
	}
	return out, nil
}

// StatsVersion returns a number that changes whenever the counters that
// TopicStats and SubscriptionsStats report of topic name on this node
// may have changed: they change only as the shards this node holds apply
// entries, and as shards and subscriptions come and go. A sampler that
// finds it unchanged keeps the counters it read last instead of reading
// every shard again (the dashboard, on a node of 100,000 idle shards).
// The leases, delivery health and tiering figures of the stats are not
// counters and are not covered.
func (n *Node) StatsVersion(name string) (uint64, error) {
	tr, err := n.reg.lookup(name)
	if err != nil {
		return 0, err
	}
	v := versionMix(versionSeed, tr.info.FirstGroup)
	if tr.info.Default.Detached {
		v = versionMix(v, 1)
	}
	for i := range tr.info.Subscriptions {
		v = versionMix(v, tr.info.Subscriptions[i].ID)
	}
	for _, s := range tr.shards {
		v = versionMix(v, s.group)
		if !s.local || s.unservable() != nil {
			continue
		}
		// The applied index goes past 0 once the shard is open.
		applied, _ := n.host.Applied(s.group)
		v = versionMix(v, applied+1)
	}
	return v, nil
}

// versionSeed and versionMix are FNV-1a over 64-bit words: a change in
// any word changes the result, but for a collision too rare to matter
// for a chart.
const versionSeed = 14695981039346656037

func versionMix(v, word uint64) uint64 { return (v ^ word) * 1099511628211 }

func (n *Node) shardStats(ctx context.Context, s *shardRuntime, now time.Time) ShardStats {
	ss := ShardStats{Shard: s.index, Name: s.name, Err: s.unservable()}
	if h, ok := n.deliveryHealth(s); ok {
		ss.Delivery = &h
	}
	if ss.Err != nil {
		return ss
	}
	ss.Leased = s.leases.Count(now)
	if applied, err := n.host.Applied(s.group); err == nil {
		if st, lro, ok := s.stats.get(applied); ok {
			ss.Stats, ss.LRO = st, lro
			return ss
		}
	}
	err := n.host.View(ctx, s.group, func(sm host.StateMachine, applied uint64) {
		m := machineOf(sm)
		ss.Stats, ss.LRO = QueueStats(m.Stats()), m.LRO()
		s.stats.put(applied, ss.Stats, ss.LRO)
	})
	if err != nil {
		ss.Err, ss.Leased = err, 0
	}
	return ss
}

// addTierStats adds what tiering knows of shard s to ss, which has its
// LRO already; tiered is the bytes the manifest records of each of the
// topic's shards (tieredBytes).
func (n *Node) addTierStats(s *shardRuntime, ss *ShardStats, tiered map[uint64]int64) {
	if n.tier == nil || ss.Err != nil {
		return
	}
	if b, err := n.host.LogBounds(s.group); err == nil {
		ss.LocalFirst, ss.LocalBytes = b.First, b.Bytes
	}
	if err := n.tier.rec.LastError(); err != nil && n.relay.leads(s) {
		ss.TierError = err.Error()
	}
	ss.TieredBytes = tiered[s.group]
}

// tieredBytes returns, by group, the bytes the manifest records of the
// shards of tr, in one look at the controller; nil on a node that does
// not tier.
func (n *Node) tieredBytes(ctx context.Context, tr *topicRuntime) map[uint64]int64 {
	if n.tier == nil {
		return nil
	}
	out := make(map[uint64]int64, len(tr.shards))
	_ = n.ctrlGroup.view(ctx, func(m *controllerMachine) {
		for _, s := range tr.shards {
			for _, ref := range m.TierRunsOfGroup(s.group) {
				out[s.group] += ref.Run.Length
			}
		}
	})
	return out
}

func addStats(total *ShardStats, s ShardStats) {
	t, x := &total.Stats, s.Stats
	t.Events += x.Events
	t.Bytes += x.Bytes
	t.ReservedBytes += x.ReservedBytes
	t.Reservations += x.Reservations
	t.Published += x.Published
	t.Acked += x.Acked
	t.NextOffset += x.NextOffset
	t.Head += x.Head
	t.DeadLetters += x.DeadLetters
	t.DeadLetterBytes += x.DeadLetterBytes
	t.Delivered += x.Delivered
	t.DeadLettered += x.DeadLettered
	t.Retried += x.Retried
	t.Skipped += x.Skipped
	total.LocalBytes += s.LocalBytes
	total.TieredBytes += s.TieredBytes
	if total.TierError == "" {
		total.TierError = s.TierError
	}
	if x.OldestEventTime != 0 && (t.OldestEventTime == 0 || x.OldestEventTime < t.OldestEventTime) {
		t.OldestEventTime = x.OldestEventTime
	}
	total.Leased += s.Leased
	addHealth(total, s.Delivery)
	if s.Err != nil && total.Err == nil {
		total.Err = fmt.Errorf("shard %s: %w", s.Name, s.Err)
	}
}

// addHealth adds a shard's delivery health to a total: the newest error
// and success, and the failures since each shard's last success.
func addHealth(total *ShardStats, h *DeliveryHealth) {
	if h == nil {
		return
	}
	if total.Delivery == nil {
		total.Delivery = &DeliveryHealth{}
	}
	t := total.Delivery
	if h.LastErrorTime.After(t.LastErrorTime) {
		t.LastError, t.LastErrorTime = h.LastError, h.LastErrorTime
	}
	if h.LastSuccess.After(t.LastSuccess) {
		t.LastSuccess = h.LastSuccess
	}
	t.ConsecutiveFailures += h.ConsecutiveFailures
	// The topic has failed since its first failing shard did, and stays
	// paused while any shard is.
	if !h.FailingSince.IsZero() && (t.FailingSince.IsZero() || h.FailingSince.Before(t.FailingSince)) {
		t.FailingSince = h.FailingSince
	}
	if h.PausedUntil.After(t.PausedUntil) {
		t.PausedUntil = h.PausedUntil
	}
}
