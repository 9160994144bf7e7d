package client

import "connectrpc.com/connect"

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
