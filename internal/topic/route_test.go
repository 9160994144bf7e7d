package topic

import (
	"fmt"
	"testing"
)

// fnv1a64 is FNV-1a written out from its definition, independently of
// hash/fnv, so that a change in how ShardFor hashes cannot go unnoticed.
func fnv1a64(s string) uint64 {
	h := uint64(14695981039346656037) // offset basis
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211 // FNV prime
	}
	return h
}

// routes pins ShardFor's results. They are part of herald's on-disk
// contract: if this test fails, existing topics would route keys to new
// shards after an upgrade. Do not update the values; fix ShardFor.
var routes = []struct {
	key    string
	hash   uint64 // from the FNV reference test vectors where available
	shards int
	shard  int
}{
	{"", 0xcbf29ce484222325, 11, 10},
	{"a", 0xaf63dc4c8601ec8c, 11, 7},
	{"foobar", 0x85944171f73967e8, 11, 3},
	{"foobar", 0x85944171f73967e8, 1024, 1000},
	{"orders/42", 0xa62399f64f6961df, 1024, 479},
	{"user-1001", 0x435404761a7ad39f, 3, 2},
	{"\xff\x00", 0x0a99a607b6f60bea, 11, 9},
	{"anything", 0, 1, 0},
}

func TestShardForFixed(t *testing.T) {
	for _, r := range routes {
		if r.hash != 0 {
			if got := fnv1a64(r.key); got != r.hash {
				t.Errorf("reference FNV-1a(%q) = %#x, want %#x: the test's own hash is wrong", r.key, got, r.hash)
			}
		}
		if got := ShardFor(r.key, r.shards); got != r.shard {
			t.Errorf("ShardFor(%q, %d) = %d, want %d", r.key, r.shards, got, r.shard)
		}
	}
}

func TestShardForMatchesFNV1a(t *testing.T) {
	for i := range 1000 {
		key := fmt.Sprintf("key-%d", i)
		for _, n := range []int{1, 2, 7, 11, 1000, MaxShards} {
			if got, want := ShardFor(key, n), int(fnv1a64(key)%uint64(n)); got != want {
				t.Fatalf("ShardFor(%q, %d) = %d, want FNV-1a %% %d = %d", key, n, got, n, want)
			}
		}
	}
}

// TestShardForDistribution checks that realistic keys spread over every
// shard, roughly evenly.
func TestShardForDistribution(t *testing.T) {
	const keys = 10000
	for _, n := range []int{2, 3, DefaultShards, 64, 256} {
		counts := make([]int, n)
		for i := range keys {
			counts[ShardFor(fmt.Sprintf("user-%d", i), n)]++
		}
		mean := keys / n
		for shard, c := range counts {
			if c == 0 {
				t.Errorf("%d shards: shard %d got none of %d keys", n, shard, keys)
			}
			if n <= DefaultShards && (c < mean*8/10 || c > mean*12/10) {
				t.Errorf("%d shards: shard %d got %d keys, want within 20%% of %d", n, shard, c, mean)
			}
		}
	}
}

func TestShardForPanicsWithoutShards(t *testing.T) {
	for _, n := range []int{0, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("ShardFor(key, %d) did not panic", n)
				}
			}()
			ShardFor("key", n)
		}()
	}
}

func BenchmarkShardFor(b *testing.B) {
	key := "some-object-key/with/a/path.jpg"
	b.ReportAllocs()
	for b.Loop() {
		ShardFor(key, DefaultShards)
	}
}
