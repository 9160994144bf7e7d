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
