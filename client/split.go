package client

import (
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"

	"herald/internal/protocol"
)

// MaxRequestBytes is the request limit of a herald server: the largest
// request, encoded (and, if compressed, once decompressed), that it reads;
// 64 MiB. Publish sends a call whose events make a larger request as
// several requests, each within the limit (see Publish). A single event
// larger than the limit cannot be published.
const MaxRequestBytes = protocol.MaxRequestBytes

// EventBytes returns how many bytes e takes in a publish request (or up
// to two bytes a header more): its key, payload, dedup id and headers, and
// their encoding. Callers that gather batches themselves can keep each
// under MaxRequestBytes with it.
func EventBytes(e Event) int {
	n := optionalBytes(len(e.Key)) + optionalBytes(len(e.Payload)) + optionalBytes(len(e.DedupID))
	for k, v := range e.Headers {
		// A map entry is a message of two fields, which may be written
		// even when empty: count them always.
		entry := 1 + protowire.SizeVarint(uint64(len(k))) + len(k) + 1 + protowire.SizeVarint(uint64(len(v))) + len(v)
		n += fieldBytes(entry)
	}
	return fieldBytes(n)
}

// fieldBytes is the size of a length-delimited field of n bytes with a
// one-byte tag.
func fieldBytes(n int) int {
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

// optionalBytes is fieldBytes of a field that proto3 leaves out when empty.
func optionalBytes(n int) int {
	if n == 0 {
		return 0
	}
	return fieldBytes(n)
}

// requestBytes is the size of a publish request to topic without its
// events.
func requestBytes(topic string) int {
	return fieldBytes(len(topic))
}

// splitRequests cuts events, in order, into runs each of which makes a
// publish request to topic within MaxRequestBytes. An event too large for
// a request of its own is an error, before anything is sent.
func splitRequests(topic string, events []Event) ([][]Event, error) {
	budget := MaxRequestBytes - requestBytes(topic)
	var parts [][]Event
	start, size := 0, 0
	for i, e := range events {
		n := EventBytes(e)
		if n > budget {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
				"event %d is %d bytes encoded, more than a request may carry (%d bytes, client.MaxRequestBytes); nothing was published: split its payload",
				i, n, budget))
		}
		if size+n > budget {
			parts = append(parts, events[start:i])
			start, size = i, 0
		}
		size += n
	}
	return append(parts, events[start:]), nil
}
