// Package kafka delivers herald events to Apache Kafka, or a broker that
// speaks its protocol (Redpanda, ...), with the franz-go client.
//
// The push endpoint kafka://host:port[,host:port...] lists the seed
// brokers; the port defaults to 9092. Each event becomes one record of the
// Kafka topic named by the kafka_topic attribute, or of the one named like
// the herald topic when that is empty. The record's value is endpoint.Body
// and its key is the event key, so that Kafka's default partitioner puts
// all the events of a key in one partition and keeps them in order. It
// carries the same headers as herald's HTTP deliveries, the key verbatim,
// and the publish time:
//
//	X-Herald-Event-Id: orders/2/17   the event id, what receivers de-duplicate on
//	X-Herald-Topic: orders
//	X-Herald-Attempt: 1              in decimal, 1 for the first attempt
//	X-Herald-Key: customer-42
//	X-Herald-Publish-Time: 2026-11-21T10:00:00.123Z   RFC 3339, UTC
//
// The record's timestamp is the time of the send, not the publish time:
// franz-go times a record out sendTimeout (its RecordDeliveryTimeout) after
// the record's timestamp, and brokers may refuse or soon delete records
// whose timestamp lies far in the past (message.timestamp.before.max.ms,
// retention.ms). With the publish time there, an event older than those
// limits, such as a backlog after an outage, could never be delivered.
//
// The kafka_acks attribute sets when Send returns nil: "none" once the
// record has been written to the broker's socket, "leader" once the
// partition leader has stored it, "all" (the default) once every in-sync
// replica has. With "all" the producer is idempotent, so that its own
// retries neither duplicate nor reorder records; Kafka allows that only
// with acks=all.
//
// herald does not create Kafka topics: a topic the brokers still do not
// know after a few metadata refreshes is a permanent error, as is an event
// too large to be a record. Every other failure is retryable. The client
// connects on the first Send and reconnects by itself, so herald starts
// while the brokers are down and carries on when they come back.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"herald/internal/endpoint"
	"herald/internal/topic"
)

const (
	defaultPort = "9092"

	// sendTimeout limits a Send whose context has no deadline, so that it
	// returns while the brokers are down.
	sendTimeout = 30 * time.Second

	// maxRecordBytes is the producer's batch limit, the size of the
	// largest record it sends. It is Kafka's default (message.max.bytes):
	// a larger batch would be refused by a broker with default settings,
	// failing the small records batched with a large one too.
	maxRecordBytes = 1_000_012
)

// Endpoint produces to one Kafka topic. It is safe for concurrent use:
// records sent at the same time are batched into one produce request.
type Endpoint struct {
	client *kgo.Client
	topic  string // the Kafka topic
	shown  string // the endpoint URI, for messages
}

// New returns an endpoint that produces the events of topicName as a's
// attributes say. It checks the attributes but does not connect: the
// client connects when the first record is produced, only where g allows.
func New(topicName string, a topic.Attributes, g *endpoint.Guard) (*Endpoint, error) {
	e := &Endpoint{topic: a.KafkaTopic, shown: topic.RedactEndpoint(a.PushEndpoint)}
	if e.topic == "" {
		e.topic = topicName
	}
	brokers, err := parseBrokers(a.PushEndpoint)
	if err != nil {
		return nil, fmt.Errorf("kafka endpoint %s: %w", e.shown, err)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID("herald"),
		kgo.Dialer(g.DialContext),
		// The client's own limit, for the records of Sends that gave up.
		kgo.RecordDeliveryTimeout(sendTimeout),
		kgo.ProducerBatchMaxBytes(maxRecordBytes),
		// Send waits for its record, so waiting for more records to
		// fill a batch only adds latency; records that arrive while a
		// request is in flight are still batched.
		kgo.ProducerLinger(0),
	}
	switch a.KafkaAcks {
	case "none":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	case "leader":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	case "all":
		// Cancellation: a Send that gives up must not leave its record
		// waiting forever for a broker that may never answer. herald
		// delivers at least once anyway, so a record stored twice (what
		// idempotence would prevent) is acceptable.
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.AllowIdempotentProduceCancellation())
	default:
		return nil, fmt.Errorf("kafka endpoint %s: kafka_acks must be none, leader or all, got %q", e.shown, a.KafkaAcks)
	}
	if e.client, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("kafka endpoint %s: %w", e.shown, err)
	}
	return e, nil
}

// parseBrokers returns the host:port seed brokers of a kafka:// URI.
func parseBrokers(uri string) ([]string, error) {
	rest, ok := strings.CutPrefix(uri, "kafka://")
	if !ok {
		return nil, errors.New("not a kafka:// URI; use kafka://host:port[,host:port...]")
	}
	rest = strings.TrimSuffix(rest, "/") // an empty path
	if rest == "" || strings.ContainsAny(rest, "/?#@") {
		// Credentials, paths and options would otherwise be silently
		// ignored, or taken for part of a host name.
		return nil, errors.New("use kafka://host:port[,host:port...], without user, path or query")
	}
	var brokers []string
	for b := range strings.SplitSeq(rest, ",") {
		addr, err := parseBroker(b)
		if err != nil {
			return nil, err
		}
		brokers = append(brokers, addr)
	}
	return brokers, nil
}

// parseBroker returns host:port for host[:port].
func parseBroker(b string) (string, error) {
	host, port, err := net.SplitHostPort(b)
	if err != nil {
		host, port, err = net.SplitHostPort(b + ":" + defaultPort)
	}
	if err != nil || host == "" {
		return "", fmt.Errorf("broker %q is not host[:port]; list brokers as kafka://host:port[,host:port...]", b)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("broker %q: port %q is not a number from 1 to 65535", b, port)
	}
	return net.JoinHostPort(host, port), nil
}

// Send produces m and waits until the brokers have acknowledged it as
// kafka_acks says.
func (e *Endpoint) Send(ctx context.Context, m *endpoint.Message) error {
	body, err := endpoint.Body(m)
	if err != nil {
		return endpoint.Permanent(fmt.Errorf("kafka endpoint %s: encode event %s: %w", e.shown, m.ID, err))
	}
	r := &kgo.Record{
		Topic: e.topic,
		Key:   []byte(m.Key),
		Value: body,
		Headers: []kgo.RecordHeader{
			{Key: endpoint.HeaderEventID, Value: []byte(m.ID)},
			{Key: endpoint.HeaderTopic, Value: []byte(m.Topic)},
			{Key: endpoint.HeaderAttempt, Value: strconv.AppendInt(nil, int64(m.Attempt), 10)},
			{Key: endpoint.HeaderKey, Value: []byte(m.Key)},
			{Key: endpoint.HeaderPublishTime, Value: []byte(endpoint.FormatTime(m.Time))},
		},
		// The send time, so that timeouts run from now: see the package
		// comment.
		Timestamp: time.Now(),
	}
	if n := recordBytes(r); n > maxRecordBytes {
		return endpoint.Permanent(fmt.Errorf("kafka endpoint %s: event %s is %d bytes as a record, more than the %d bytes Kafka accepts by default; publish smaller payloads", e.shown, m.ID, n, maxRecordBytes))
	}
	// Not ProduceSync: it waits for the record's outcome even after ctx
	// ends, for as long as the client cannot tell whether a broker that
	// went away had stored it.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sendTimeout)
		defer cancel()
	}
	done := make(chan error, 1)
	e.client.Produce(ctx, r, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			return e.produceErr(m, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kafka endpoint %s: gave up waiting for the brokers to acknowledge event %s (it may still be stored, and then delivered twice): %w; herald retries", e.shown, m.ID, ctx.Err())
	}
}

// recordBytes is about the size of r in a batch, a little more than it
// takes there.
func recordBytes(r *kgo.Record) int {
	n := 64 + len(r.Key) + len(r.Value) // 64: lengths, offsets, timestamp
	for _, h := range r.Headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n
}

// produceErr classifies a failed produce: permanent if the topic does not
// exist, else retryable.
func (e *Endpoint) produceErr(m *endpoint.Message, err error) error {
	if errors.Is(err, kerr.UnknownTopicID) {
		// The topic was deleted and created again, under a new id. The
		// client keeps failing the old id until told to forget the
		// topic; the next Send then learns the new one.
		e.client.PurgeTopicsFromProducing(e.topic)
		return fmt.Errorf("kafka endpoint %s: topic %q was deleted and created again (%w); herald retries with the new topic", e.shown, e.topic, err)
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.InvalidTopicException) {
		return endpoint.Permanent(fmt.Errorf("kafka endpoint %s: topic %q does not exist on the brokers (%w); create it (herald does not create Kafka topics) or set kafka_topic to an existing topic", e.shown, e.topic, err))
	}
	return fmt.Errorf("kafka endpoint %s: produce event %s to topic %q: %w; check that the brokers are up and reachable; herald retries", e.shown, m.ID, e.topic, err)
}

// Close closes the client. Sends still waiting for an acknowledgement
// fail with a retryable error.
func (e *Endpoint) Close() error {
	e.client.Close()
	return nil
}
