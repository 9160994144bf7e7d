package controller

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"herald/internal/topic"
)

// ControllerGroup is the Raft group id of the controller itself. Shard
// groups are numbered after it, from ControllerGroup+1.
const ControllerGroup uint64 = 1

// A Topic is a topic as the controller records it.
type Topic struct {
	Name       string           `json:"name"`
	Attributes topic.Attributes `json:"attributes"`
	// FirstGroup is the Raft group id of shard 0; shard i is group
	// FirstGroup+i. Group ids are never reused, not even after the topic
	// is deleted, so that a stale replica of a deleted shard can never be
	// mistaken for a shard of a newer topic.
	FirstGroup uint64 `json:"first_group"`
	// Placement lists, per shard, the nodes that hold a replica of it;
	// the first is the shard's preferred leader. Topics created before
	// herald had clusters have none: their shards live on node 1.
	Placement [][]uint64 `json:"placement,omitempty"`
	// Bootstrap lists, per shard, the voters its group was created with,
	// once replicas have moved and Placement no longer says: a replica
	// added later starts from the same configuration as the first ones
	// did, then replays the changes since, so every replica agrees on
	// the group's membership.
	Bootstrap [][]uint64 `json:"bootstrap,omitempty"`
	CreatedAt int64      `json:"created_at"` // Unix nanoseconds, from the command
	UpdatedAt int64      `json:"updated_at"` // Unix nanoseconds, from the command
	// Subscriptions are the topic's named subscriptions, sorted by name;
	// SubscriptionList adds the default one.
	Subscriptions []Subscription `json:"subscriptions,omitempty"`
	// Default is the state of the topic's default subscription.
	Default DefaultSubscription `json:"default_subscription,omitzero"`
}

// Group returns the Raft group id of shard i of t.
func (t *Topic) Group(i int) uint64 { return t.FirstGroup + uint64(i) }

// Replicas returns the nodes that hold shard i of t, the preferred leader
// first.
func (t *Topic) Replicas(i int) []uint64 {
	if i < len(t.Placement) {
		return t.Placement[i]
	}
	return []uint64{legacyNode}
}

// BootstrapVoters returns the voters the group of shard i was created
// with: the configuration a new replica of it starts from.
func (t *Topic) BootstrapVoters(i int) []uint64 {
	if i < len(t.Bootstrap) {
		return t.Bootstrap[i]
	}
	return t.Replicas(i)
}

// legacyNode is the node that holds the shards of topics created before
// herald had clusters: a lone node's id has always been 1.
const legacyNode = 1

// ReplicationFactor is how many nodes hold each shard, when the cluster
// has that many.
const ReplicationFactor = 3

// Place spreads the shards of a topic whose shard 0 is group firstGroup
// over members: each shard on ReplicationFactor of them (all, when there
// are fewer), consecutive in members' order from a starting node that
// moves one further with each group, so replicas and preferred leaders
// are spread evenly.
func Place(members []uint64, firstGroup uint64, shards int) [][]uint64 {
	members = slices.Sorted(slices.Values(members))
	k := min(ReplicationFactor, len(members))
	out := make([][]uint64, shards)
	for i := range shards {
		start := int((firstGroup + uint64(i)) % uint64(len(members)))
		for j := range k {
			out[i] = append(out[i], members[(start+j)%len(members)])
		}
	}
	return out
}

func (t *Topic) clone() Topic {
	c := *t
	c.Attributes = t.Attributes.Clone()
	c.Placement = make([][]uint64, len(t.Placement))
	for i, r := range t.Placement {
		c.Placement[i] = slices.Clone(r)
	}
	if t.Placement == nil {
		c.Placement = nil
	}
	if t.Bootstrap != nil {
		c.Bootstrap = make([][]uint64, len(t.Bootstrap))
		for i, r := range t.Bootstrap {
			c.Bootstrap[i] = slices.Clone(r)
		}
	}
	if t.Subscriptions != nil {
		c.Subscriptions = make([]Subscription, len(t.Subscriptions))
		for i := range t.Subscriptions {
			c.Subscriptions[i] = t.Subscriptions[i].clone()
		}
	}
	return c
}

// A Result is what Apply returns for a command: the topic (and, for a
// subscription op, the subscription) as the command left it (for a delete,
// as it was before), or the reason the command was rejected.
type Result struct {
	Topic Topic
	// Subscription is, for a subscription op, the subscription as the
	// command left it (for a delete, as it was before).
	Subscription Subscription
	Err          error
}

// A Member is a node of the cluster as the controller records it.
type Member struct {
	ID uint64 `json:"id"`
	// Address is where the node listens (host:port), for nodes added
	// with OpAddNode; the nodes the cluster started with are known by
	// their --peers.
	Address string `json:"address,omitempty"`
	// Draining means the node's replicas are moving off it and no new
	// shard is placed on it.
	Draining bool `json:"draining,omitempty"`
}

// State is the controller's state machine. Its zero value is not usable;
// create one with New. A State is not safe for concurrent use.
type State struct {
	applied   uint64
	nextGroup uint64 // the group id the next created topic's shard 0 gets
	topics    map[string]*Topic
	// members, sorted by id, are recorded from the first membership
	// change on; before that, each proposer's --peers are the members.
	members  []Member
	founders []uint64 // see Founders
	// rebalancing says a rebalance is under way (see RebalanceStep), and
	// move is the replica it moves, until the move is done (nil then).
	rebalancing bool
	move        *Move
	cluster     string // see Cluster
	// lastSubscription is the id the last created subscription got, of
	// any topic: ids are never reused (see Subscription.ID).
	lastSubscription uint64
	// tierObjects is the manifest of tiered objects, by name, and
	// tierGroups indexes their runs by Raft group (see tier.go). Both
	// are nil until the first object is recorded.
	tierObjects map[string]*tierObject
	tierGroups  map[uint64]*tierGroup
}

// New returns an empty state.
func New() *State {
	return &State{nextGroup: ControllerGroup + 1, topics: make(map[string]*Topic)}
}

// Apply decodes the command in the log entry at index, applies it, and
// returns its Result. A command that does not decode, or is invalid for
// the current state, is rejected in the Result; replicas reject it alike,
// so they stay identical.
func (s *State) Apply(index uint64, data []byte) any {
	if index <= s.applied {
		// The host applies each index once, in order; anything else is a
		// bug there, and applying the entry again could corrupt the state.
		return Result{Err: fmt.Errorf("controller: log index %d is not after applied index %d; entries must be applied once, in order", index, s.applied)}
	}
	s.applied = index
	c, err := UnmarshalCommand(data)
	if err != nil {
		return Result{Err: err}
	}
	switch c.Op {
	case OpAddNode:
		return s.addNode(&c)
	case OpDrainNode:
		return s.drainNode(&c)
	case OpForgetNode:
		return s.forgetNode(&c)
	case OpRebalance, OpRebalanceDone:
		s.rebalancing = c.Op == OpRebalance
		return Result{}
	case OpNameCluster:
		if s.cluster == "" { // the first one proposed wins, on every replica
			s.cluster = c.Cluster
		}
		return Result{}
	case OpRecordTierObject:
		return s.recordTierObject(index, &c)
	case OpForgetTierObject:
		return s.forgetTierObject(&c)
	}
	if err := topic.ValidateName(c.Name); err != nil {
		return Result{Err: err}
	}
	if slices.Contains(subscriptionOps, c.Op) {
		if err := topic.ValidateSubscriptionName(c.Subscription); err != nil {
			return Result{Err: err}
		}
		return s.applySubscription(&c)
	}
	switch c.Op {
	case OpCreate:
		return s.create(&c)
	case OpSet:
		return s.set(&c)
	case OpAddReplica:
		return s.addReplica(&c)
	case OpRemoveReplica:
		return s.removeReplica(&c)
	case OpMoveReplica:
		return s.moveReplica(&c)
	case OpSetPreferred:
		return s.setPreferred(&c)
	default: // OpDelete: UnmarshalCommand accepts no other op
		return s.delete(&c)
	}
}

func (s *State) create(c *Command) Result {
	if _, ok := s.topics[c.Name]; ok {
		return Result{Err: topicExists(c.Name)}
	}
	attrs := c.Attributes.Clone()
	if err := attrs.Validate(); err != nil {
		return Result{Err: err}
	}
	t := &Topic{
		Name:       c.Name,
		Attributes: attrs,
		FirstGroup: s.nextGroup,
		CreatedAt:  c.Time,
		UpdatedAt:  c.Time,
	}
	if members := s.placeable(c.Members); len(members) > 0 {
		t.Placement = Place(members, t.FirstGroup, attrs.Shards)
	}
	s.nextGroup += uint64(attrs.Shards)
	s.topics[t.Name] = t
	return Result{Topic: t.clone()}
}

func (s *State) set(c *Command) Result {
	t, ok := s.topics[c.Name]
	if !ok {
		return Result{Err: NotFoundError(c.Name)}
	}
	attrs, err := t.Attributes.With(c.Changes)
	if err != nil {
		return Result{Err: err}
	}
	// Checked before Validate, so that an out-of-range shard count is
	// reported as what it is: an attempt to change a fixed value.
	if attrs.Shards != t.Attributes.Shards {
		return Result{Err: shardsFixed(t.Name, t.Attributes.Shards)}
	}
	if err := attrs.Validate(); err != nil {
		return Result{Err: err}
	}
	t.Attributes = attrs
	t.UpdatedAt = c.Time
	return Result{Topic: t.clone()}
}

func (s *State) delete(c *Command) Result {
	t, ok := s.topics[c.Name]
	if !ok {
		return Result{Err: NotFoundError(c.Name)}
	}
	delete(s.topics, c.Name)
	if s.move != nil && s.move.Topic == c.Name {
		s.move = nil
	}
	return Result{Topic: *t} // t is no longer referenced by s
}

// Topic returns a copy of the topic called name, if it exists.
func (s *State) Topic(name string) (Topic, bool) {
	t, ok := s.topics[name]
	if !ok {
		return Topic{}, false
	}
	return t.clone(), true
}

// Topics returns copies of all topics, sorted by name.
func (s *State) Topics() []Topic {
	ts := make([]Topic, 0, len(s.topics))
	for _, name := range slices.Sorted(maps.Keys(s.topics)) {
		ts = append(ts, s.topics[name].clone())
	}
	return ts
}

// Members returns the cluster's members, sorted by id, once a membership
// change has recorded them; nil before.
func (s *State) Members() []Member { return slices.Clone(s.members) }

// Cluster returns the cluster's id, empty until OpNameCluster has given
// one. It never changes once given.
func (s *State) Cluster() string { return s.cluster }

// Applied returns the index of the last log entry applied.
func (s *State) Applied() uint64 { return s.applied }

// CompactIndex returns applied+1: the state holds everything it needs, so
// the host may discard every applied entry once it has a snapshot.
func (s *State) CompactIndex() uint64 { return s.applied + 1 }

// snapshot is the encoding of a State. Its JSON field names are an
// on-disk format.
type snapshot struct {
	Version   int      `json:"version"`
	Applied   uint64   `json:"applied"`
	NextGroup uint64   `json:"next_group"`
	Topics    []Topic  `json:"topics"`             // sorted by name
	Members   []Member `json:"members,omitempty"`  // sorted by id
	Founders  []uint64 `json:"founders,omitempty"` // sorted
	// Rebalancing and Move: see State.rebalancing.
	Rebalancing bool  `json:"rebalancing,omitempty"`
	Move        *Move `json:"move,omitempty"`
	// Cluster: see State.Cluster.
	Cluster string `json:"cluster,omitempty"`
	// LastSubscription: see State.lastSubscription. Snapshots written
	// before herald had subscriptions have none, and no subscriptions.
	LastSubscription uint64 `json:"last_subscription,omitempty"`
	// TierObjects is the manifest of tiered objects, sorted by name.
	// Snapshots written before herald tiered have none: an empty
	// manifest.
	TierObjects []snapshotTierObject `json:"tier_objects,omitempty"`
}

const snapshotVersion = 1

// Snapshot encodes the whole state. Equal states encode to equal bytes:
// topics are sorted by name, and encoding/json sorts map keys.
func (s *State) Snapshot() ([]byte, error) {
	return json.Marshal(snapshot{
		Version:   snapshotVersion,
		Applied:   s.applied,
		NextGroup: s.nextGroup,
		Topics:    s.Topics(),
		Members:   s.members,
		Founders:  s.founders,

		Rebalancing: s.rebalancing,
		Move:        s.move,
		Cluster:     s.cluster,

		LastSubscription: s.lastSubscription,
		TierObjects:      s.snapshotTier(),
	})
}

// Restore replaces the state with the one encoded in data by Snapshot;
// empty data means the empty state. On error the state is unchanged.
func (s *State) Restore(data []byte) error {
	if len(data) == 0 {
		*s = *New()
		return nil
	}
	var snap snapshot
	if err := json.Unmarshal(data, &snap); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidSnapshot, err)
	}
	if err := snap.check(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidSnapshot, err)
	}
	r := New()
	r.applied, r.nextGroup, r.members, r.founders = snap.Applied, snap.NextGroup, snap.Members, snap.Founders
	r.rebalancing, r.move, r.cluster = snap.Rebalancing, snap.Move, snap.Cluster
	r.lastSubscription = snap.LastSubscription
	for i := range snap.Topics {
		t := snap.Topics[i]
		r.topics[t.Name] = &t
	}
	if err := snap.restoreTier(r); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidSnapshot, err)
	}
	*s = *r
	return nil
}

// check verifies the invariants Apply maintains, so that a corrupt or
// foreign snapshot is refused rather than served. It does not re-validate
// attributes: a rule tightened in a later version must not make existing
// topics unreadable.
func (snap *snapshot) check() error {
	if snap.Version != snapshotVersion {
		return fmt.Errorf("version %d, want %d", snap.Version, snapshotVersion)
	}
	if snap.NextGroup <= ControllerGroup {
		return fmt.Errorf("next group id %d is not after the controller's group %d", snap.NextGroup, ControllerGroup)
	}
	for i, t := range snap.Topics {
		if err := topic.ValidateName(t.Name); err != nil {
			return err
		}
		if i > 0 && snap.Topics[i-1].Name >= t.Name {
			return fmt.Errorf("topics %q and %q are not sorted and unique", snap.Topics[i-1].Name, t.Name)
		}
		if n := t.Attributes.Shards; n < 1 || n > topic.MaxShards {
			return fmt.Errorf("topic %q has %d shards", t.Name, n)
		}
		if t.Placement != nil && len(t.Placement) != t.Attributes.Shards {
			return fmt.Errorf("topic %q places %d shards, but has %d", t.Name, len(t.Placement), t.Attributes.Shards)
		}
		for i, r := range t.Placement {
			if len(r) == 0 || slices.Contains(r, 0) {
				return fmt.Errorf("topic %q places shard %d on nodes %v", t.Name, i, r)
			}
		}
		if t.Bootstrap != nil && len(t.Bootstrap) != len(t.Placement) {
			return fmt.Errorf("topic %q records the first voters of %d shards, but places %d", t.Name, len(t.Bootstrap), len(t.Placement))
		}
	}
	if err := snap.checkSubscriptions(); err != nil {
		return err
	}
	for i, m := range snap.Members {
		if m.ID == 0 || (i > 0 && snap.Members[i-1].ID >= m.ID) {
			return fmt.Errorf("members %v are not sorted, unique and from 1 up", snap.Members)
		}
	}
	for i, id := range snap.Founders {
		if id == 0 || (i > 0 && snap.Founders[i-1] >= id) {
			return fmt.Errorf("founders %v are not sorted, unique and from 1 up", snap.Founders)
		}
	}
	if m := snap.Move; m != nil {
		i, ok := slices.BinarySearchFunc(snap.Topics, m.Topic, func(t Topic, name string) int { return cmp.Compare(t.Name, name) })
		if !ok || m.Shard < 0 || m.Shard >= snap.Topics[i].Attributes.Shards || m.From == 0 || m.To == 0 {
			return fmt.Errorf("the replica move %+v names no shard of a topic, or node 0", *m)
		}
	}
	// Each topic's groups lie in [ControllerGroup+1, NextGroup), and no two
	// topics share a group.
	byGroup := slices.SortedFunc(slices.Values(snap.Topics), func(a, b Topic) int {
		return cmp.Compare(a.FirstGroup, b.FirstGroup)
	})
	next := ControllerGroup + 1
	for _, t := range byGroup {
		end := t.FirstGroup + uint64(t.Attributes.Shards)
		if t.FirstGroup < next || end < t.FirstGroup || end > snap.NextGroup {
			return fmt.Errorf("topic %q has groups %d-%d, which overlap another topic's or lie outside %d-%d",
				t.Name, t.FirstGroup, end-1, ControllerGroup+1, snap.NextGroup-1)
		}
		next = end
	}
	return nil
}
