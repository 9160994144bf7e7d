package node

import (
	"maps"
	"slices"
	"time"

	"herald/internal/controller"
	"herald/internal/shard"
)

// Topic is a topic as the node's callers see it.
type Topic struct {
	Name string
	// Attributes holds every attribute as a string, defaults included.
	Attributes map[string]string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

func topicOf(t controller.Topic) Topic {
	return Topic{
		Name:       t.Name,
		Attributes: t.Attributes.Map(),
		CreatedAt:  time.Unix(0, t.CreatedAt),
		UpdatedAt:  time.Unix(0, t.UpdatedAt),
	}
}

// Event is an event to publish, or the event of a Delivery.
type Event struct {
	Key     string
	Payload []byte
	Headers map[string]string
	// DedupID, when set on a published event, makes the publish
	// idempotent: publishing an event with the same DedupID and key to the
	// same topic again within the node's dedup window returns the first
	// event's id instead of appending it again. Publish only.
	DedupID string
}

// dedupIDs returns the events' dedup ids, or nil if none has one.
func dedupIDs(in []Event) []string {
	var ids []string
	for i, e := range in {
		if e.DedupID != "" && ids == nil {
			ids = make([]string, len(in))
		}
		if ids != nil {
			ids[i] = e.DedupID
		}
	}
	return ids
}

// shardEvents converts events to the shard's form. Headers are sorted by
// name, so what is stored does not depend on map iteration order.
func shardEvents(in []Event) []shard.Event {
	out := make([]shard.Event, len(in))
	for i, e := range in {
		out[i] = shard.Event{Key: e.Key, Payload: e.Payload}
		if len(e.Headers) == 0 {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(e.Headers)) {
			out[i].Headers = append(out[i].Headers, shard.Header{Name: name, Value: e.Headers[name]})
		}
	}
	return out
}

func eventOf(e shard.Event) Event {
	return Event{Key: e.Key, Payload: e.Payload, Headers: e.HeaderMap()}
}

// QueueStats are a shard's counters, or their sums over a topic's shards;
// the fields are documented on shard.Stats, of which this is the node's
// copy.
type QueueStats shard.Stats
