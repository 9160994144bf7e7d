// Package protocol holds what herald's API says outside its Protobuf
// schema: header names and defaults that the server and the Go client
// must agree on, defined once for both.
package protocol

// ForwardedHeader is set ("1") on the response to a Publish, Fetch, Ack
// or Nack when the node passed some of it to another node because it does
// not lead a shard: a client that routes by leader
// (client.WithLeaderRouting) then knows its map of leaders is stale.
const ForwardedHeader = "Herald-Forwarded"

// ShardsHeader on a Fetch request limits it to some shards of the topic,
// by index, comma-separated ("0,3"): a client that routes by leader sends
// each node the fetch of the shards it leads.
const ShardsHeader = "Herald-Shards"

// DefaultFetchEvents is the most events a Fetch returns when it names no
// maximum. A client that splits a fetch among the shards' leaders splits
// this many.
const DefaultFetchEvents = 100
