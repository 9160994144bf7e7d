package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"herald/internal/endpoint"
	"herald/internal/endpoint/endpointtest"
	"herald/internal/testkit"
	"herald/internal/topic"
)

// The tests run against kfake, franz-go's in-process Kafka cluster: a real
// Kafka protocol server on loopback ports.

const kafkaTopic = "herald-events"

func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.SeedTopics(3, kafkaTopic)}, opts...)...)
	if err != nil {
		t.Fatalf("start kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func attrs(c *kfake.Cluster, acks string) topic.Attributes {
	a := topic.Defaults()
	a.PushEndpoint = "kafka://" + strings.Join(c.ListenAddrs(), ",")
	a.KafkaTopic = kafkaTopic
	a.KafkaAcks = acks
	return a
}

func newEndpoint(t *testing.T, a topic.Attributes) *Endpoint { return endpointtest.Open(t, New, a) }

var message = endpointtest.Message

func send(t *testing.T, e *Endpoint, m *endpoint.Message) { endpointtest.Send(t, e, m) }

// consume reads n records of topic t from the start.
func consume(t *testing.T, c *kfake.Cluster, topicName string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topicName),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d records of %d: %v", len(recs), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		recs = append(recs, fs.Records()...)
	}
	return recs
}

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

func TestSendRecord(t *testing.T) {
	for _, acks := range []string{"none", "leader", "all"} {
		t.Run(acks, func(t *testing.T) {
			c := newCluster(t)
			e := newEndpoint(t, attrs(c, acks))
			m := message("customer 42/ü\n", 7)              // verbatim in the header
			before := time.Now().Truncate(time.Millisecond) // Kafka keeps milliseconds
			send(t, e, m)
			after := time.Now()

			r := consume(t, c, kafkaTopic, 1)[0]
			want, _ := endpoint.Body(m)
			if string(r.Value) != string(want) {
				t.Errorf("value = %s, want %s", r.Value, want)
			}
			if string(r.Key) != m.Key {
				t.Errorf("key = %q, want %q", r.Key, m.Key)
			}
			for name, want := range map[string]string{
				"X-Herald-Event-Id": m.ID, "X-Herald-Topic": m.Topic, "X-Herald-Attempt": fmt.Sprint(m.Attempt), "X-Herald-Key": m.Key,
				"X-Herald-Publish-Time": "2026-11-21T10:00:00Z",
			} {
				if got := header(r, name); got != want {
					t.Errorf("header %s = %q, want %q", name, got, want)
				}
			}
			if r.Timestamp.Before(before) || r.Timestamp.After(after) {
				t.Errorf("timestamp = %v, want the time of the send, between %v and %v", r.Timestamp, before, after)
			}
		})
	}
}

// TestTopicDefaultsToHeraldTopic: with kafka_topic empty, records go to
// the Kafka topic named like the herald topic.
func TestTopicDefaultsToHeraldTopic(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, "orders"))
	a := attrs(c, "all")
	a.KafkaTopic = ""
	e := newEndpoint(t, a)
	send(t, e, message("k", 1))
	if r := consume(t, c, "orders", 1)[0]; header(r, endpoint.HeaderEventID) != "orders/2/1" {
		t.Errorf("got record %s", header(r, endpoint.HeaderEventID))
	}
}

// TestPerKeyOrder sends the events of several keys concurrently, each key's
// in sequence as herald's dispatcher does, and checks that every key's
// events went to one partition, in order.
func TestPerKeyOrder(t *testing.T) {
	c := newCluster(t)
	e := newEndpoint(t, attrs(c, "all"))
	const keys, perKey = 8, 25
	sendPerKey(t, e, keys, perKey, time.Now())
	checkPerKeyOrder(t, consume(t, c, kafkaTopic, keys*perKey), keys)
}

// TestOldBacklogIsDelivered: events published long before they are sent,
// as after an outage of the brokers, are delivered, in order per key. The
// client times records out some time after their timestamp, so with the
// publish time as the timestamp they used to time out at once, forever.
func TestOldBacklogIsDelivered(t *testing.T) {
	c := newCluster(t)
	e := newEndpoint(t, attrs(c, "all"))
	const keys, perKey = 4, 10
	published := time.Now().Add(-time.Hour) // much older than sendTimeout, the record timeout
	start := time.Now().Truncate(time.Millisecond)
	sendPerKey(t, e, keys, perKey, published)
	recs := consume(t, c, kafkaTopic, keys*perKey)
	checkPerKeyOrder(t, recs, keys)
	for _, r := range recs {
		if got, want := header(r, endpoint.HeaderPublishTime), endpoint.FormatTime(published); got != want {
			t.Fatalf("record %s: %s = %q, want the publish time %q", header(r, endpoint.HeaderEventID), endpoint.HeaderPublishTime, got, want)
		}
		if r.Timestamp.Before(start) {
			t.Fatalf("record %s: timestamp %v is before the send (%v)", header(r, endpoint.HeaderEventID), r.Timestamp, start)
		}
	}
}

// sendPerKey sends perKey events for each of keys keys, published at
// publishTime: keys concurrently, each key's events in sequence as the
// dispatcher does. Each payload is its sequence number within its key.
func sendPerKey(t *testing.T, e *Endpoint, keys, perKey int, publishTime time.Time) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	for k := range keys {
		wg.Go(func() {
			for i := range perKey {
				m := message("key-"+strconv.Itoa(k), uint64(k*perKey+i))
				m.Time = publishTime
				m.Payload = []byte(strconv.Itoa(i))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := e.Send(ctx, m)
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// checkPerKeyOrder checks that the records sent by sendPerKey hold keys
// keys, each in one partition and in sequence, and that the keys are
// spread over more than one partition.
func checkPerKeyOrder(t *testing.T, recs []*kgo.Record, keys int) {
	t.Helper()
	partition := map[string]int32{}
	next := map[string]int{}
	for _, r := range recs {
		key := string(r.Key)
		if p, ok := partition[key]; ok && p != r.Partition {
			t.Errorf("key %s in partitions %d and %d", key, p, r.Partition)
		}
		partition[key] = r.Partition
		var body struct{ Payload int } // the payload is the sequence number
		if err := json.Unmarshal(r.Value, &body); err != nil || body.Payload != next[key] {
			t.Errorf("key %s: record at offset %d is %s, want sequence number %d", key, r.Offset, r.Value, next[key])
		}
		next[key]++
	}
	if len(next) != keys {
		t.Errorf("records of %d keys, want %d", len(next), keys)
	}
	parts := map[int32]bool{}
	for _, p := range partition {
		parts[p] = true
	}
	if len(parts) < 2 {
		t.Errorf("all %d keys in one partition: the record key does not drive partitioning", keys)
	}
}

func TestUnknownTopicIsPermanent(t *testing.T) {
	c := newCluster(t)
	a := attrs(c, "all")
	a.KafkaTopic = "no-such-topic"
	e := newEndpoint(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := e.Send(ctx, message("k", 1))
	if err == nil || !endpoint.IsPermanent(err) {
		t.Fatalf("Send to a missing topic = %v, want a permanent error", err)
	}
	for _, want := range []string{`"no-such-topic" does not exist`, "create it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestTooLargeIsPermanent(t *testing.T) {
	c := newCluster(t)
	e := newEndpoint(t, attrs(c, "all"))
	m := message("k", 1)
	m.Payload = []byte(`"` + strings.Repeat("x", maxRecordBytes) + `"`)
	err := e.Send(context.Background(), m)
	if err == nil || !endpoint.IsPermanent(err) || !strings.Contains(err.Error(), "smaller payloads") {
		t.Fatalf("Send of a too large event = %v, want a permanent error", err)
	}
}

// TestClusterDownAndBack: while the cluster is down, Send fails with a
// retryable error; once a cluster listens on the same port again, Send
// delivers.
func TestClusterDownAndBack(t *testing.T) {
	c := newCluster(t, kfake.NumBrokers(1))
	addr := c.ListenAddrs()[0]
	e := newEndpoint(t, attrs(c, "all"))
	send(t, e, message("k", 1))

	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err := e.Send(ctx, message("k", 2))
	cancel()
	if err == nil || endpoint.IsPermanent(err) {
		t.Fatalf("Send with the cluster down = %v, want a retryable error", err)
	}
	t.Logf("cluster down: %v", err)

	// The new cluster's topic has a new topic id, as when a topic is
	// deleted and created again: the endpoint must adopt it.
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	c2 := newCluster(t, kfake.NumBrokers(1), kfake.Ports(p))
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err = e.Send(ctx, message("k", 3))
		cancel()
		if err == nil {
			break
		}
		if endpoint.IsPermanent(err) || time.Now().After(deadline) {
			t.Fatalf("Send after the cluster came back: %v", err)
		}
		t.Logf("cluster back, retrying: %v", err)
	}
	// The abandoned orders/2/2 may have reached the new cluster first.
	recs := consume(t, c2, kafkaTopic, 1)
	if header(recs[0], endpoint.HeaderEventID) != "orders/2/3" {
		recs = consume(t, c2, kafkaTopic, 2)
	}
	if got := header(recs[len(recs)-1], endpoint.HeaderEventID); got != "orders/2/3" {
		t.Errorf("new cluster holds %s, want orders/2/3", got)
	}
}

// TestNewDoesNotConnect: New succeeds with no broker listening; Send then
// fails with a retryable error.
func TestNewDoesNotConnect(t *testing.T) {
	addr := testkit.FreeAddr(t) // nothing listens there
	a := topic.Defaults()
	a.PushEndpoint = "kafka://" + addr
	e := newEndpoint(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := e.Send(ctx, message("k", 1)); err == nil || endpoint.IsPermanent(err) {
		t.Fatalf("Send with no broker = %v, want a retryable error", err)
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		endpoint, acks, want string
	}{
		{"kafka://", "all", "kafka://host:port"},
		{"kafka://h:1/path", "all", "without user, path or query"},
		{"kafka://u:hunter2@h:1", "all", "without user"},
		{"kafka://h:1?token=hunter2", "all", "kafka://h:1?token=xxxxx: use kafka://"},
		{"kafka://h:port", "all", `port "port" is not a number`},
		{"kafka://h:1,:2", "all", `broker ":2" is not host[:port]`},
		{"kafka://h:99999", "all", "1 to 65535"},
		{"http://h", "all", "not a kafka:// URI"},
		{"kafka://h", "most", "kafka_acks must be none, leader or all"},
	} {
		a := topic.Defaults()
		a.PushEndpoint, a.KafkaAcks = tc.endpoint, tc.acks
		_, err := New("orders", a, endpointtest.Guard(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s, acks %s) = %v, want an error saying %q", tc.endpoint, tc.acks, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error %q shows the password", err)
		}
	}
}

func TestParseBrokers(t *testing.T) {
	got, err := parseBrokers("kafka://a:1,b,[::1]:3,[::1]/")
	want := []string{"a:1", "b:9092", "[::1]:3", "[::1]:9092"}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parseBrokers = %v, %v; want %v", got, err, want)
	}
}

func TestSendAfterClose(t *testing.T) {
	c := newCluster(t)
	e := newEndpoint(t, attrs(c, "all"))
	e.Close()
	err := e.Send(context.Background(), message("k", 1))
	if err == nil || !errors.Is(err, kgo.ErrClientClosed) {
		t.Errorf("Send after Close = %v, want kgo.ErrClientClosed", err)
	}
}
