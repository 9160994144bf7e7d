package load

import (
	"math"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The HDR histogram behind a Histogram counts from 1 ns to maxTracked with
// three significant digits: durations below 2048 ns are counted exactly,
// and a percentile is off by at most 0.1% of its value. Longer durations
// are counted as maxTracked (about 18 minutes).
const (
	maxTracked  = int64(1) << 40
	significant = 3
)

// Histogram records durations for percentiles, keeping min, max and the
// mean exact beside an HDR histogram (hdrhistogram-go), whose own min and
// max are rounded to their buckets.
//
// The zero Histogram is empty and ready to use. A Histogram is not safe for
// concurrent use: give each goroutine its own and Merge them.
type Histogram struct {
	hdr *hdrhistogram.Histogram // made on first Record or Merge
	n   uint64
	sum float64 // nanoseconds
	min int64
	max int64
}

func (h *Histogram) init() {
	if h.hdr == nil {
		h.hdr = hdrhistogram.New(1, maxTracked, significant)
	}
}

// Record counts one duration. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.init()
	// In range by construction, so RecordValue cannot fail.
	h.hdr.RecordValue(min(v, maxTracked))
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.n++
	h.sum += float64(v)
}

// Merge adds the counts of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	h.init()
	h.hdr.Merge(o.hdr) // same range on both sides: nothing is dropped
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
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
	rank := max(uint64(math.Ceil(q*float64(h.n))), 1)
	if rank >= h.n {
		return time.Duration(h.max)
	}
	// The HDR histogram rounds its rank to the nearest whole count; asking
	// for exactly rank/count makes that rank the nearest one.
	v := h.hdr.ValueAtPercentile(100 * float64(rank) / float64(h.n))
	return time.Duration(min(max(v, h.min), h.max))
}
