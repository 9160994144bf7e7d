package load

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistogramExactBelow1024ns(t *testing.T) {
	var h Histogram
	for v := range 1000 { // 0..999 ns, one each
		h.Record(time.Duration(v))
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0, 0}, {0.001, 0}, {0.5, 499}, {0.9, 899}, {0.99, 989}, {0.999, 998}, {1, 999},
	} {
		if got := h.Percentile(tc.q); got != tc.want {
			t.Errorf("Percentile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if h.Min() != 0 || h.Max() != 999 || h.Count() != 1000 {
		t.Errorf("min %v max %v count %d, want 0 999 1000", h.Min(), h.Max(), h.Count())
	}
	if h.Mean() != 500 { // 499.5 rounds to 500
		t.Errorf("Mean = %v, want 500ns", h.Mean())
	}
}

// TestHistogramPercentilesOfKnownSamples compares percentiles with the
// nearest-rank percentiles of the sorted samples: the histogram may be off
// by its bucket width, 1/512 of the value.
func TestHistogramPercentilesOfKnownSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	samples := make([]time.Duration, 100_000)
	var h Histogram
	for i := range samples {
		// Log-uniform from 10µs to 1s, like real latencies.
		d := time.Duration(math.Exp(math.Log(1e4) + rng.Float64()*(math.Log(1e9)-math.Log(1e4))))
		samples[i] = d
		h.Record(d)
	}
	slices.Sort(samples)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		rank := int(math.Ceil(q * float64(len(samples))))
		want := samples[rank-1]
		got := h.Percentile(q)
		if got < want || float64(got-want) > float64(want)/512 {
			t.Errorf("Percentile(%v) = %v, want %v to within +0.2%%", q, got, want)
		}
	}
	if h.Max() != samples[len(samples)-1] || h.Min() != samples[0] {
		t.Errorf("min %v max %v, want %v %v", h.Min(), h.Max(), samples[0], samples[len(samples)-1])
	}
	if got := h.Percentile(1); got != samples[len(samples)-1] {
		t.Errorf("Percentile(1) = %v, want the max %v", got, samples[len(samples)-1])
	}
}

func TestHistogramFixedMilliseconds(t *testing.T) {
	// 90 samples of 1ms, 9 of 10ms, 1 of 100ms.
	var h Histogram
	for range 90 {
		h.Record(time.Millisecond)
	}
	for range 9 {
		h.Record(10 * time.Millisecond)
	}
	h.Record(100 * time.Millisecond)
	near := func(got, want time.Duration) bool {
		return got >= want && float64(got-want) <= float64(want)/512
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, time.Millisecond}, {0.9, time.Millisecond}, {0.91, 10 * time.Millisecond},
		{0.99, 10 * time.Millisecond}, {0.999, 100 * time.Millisecond},
	} {
		if got := h.Percentile(tc.q); !near(got, tc.want) {
			t.Errorf("Percentile(%v) = %v, want about %v", tc.q, got, tc.want)
		}
	}
	if h.Max() != 100*time.Millisecond {
		t.Errorf("Max = %v", h.Max())
	}
}

func TestHistogramMerge(t *testing.T) {
	var a, b, all Histogram
	for i := range 5000 {
		d := time.Duration(i) * time.Microsecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&Histogram{}) // empty: no effect
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
		if m.Percentile(q) != all.Percentile(q) {
			t.Errorf("merged Percentile(%v) = %v, want %v", q, m.Percentile(q), all.Percentile(q))
		}
	}
	if m.Count() != all.Count() || m.Min() != all.Min() || m.Max() != all.Max() || m.Mean() != all.Mean() {
		t.Errorf("merged count/min/max/mean %d %v %v %v, want %d %v %v %v",
			m.Count(), m.Min(), m.Max(), m.Mean(), all.Count(), all.Min(), all.Max(), all.Mean())
	}
}

func TestHistogramEdges(t *testing.T) {
	var h Histogram
	if h.Percentile(0.5) != 0 || h.Mean() != 0 || h.Max() != 0 {
		t.Error("empty histogram should report zeros")
	}
	h.Record(-5)        // counts as 0
	h.Record(time.Hour) // beyond the last bucket: still the exact max
	if h.Min() != 0 || h.Max() != time.Hour || h.Percentile(1) != time.Hour {
		t.Errorf("min %v max %v p100 %v", h.Min(), h.Max(), h.Percentile(1))
	}
	// Durations beyond the HDR histogram's range count as its last value,
	// about 18 minutes; the max stays exact.
	h.Record(2 * time.Hour)
	if got, last := h.Percentile(0.5), time.Duration(maxTracked); h.Max() != 2*time.Hour || got < last || got > last+last/1000 {
		t.Errorf("max %v p50 %v, want 2h and about %v", h.Max(), got, last)
	}
}
