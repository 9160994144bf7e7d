package node

import (
	"fmt"
	"sync"

	"herald/internal/controller"
	"herald/internal/topic"
)

// registry is what the node knows of the controller's state, as the
// request paths and the node's jobs read it: the runtimes of the topics
// and of the shards held here, the members, and the rebalance under way.
// Only a reconcile (reconcile.go) changes it, replacing the topics as a
// whole; everything else reads it.
type registry struct {
	mu     sync.RWMutex
	topics map[string]*topicRuntime
	shards map[uint64]*shardRuntime // by group id, including broken ones
	// members are the members as the controller records them; nil until
	// the first membership change.
	members []controller.Member
	// rebalancing: a rebalance is under way, and move the replica it
	// moves (nil if none), as of the topics above: the cluster's status
	// and the balancer read them together.
	rebalancing bool
	move        *controller.Move
	// lastSubscription is the controller's LastSubscription as of the
	// topics above: a shard's cursor for an id up to it that no topic
	// lists belongs to a deleted subscription.
	lastSubscription uint64
}

func newRegistry() *registry {
	return &registry{topics: make(map[string]*topicRuntime), shards: make(map[uint64]*shardRuntime)}
}

// lookup returns the runtime of a topic.
func (r *registry) lookup(name string) (*topicRuntime, error) {
	if err := topic.ValidateName(name); err != nil {
		return nil, err
	}
	r.mu.RLock()
	tr := r.topics[name]
	r.mu.RUnlock()
	if tr == nil {
		return nil, controller.NotFoundError(name)
	}
	return tr, nil
}

// resolvedShard is a shard with its topic.
type resolvedShard struct {
	topic      *topicRuntime
	rt         *shardRuntime
	shardCount int
}

// shardOf returns a topic's shard by index.
func (r *registry) shardOf(topicName string, idx int) (resolvedShard, error) {
	tr, err := r.lookup(topicName)
	if err != nil {
		return resolvedShard{}, err
	}
	if idx < 0 || idx >= len(tr.shards) {
		return resolvedShard{}, fmt.Errorf("%w: topic %q has %d shards, there is no shard %d", ErrNotFound, topicName, len(tr.shards), idx)
	}
	return resolvedShard{topic: tr, rt: tr.shards[idx], shardCount: len(tr.shards)}, nil
}

// reservationShard returns the shard of a reservation id, and the
// reservation's number within it.
func (r *registry) reservationShard(id string) (resolvedShard, uint64, error) {
	topicName, idx, rid, err := topic.ParseReservationID(id)
	if err != nil {
		return resolvedShard{}, 0, err
	}
	s, err := r.shardOf(topicName, idx)
	return s, rid, err
}

// shard returns the runtime of one of this node's shards by group,
// whether it serves or could not be opened.
func (r *registry) shard(group uint64) (*shardRuntime, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.shards[group]
	return s, ok
}

// hasShard reports whether the group is one of this node's shards,
// whether it serves or could not be opened.
func (r *registry) hasShard(group uint64) bool {
	_, ok := r.shard(group)
	return ok
}

// localShards returns this node's shards, in no order.
func (r *registry) localShards() []*shardRuntime {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*shardRuntime, 0, len(r.shards))
	for _, s := range r.shards {
		out = append(out, s)
	}
	return out
}

// topicList returns the topics' runtimes, in no order.
func (r *registry) topicList() []*topicRuntime {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*topicRuntime, 0, len(r.topics))
	for _, tr := range r.topics {
		out = append(out, tr)
	}
	return out
}

// cluster returns the members, and whether a rebalance is under way.
func (r *registry) cluster() (members []controller.Member, rebalancing bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.members, r.rebalancing
}
