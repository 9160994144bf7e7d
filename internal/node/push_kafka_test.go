package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A topic whose push endpoint is a Kafka cluster delivers its events there,
// keyed by event key, in order per key.
func TestPushToKafka(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(2, "orders-out"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "orders", map[string]string{
		"shards": "2", "push_endpoint": "kafka://" + strings.Join(cluster.ListenAddrs(), ","), "kafka_topic": "orders-out"})
	for k := range 3 {
		publish(t, n, "orders", jsonEvents(fmt.Sprint("k", k), 0, 5)...)
	}
	waitStats(t, n, "orders", func(s ShardStats) bool { return s.Stats.Delivered == 15 })

	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("orders-out"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	perKey := map[string][]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for total := 0; total < 15 && ctx.Err() == nil; {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			total++
			perKey[string(r.Key)] = append(perKey[string(r.Key)], string(r.Value))
		})
	}
	for k := range 3 {
		recs := perKey[fmt.Sprint("k", k)]
		if len(recs) != 5 {
			t.Fatalf("key k%d: %d records in Kafka, want 5", k, len(recs))
		}
		for i, body := range recs {
			if !strings.Contains(body, fmt.Sprintf(`"payload":"%d"`, i)) || !strings.Contains(body, fmt.Sprintf(`"key":"k%d"`, k)) {
				t.Fatalf("key k%d record %d = %s: wrong envelope or order", k, i, body)
			}
		}
	}
}
