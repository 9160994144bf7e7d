package main

import (
	"strings"
	"testing"
	"time"

	"herald/client"
)

// TestPrintStatsWithDeliveryHealth: a push topic's stats from the leader
// of its shards add the failures since the last success, the last success
// and the last error (on one line); a shard led elsewhere shows "?".
func TestPrintStatsWithDeliveryHealth(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	failing := &client.DeliveryHealth{LastError: "HTTP 500:\nboom", LastErrorTime: now.Add(-3 * time.Second),
		ConsecutiveFailures: 12, LastSuccess: now.Add(-time.Minute)}
	s := &client.TopicStats{
		Name:  "t",
		Total: client.ShardStats{Name: "t", Retried: 12, Delivery: failing},
		Shards: []client.ShardStats{
			{Shard: 0, Name: "t", Retried: 12, Delivery: failing},
			{Shard: 1, Name: "t.1"},
			{Shard: 2, Name: "t.2", Delivery: &client.DeliveryHealth{}},
		},
	}
	var b strings.Builder
	if err := printStats(&b, s, now); err != nil {
		t.Fatal(err)
	}
	want := `SHARD  NAME  EVENTS  BYTES  RESERVED  RESERVATIONS  OLDEST  PUBLISHED  ACKED  LEASED  DELIVERED  RETRIED  DEAD  NEXT  HEAD  ERROR  FAILING  LAST OK   LAST PUSH ERROR
0      t     0       0      0         0             -       0          0      0       0          12       0     0     0     -      12       1m0s ago  3s ago: HTTP 500: boom
1      t.1   0       0      0         0             -       0          0      0       0          0        0     0     0     -      ?        ?         ? (ask the shard's leader)
2      t.2   0       0      0         0             -       0          0      0       0          0        0     0     0     -      0        -         -
total  t     0       0      0         0             -       0          0      0       0          12       0     0     0     -      12       1m0s ago  3s ago: HTTP 500: boom
`
	if b.String() != want {
		t.Errorf("printStats:\n%s\nwant:\n%s", b.String(), want)
	}
}
