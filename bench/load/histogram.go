package load

import (
	"math"
	"math/bits"
	"time"
)

// Histogram counts durations in log-linear buckets, in the manner of an HDR
// histogram: durations below 1024 ns are counted exactly, and each larger
// power-of-two range is split into 512 equal buckets, so a percentile is
// off by at most 0.2% of its value. Durations from 2^40 ns (about 18
// minutes) up share the last bucket. Min, max and the mean are exact.
//
// The zero Histogram is empty and ready to use. A Histogram is not safe for
// concurrent use: give each goroutine its own and Merge them.
type Histogram struct {
	counts []uint64 // allocated on first Record
	n      uint64
	sum    float64 // nanoseconds
	min    int64
	max    int64
}

const (
	subBits     = 10
	subCount    = 1 << subBits // exact values below this
	halfCount   = subCount / 2 // buckets per power of two above it
	maxBits     = 40           // values from 1<<maxBits share the last bucket
	bucketCount = subCount + (maxBits-subBits)*halfCount
)

// bucketOf returns the bucket that counts v nanoseconds.
func bucketOf(v int64) int {
	if v < 0 {
		v = 0
	}
	if v >= 1<<maxBits {
		return bucketCount - 1
	}
	u := uint64(v)
	if u < subCount {
		return int(u)
	}
	shift := bits.Len64(u) - subBits // ≥ 1
	m := u >> shift                  // in [halfCount, subCount)
	return subCount + (shift-1)*halfCount + int(m-halfCount)
}

// bucketHigh returns the largest value that bucket i counts.
func bucketHigh(i int) int64 {
	if i < subCount {
		return int64(i)
	}
	shift := (i-subCount)/halfCount + 1
	m := uint64((i-subCount)%halfCount + halfCount)
	return int64((m+1)<<shift - 1)
}

// Record counts one duration. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	if h.counts == nil {
		h.counts = make([]uint64, bucketCount)
	}
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds the counts of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]uint64, bucketCount)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Count returns the number of durations recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min returns the smallest duration recorded, or 0 if there is none.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max returns the largest duration recorded, or 0 if there is none.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the mean of the durations recorded, or 0 if there is none.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(math.Round(h.sum / float64(h.n)))
}

// Percentile returns the duration at or below which the fraction q (0 to 1)
// of the recorded durations fall, by the nearest-rank method: the smallest
// recorded value whose rank is at least ⌈q·count⌉. Within a bucket the
// bucket's highest value is returned, clamped to the exact min and max.
// Percentile(1) is the max; an empty histogram gives 0.
func (h *Histogram) Percentile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	if rank >= h.n {
		return time.Duration(h.max)
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := min(max(bucketHigh(i), h.min), h.max)
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}
