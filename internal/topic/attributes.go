package topic

import (
	"encoding/json"
	"maps"
)

// Limits and defaults of topic attributes.
const (
	DefaultShards = 11
	MaxShards     = 1024

	// DefaultMaxQueueBytes is the default limit of one shard's pending and
	// reserved bytes. The limit is per shard, so a topic holds up to
	// Shards times as much.
	DefaultMaxQueueBytes = 256 << 20

	// DefaultRetrySleepDuration is the default pause, in seconds, before
	// an event whose delivery failed is retried. One second is long enough
	// not to hammer a failing endpoint and short enough that a brief outage
	// adds little latency.
	DefaultRetrySleepDuration = 1

	// DefaultHTTPTimeout is the default time limit, in seconds, of one
	// delivery attempt to an HTTP endpoint.
	DefaultHTTPTimeout = 10

	// MaxSeconds is the largest value of the attributes measured in
	// seconds: the most that still fits a time.Duration (about 292 years).
	MaxSeconds = 1<<63/1_000_000_000 - 1
)

// Attributes are a topic's settings. They are stored by the controller as
// JSON, so the JSON field names are part of the on-disk format; they are the
// same as the attribute names accepted by With.
//
// Zero values do not mean "default": use Defaults and With to build
// Attributes, and Validate before using them.
type Attributes struct {
	// Persistent topics store events until they are delivered. A
	// non-persistent topic pushes each event synchronously and stores
	// nothing, so it needs a PushEndpoint.
	Persistent bool `json:"persistent"`
	// Shards is the number of shards, 1 to MaxShards. It is fixed when the
	// topic is created, because it decides which shard each key goes to.
	Shards int `json:"shards"`
	// PushEndpoint is the URI events are delivered to; its scheme picks the
	// protocol (http, https, amqp, amqps, kafka, nats). Empty means the
	// topic is pull-only.
	PushEndpoint string `json:"push_endpoint"`
	// TimeToLive is how long, in seconds, an event may wait for delivery
	// before it goes to the dead-letter queue; 0 means forever.
	TimeToLive int64 `json:"time_to_live"`
	// MaxRetries is how many times a failed delivery is retried before the
	// event goes to the dead-letter queue; 0 means forever.
	MaxRetries int `json:"max_retries"`
	// RetrySleepDuration is the pause, in seconds, before a failed delivery
	// is retried; 0 retries at once.
	RetrySleepDuration int64 `json:"retry_sleep_duration"`
	// MaxQueueBytes limits each shard's pending plus reserved bytes; a full
	// shard refuses new events. 0 means unlimited.
	MaxQueueBytes int64 `json:"max_queue_bytes"`
	// Retention is how long, in seconds, each shard keeps an event after
	// every subscription is done with it, so that a subscription can
	// start from the earliest retained event or seek back and have it
	// delivered again. 0 frees an event as soon as every subscription is
	// done with it. Retained events count against nothing but the disk.
	Retention int64 `json:"retention"`
	// LocalRetentionBytes is how many bytes of each shard's newest log a
	// node keeps on its own disk when it tiers to object storage (serve
	// --tier-url): older log segments, once uploaded and recorded, are
	// deleted locally and read back from the object store when needed. 0
	// takes the node's default (serve --tier-local-retention).
	LocalRetentionBytes int64 `json:"local_retention_bytes"`
	// OpaqueData is copied into every event delivered from the topic.
	OpaqueData string `json:"opaque_data"`

	// AMQPExchange is the exchange events are published to; required by
	// amqp and amqps endpoints.
	AMQPExchange string `json:"amqp_exchange"`
	// AMQPRoutingKey is the routing key of published messages; empty means
	// the herald topic's name.
	AMQPRoutingKey string `json:"amqp_routing_key"`
	// AMQPAckLevel is when a delivery counts as done: "none" as soon as the
	// message is sent, "broker" when the broker confirms it.
	AMQPAckLevel string `json:"amqp_ack_level"`

	// KafkaTopic is the Kafka topic events go to; empty means the herald
	// topic's name.
	KafkaTopic string `json:"kafka_topic"`
	// KafkaAcks is the producer acknowledgement level: "none", "leader" or
	// "all" (all in-sync replicas).
	KafkaAcks string `json:"kafka_acks"`

	// NATSSubject is the subject events are published on; empty means the
	// herald topic's name.
	NATSSubject string `json:"nats_subject"`
	// NATSJetStream publishes through JetStream and waits for its
	// acknowledgement, instead of fire-and-forget core NATS.
	NATSJetStream bool `json:"nats_jetstream"`

	// HTTPHeaders are added to every HTTP delivery request.
	//
	// As a string (in With and Map) they are "Name: value" pairs separated
	// by ';', as in "X-Api-Key: k1; X-Env: prod". Header values may contain
	// ';' (Content-Type: text/plain; charset=utf-8): to write one, separate
	// the pairs with newlines instead. A string that contains a newline is
	// split only at newlines. Spaces around names and values are dropped,
	// and an empty string means no headers.
	HTTPHeaders map[string]string `json:"http_headers"`
	// HTTPTimeout limits one HTTP delivery attempt, in seconds; at least 1.
	HTTPTimeout int64 `json:"http_timeout"`
	// SigningSecret, when set, makes deliveries carry an HMAC signature
	// computed with it, so receivers can authenticate them.
	SigningSecret string `json:"signing_secret"`
	// SignatureScheme is how webhook deliveries are signed: "herald"
	// (X-Herald-Signature, an HMAC of the timestamp and body with the
	// secret as it is) or "standard-webhooks" (the Standard Webhooks
	// specification: webhook-id, webhook-timestamp and webhook-signature,
	// with SigningSecret a space-separated list of whsec_ secrets, each of
	// which signs, so that receivers can switch secrets one at a time).
	SignatureScheme string `json:"signature_scheme"`

	// TLSInsecureSkipVerify disables verification of the endpoint's
	// certificate. Only for https and amqps endpoints, and only for tests.
	TLSInsecureSkipVerify bool `json:"tls_insecure_skip_verify"`
	// TLSCAFile is an absolute path, on every herald node, of a PEM file of
	// CA certificates to verify the endpoint with, instead of the system
	// roots. Only for https and amqps endpoints.
	TLSCAFile string `json:"tls_ca_file"`
}

// Defaults returns the attributes of a topic created without any.
func Defaults() Attributes {
	return Attributes{
		Persistent:         true,
		Shards:             DefaultShards,
		RetrySleepDuration: DefaultRetrySleepDuration,
		MaxQueueBytes:      DefaultMaxQueueBytes,
		AMQPAckLevel:       "broker",
		KafkaAcks:          "all",
		HTTPTimeout:        DefaultHTTPTimeout,
		SignatureScheme:    SignatureHerald,
	}
}

// Clone returns a deep copy of a, one that shares no map with it.
func (a Attributes) Clone() Attributes {
	a.HTTPHeaders = maps.Clone(a.HTTPHeaders)
	return a
}

// UnmarshalJSON decodes attributes, taking fields missing from data from
// Defaults rather than leaving them zero. Stored attributes written before
// an attribute existed therefore get its default when read back.
func (a *Attributes) UnmarshalJSON(data []byte) error {
	type plain Attributes // without methods, so this does not recurse
	p := plain(Defaults())
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*a = Attributes(p)
	return nil
}
