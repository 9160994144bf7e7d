package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"connectrpc.com/connect"

	"herald/internal/backoff"
)

// WithPublishRetries makes Publish retry a call whose request failed for a
// reason that may pass — the server unreachable, restarting or full, no
// leader for a shard, the call's timeout — up to attempts times in all,
// pausing between attempts (100 ms doubling to 5 s, with jitter). So that
// a retry never appends an event twice, Publish first gives every event
// without a DedupID a random one; a retry of a batch some of whose
// shards had committed returns the ids those events got.
//
// The server remembers dedup ids for its dedup window (2 minutes by
// default): retries that go on for longer may append again.
func WithPublishRetries(attempts int) Option {
	return func(c *config) { c.retries = max(attempts, 1) }
}

var publishRetryPause = backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

func (c *Client) publishRetrying(ctx context.Context, topic string, events []Event) ([]string, error) {
	retry := backoff.New(publishRetryPause)
	for attempt := 1; ; attempt++ {
		ids, err := c.publishOnce(ctx, topic, events)
		if err == nil || attempt >= c.retries || !retryablePublish(ctx, err) {
			return ids, err
		}
		if err := backoff.Sleep(ctx, retry.Next()); err != nil {
			return nil, err
		}
	}
}

// retryablePublish reports whether a publish that failed with err may be
// sent again: besides IsRetryable's cases, a call that timed out or whose
// connection broke (which connect reports as canceled), while the caller's
// context is still live: its outcome is unknown, and the dedup ids make a
// resend safe.
func retryablePublish(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeDeadlineExceeded, connect.CodeCanceled:
		return true
	}
	return IsRetryable(err)
}

// withDedupIDs returns a copy of events in which every event without a
// DedupID has a random one.
func withDedupIDs(events []Event) []Event {
	out := make([]Event, len(events))
	for i, e := range events {
		if e.DedupID == "" {
			e.DedupID = newDedupID()
		}
		out[i] = e
	}
	return out
}

// newDedupID returns 128 random bits in hex: unique without coordination.
func newDedupID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand.Read panics if it cannot read)
	return hex.EncodeToString(b[:])
}
