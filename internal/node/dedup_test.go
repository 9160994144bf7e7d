package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func dedupEv(key, payload, id string) Event {
	return Event{Key: key, Payload: []byte(payload), DedupID: id}
}

// TestPublishWithDedupIDsIsIdempotent retries a batch that spans shards,
// the second time with one more event and after a restart of the node:
// the events committed the first time keep their ids and are stored once.
func TestPublishWithDedupIDsIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	n := openNode(t, testConfig(dir))
	mustCreate(t, n, "orders", map[string]string{"shards": "4"})
	var batch []Event
	for i := range 12 {
		batch = append(batch, dedupEv(fmt.Sprint("k", i), fmt.Sprint(i), fmt.Sprint("d", i)))
	}
	first := publish(t, n, "orders", batch...)
	again := publish(t, n, "orders", batch...)
	if !slices.Equal(first, again) {
		t.Fatalf("retry got ids %v, want the first publish's %v", again, first)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	// After a restart the table is still there, and an event new to the
	// batch (in a shard with duplicates too) is appended alone.
	n = openNode(t, testConfig(dir))
	more := append(slices.Clone(batch), dedupEv("k0", "new", "d-new"), ev("k1", "no id"))
	ids := publish(t, n, "orders", more...)
	if !slices.Equal(ids[:12], first) {
		t.Fatalf("retry after restart got ids %v, want %v", ids[:12], first)
	}
	if slices.Contains(first, ids[12]) || slices.Contains(first, ids[13]) || ids[12] == ids[13] {
		t.Fatalf("new events got ids %v, %v, colliding with %v", ids[12], ids[13], first)
	}
	st, err := n.TopicStats(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if st.Total.Stats.Published != 14 {
		t.Fatalf("%d events stored, want 14 (12 once each, and 2 new)", st.Total.Stats.Published)
	}
}

func TestPublishRejectsBadDedupIDs(t *testing.T) {
	n := openNode(t, testConfig(t.TempDir()))
	mustCreate(t, n, "t", map[string]string{"shards": "2"})
	tests := []struct {
		name   string
		events []Event
		want   string
	}{
		{"too long", []Event{dedupEv("k", "x", strings.Repeat("x", 129))}, "over the limit of 128"},
		{"repeated", []Event{dedupEv("a", "x", "d"), dedupEv("b", "y", "d")}, "same dedup_id"},
	}
	for _, tt := range tests {
		_, err := n.Publish(context.Background(), "t", tt.events)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want ErrInvalid saying %q", tt.name, err, tt.want)
		}
	}
	res, err := n.Reserve(context.Background(), "t", "k", 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Commit(context.Background(), res.ID, []Event{dedupEv("k", "x", "d")}); !errors.Is(err, ErrInvalid) {
		t.Errorf("commit with a dedup id: got %v, want ErrInvalid", err)
	}
	st, err := n.TopicStats(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if st.Total.Stats.Published != 0 {
		t.Fatalf("rejected publishes appended %d events", st.Total.Stats.Published)
	}
}
