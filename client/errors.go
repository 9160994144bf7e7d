package client

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
)

// IsNotFound reports whether err says that a topic, reservation or event
// does not exist.
func IsNotFound(err error) bool {
	return connect.CodeOf(err) == connect.CodeNotFound
}

// IsAlreadyExists reports whether err says that a topic already exists.
func IsAlreadyExists(err error) bool {
	return connect.CodeOf(err) == connect.CodeAlreadyExists
}

// IsResourceExhausted reports whether err says that a shard is full or a
// limit was reached. The request may succeed if retried later.
func IsResourceExhausted(err error) bool {
	return connect.CodeOf(err) == connect.CodeResourceExhausted
}

// IsRetryable reports whether the request that returned err may succeed if
// sent again after a pause: the server was full (ResourceExhausted) or could
// not be reached or had no leader for the shard (Unavailable).
func IsRetryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeResourceExhausted, connect.CodeUnavailable:
		return true
	}
	return false
}

// LapsedError is Ack's error when some of the receipts it was given had
// lapsed: the events were handed out again after those deliveries (the
// lease expired, or was lost with a former leader), and the consumers
// that hold them now acknowledge them. The ack acted on the others; Ack's
// count is theirs. Nothing needs doing: the event is not lost, and the
// consumer that acked it will not see it again unless its holder fails.
type LapsedError struct {
	Receipts []string
}

func (e *LapsedError) Error() string {
	return fmt.Sprintf("ack: %d %s lapsed (%s): handed out again since, so acknowledged by the current holder instead",
		len(e.Receipts), plural(len(e.Receipts), "receipt", "receipts"), strings.Join(e.Receipts, ", "))
}

// UnreadableError reports the shards of a topic that Fetch could not read,
// so that a consumer never takes an unreadable shard for an empty one.
// Fetch returns it beside the events of the shards it could read. When it
// could read none, All reports true and the error wraps the server's
// (code Unavailable: IsRetryable reports true, since the shards may come
// back once repaired).
type UnreadableError struct {
	Topic  string
	Shards []UnreadableShard
	server error // the server's error when no shard could be read
}

// All reports whether no shard of the topic could be read.
func (e *UnreadableError) All() bool { return e.server != nil }

func (e *UnreadableError) Error() string {
	if e.server != nil {
		return e.server.Error() // it already names every shard
	}
	var b strings.Builder
	fmt.Fprintf(&b, "topic %q: %d %s not read", e.Topic, len(e.Shards), plural(len(e.Shards), "shard was", "shards were"))
	sep := ": "
	for _, s := range e.Shards {
		fmt.Fprintf(&b, "%sshard %s: %s", sep, s.Name, s.Reason)
		sep = "; "
	}
	return b.String()
}

func (e *UnreadableError) Unwrap() error { return e.server }

func plural(n int, one, more string) string {
	if n == 1 {
		return one
	}
	return more
}
