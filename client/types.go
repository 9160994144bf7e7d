package client

import (
	"math"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	heraldv1 "herald/proto/herald/v1"
)

// Topic is a named stream of events split into shards.
type Topic struct {
	Name string `json:"name"`
	// Attributes holds every attribute as a string, defaults included:
	// "shards", "persistent", "push_endpoint" and so on.
	Attributes map[string]string `json:"attributes"`
	CreatedAt  time.Time         `json:"created_at,omitzero"`
	UpdatedAt  time.Time         `json:"updated_at,omitzero"`
}

// Event is an event to publish or commit.
type Event struct {
	// Key routes the event to its shard; events with the same key are
	// delivered in the order they were committed.
	Key     string            `json:"key"`
	Payload []byte            `json:"payload"`
	Headers map[string]string `json:"headers,omitempty"`
	// DedupID, if set, makes publishing the event idempotent: publishing
	// an event with the same DedupID and key to the topic again within
	// the server's dedup window (2 minutes by default) returns the first
	// event's id instead of appending it again. Publish only; at most 128
	// bytes, unique within a call. WithPublishRetries sets one on every
	// event that has none.
	DedupID string `json:"dedup_id,omitempty"`
}

// Delivery is an event handed out by Fetch. It stays leased until it is
// acknowledged with Ack, released with Nack, or its visibility timeout ends.
type Delivery struct {
	// ID is "<topic>/<shard>/<offset>": stable, what consumers de-duplicate on.
	ID string `json:"id"`
	// Receipt names this delivery, "<id>.<lease>". Ack or Nack it rather
	// than ID: it acts only while this delivery's lease is the event's, so
	// an ack that comes after the event was handed out again ends nobody
	// else's lease (Ack then returns a *LapsedError).
	Receipt string            `json:"receipt,omitempty"`
	Topic   string            `json:"topic"`
	Shard   int               `json:"shard"`
	Offset  uint64            `json:"offset"`
	Key     string            `json:"key"`
	Payload []byte            `json:"payload"`
	Headers map[string]string `json:"headers,omitempty"`
	// Time is when the event was published.
	Time time.Time `json:"time,omitzero"`
	// Attempt counts the times the event was handed out, this one included.
	Attempt int `json:"attempt"`
}

// TopicStats holds a topic's counters, summed over its shards and per shard.
type TopicStats struct {
	Name   string       `json:"name"`
	Total  ShardStats   `json:"total"`
	Shards []ShardStats `json:"shards"`
}

// ShardStats holds the counters of one shard, or their sum over a topic.
type ShardStats struct {
	Shard int    `json:"shard"`
	Name  string `json:"name"`
	// Events and Bytes count committed events not yet acknowledged.
	Events        uint64 `json:"events"`
	Bytes         uint64 `json:"bytes"`
	ReservedBytes uint64 `json:"reserved_bytes"`
	Reservations  int    `json:"reservations"`
	// OldestEventTime is the publish time of the oldest unacknowledged
	// event; zero if there is none.
	OldestEventTime time.Time `json:"oldest_event_time,omitzero"`
	Published       uint64    `json:"published"`
	Acked           uint64    `json:"acked"`
	Leased          uint64    `json:"leased"`
	NextOffset      uint64    `json:"next_offset"`
	Head            uint64    `json:"head"`
	// Push delivery: events delivered to the endpoint, events a
	// subscription's filter skipped, failed attempts retried, events
	// dead-lettered in all, and dead letters held now.
	Delivered       uint64 `json:"delivered"`
	Skipped         uint64 `json:"skipped"`
	Retried         uint64 `json:"retried"`
	DeadLettered    uint64 `json:"dead_lettered"`
	DeadLetters     uint64 `json:"dead_letters"`
	DeadLetterBytes uint64 `json:"dead_letter_bytes"`
	// Error is set when the shard cannot serve, for example because its
	// log is damaged.
	Error string `json:"error,omitempty"`
	// Delivery is the health of push delivery. It lives in the memory of
	// the shard's leader: nil in other nodes' answers, and for topics
	// without a push endpoint.
	Delivery *DeliveryHealth `json:"delivery,omitempty"`
	// Tiering (serve --tier-url): the shard's last reconciled log index
	// (0 in a total), the first index of its log on the answering node's
	// disk (0 in a total: entries below it are read from the object
	// store), the bytes of that log, and the bytes of its entries in the
	// object store.
	LRO         uint64 `json:"lro"`
	LocalFirst  uint64 `json:"local_first"`
	LocalBytes  uint64 `json:"local_bytes"`
	TieredBytes uint64 `json:"tiered_bytes"`
	// TierError says why the last tiering cycle of the shard's leader
	// failed; empty if it went well, and in other nodes' answers.
	TierError string `json:"tier_error,omitempty"`
}

// DeliveryHealth is how a shard's pushes are going, since its leader
// became leader; in a topic's total, the newest error and success, and the
// failures summed.
type DeliveryHealth struct {
	LastError     string    `json:"last_error,omitempty"`
	LastErrorTime time.Time `json:"last_error_time,omitzero"`
	// ConsecutiveFailures counts failed attempts since the last success.
	ConsecutiveFailures uint64    `json:"consecutive_failures"`
	LastSuccess         time.Time `json:"last_success,omitzero"`
	// FailingSince is when the current run of failures began; zero unless
	// failing.
	FailingSince time.Time `json:"failing_since,omitzero"`
	// PausedUntil is until when the endpoint asked (Retry-After) not to be
	// sent to; zero unless paused now.
	PausedUntil time.Time `json:"paused_until,omitzero"`
}

// UnreadableShard is a shard that Fetch could not read, for example because
// its log is damaged: whatever events it holds were not handed out.
type UnreadableShard struct {
	Shard int    `json:"shard"`
	Name  string `json:"name"`
	// Reason says why and what to do; for a damaged log it names the file
	// and the byte offset.
	Reason string `json:"reason"`
}

// Reservation is space held in a shard for a later Commit.
type Reservation struct {
	ID        string    `json:"id"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// FetchOptions tunes Fetch. The zero value takes the server's defaults.
type FetchOptions struct {
	// MaxEvents bounds the events returned (server default 100).
	MaxEvents int
	// VisibilityTimeout is how long the events stay leased before they may
	// be handed out again (server default 30s).
	VisibilityTimeout time.Duration
	// Wait is how long to wait for an event when none is available
	// (default 0: return at once).
	Wait time.Duration
	// Subscription names the pull subscription to fetch from ("": the
	// topic's default one). Each subscription has its own progress and
	// leases; the receipts of its deliveries name it, so Ack and Nack of
	// them need not.
	Subscription string
}

func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func toUint32(n int) uint32 {
	switch {
	case n < 0:
		return 0
	case uint64(n) > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}

func topicFromProto(t *heraldv1.Topic) *Topic {
	if t == nil {
		return nil
	}
	attrs := t.GetAttributes()
	if attrs == nil {
		attrs = map[string]string{}
	}
	return &Topic{
		Name:       t.GetName(),
		Attributes: attrs,
		CreatedAt:  timeOf(t.GetCreatedAt()),
		UpdatedAt:  timeOf(t.GetUpdatedAt()),
	}
}

func eventsToProto(events []Event) []*heraldv1.PublishEvent {
	out := make([]*heraldv1.PublishEvent, len(events))
	for i, e := range events {
		out[i] = &heraldv1.PublishEvent{Key: e.Key, Payload: e.Payload, Headers: e.Headers, DedupId: e.DedupID}
	}
	return out
}

func unreadableFromProto(shards []*heraldv1.UnreadableShard) []UnreadableShard {
	out := make([]UnreadableShard, len(shards))
	for i, u := range shards {
		out[i] = UnreadableShard{Shard: int(u.GetShard()), Name: u.GetName(), Reason: u.GetReason()}
	}
	return out
}

func deliveryFromProto(e *heraldv1.Event) Delivery {
	return Delivery{
		ID:      e.GetId(),
		Receipt: e.GetReceipt(),
		Topic:   e.GetTopic(),
		Shard:   int(e.GetShard()),
		Offset:  e.GetOffset(),
		Key:     e.GetKey(),
		Payload: e.GetPayload(),
		Headers: e.GetHeaders(),
		Time:    timeOf(e.GetTime()),
		Attempt: int(e.GetDeliveryAttempt()),
	}
}

func shardStatsFromProto(s *heraldv1.ShardStats) ShardStats {
	return ShardStats{
		Shard:           int(s.GetShard()),
		Name:            s.GetName(),
		Events:          s.GetEvents(),
		Bytes:           s.GetBytes(),
		ReservedBytes:   s.GetReservedBytes(),
		Reservations:    int(s.GetReservations()),
		OldestEventTime: timeOf(s.GetOldestEventTime()),
		Published:       s.GetPublished(),
		Acked:           s.GetAcked(),
		Leased:          s.GetLeased(),
		NextOffset:      s.GetNextOffset(),
		Head:            s.GetHead(),
		Delivered:       s.GetDelivered(),
		Skipped:         s.GetSkipped(),
		Retried:         s.GetRetried(),
		DeadLettered:    s.GetDeadLettered(),
		DeadLetters:     s.GetDeadLetters(),
		DeadLetterBytes: s.GetDeadLetterBytes(),
		Error:           s.GetError(),
		Delivery:        deliveryHealthFromProto(s.GetDelivery()),
		LRO:             s.GetLro(),
		LocalFirst:      s.GetLocalFirst(),
		LocalBytes:      s.GetLocalBytes(),
		TieredBytes:     s.GetTieredBytes(),
		TierError:       s.GetTierError(),
	}
}

func deliveryHealthFromProto(h *heraldv1.DeliveryHealth) *DeliveryHealth {
	if h == nil {
		return nil
	}
	return &DeliveryHealth{LastError: h.GetLastError(), LastErrorTime: timeOf(h.GetLastErrorTime()),
		ConsecutiveFailures: h.GetConsecutiveFailures(), LastSuccess: timeOf(h.GetLastSuccess()),
		FailingSince: timeOf(h.GetFailingSince()), PausedUntil: timeOf(h.GetPausedUntil())}
}
