package topic

import "hash/fnv"

// ShardFor returns the shard, in [0, shards), that events with key belong
// to: the 64-bit FNV-1a hash of the key's bytes, modulo shards.
//
// This function is part of herald's on-disk contract. Per-key order holds
// only because every event of a key lands in the same shard; changing the
// hash, or how it is reduced, would send a key's new events to a different
// shard than its stored ones, and they could be delivered out of order
// across an upgrade. Do not change it.
//
// ShardFor panics if shards < 1, like a division by zero would.
func ShardFor(key string, shards int) int {
	if shards < 1 {
		panic("topic.ShardFor: shards must be at least 1")
	}
	h := fnv.New64a()
	h.Write([]byte(key)) // a hash.Hash never returns an error
	return int(h.Sum64() % uint64(shards))
}
