package tier

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the reconciler's and the reader's metrics. A nil *Metrics
// records nothing.
type Metrics struct {
	uploadedBytes prometheus.Counter
	objects       prometheus.Counter
	uploadSeconds prometheus.Histogram
	failures      *prometheus.CounterVec
	lroPhaseSecs  prometheus.Histogram
	cycleSeconds  prometheus.Histogram
	lroLag        prometheus.Gauge
}

// NewMetrics returns the metrics, registered with reg, and those of
// reader (reads from the object store, cache hits) when it is not nil.
func NewMetrics(reg prometheus.Registerer, reader *Reader) (*Metrics, error) {
	m := &Metrics{
		uploadedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_tier_uploaded_bytes_total", Help: "Bytes of log entries uploaded to the object store.",
		}),
		objects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_tier_objects_uploaded_total", Help: "Objects uploaded to the object store and recorded in the manifest.",
		}),
		uploadSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herald_tier_upload_seconds", Help: "Time to upload one object.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 16),
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_tier_failures_total", Help: "Failed tiering steps (upload, record), each retried.",
		}, []string{"step"}),
		lroPhaseSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herald_tier_lro_phase_seconds", Help: "Time a reconciliation cycle spent advancing its shards' LROs, all of them.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 2, 20),
		}),
		cycleSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herald_tier_cycle_seconds", Help: "Time of one whole reconciliation cycle.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 18),
		}),
		lroLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_tier_lro_lag_entries", Help: "Log entries in closed segments of the shards this node leads that are beyond their LROs, at the start of the last cycle.",
		}),
	}
	cs := []prometheus.Collector{m.uploadedBytes, m.objects, m.uploadSeconds, m.failures, m.lroPhaseSecs, m.cycleSeconds, m.lroLag}
	if reader != nil {
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "herald_tier_reads_total", Help: "Runs of entries read from the object store (cache misses and read-ahead).",
			}, func() float64 { s := reader.Stats(); return float64(s.Misses + s.Prefetches) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "herald_tier_read_bytes_total", Help: "Bytes read from the object store.",
			}, func() float64 { return float64(reader.Stats().BytesRead) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "herald_tier_cache_hits_total", Help: "Reads of tiered entries answered by the read cache.",
			}, func() float64 { return float64(reader.Stats().Hits) }),
		)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) uploaded(bytes int, took time.Duration) {
	if m == nil {
		return
	}
	m.uploadedBytes.Add(float64(bytes))
	m.objects.Inc()
	m.uploadSeconds.Observe(took.Seconds())
}

func (m *Metrics) failed(step string) {
	if m != nil {
		m.failures.WithLabelValues(step).Inc()
	}
}

func (m *Metrics) lroPhase(took time.Duration) {
	if m != nil {
		m.lroPhaseSecs.Observe(took.Seconds())
	}
}

func (m *Metrics) cycle(plans []plan, took time.Duration) {
	if m == nil {
		return
	}
	m.cycleSeconds.Observe(took.Seconds())
	var lag uint64
	for _, p := range plans {
		if p.progress.Closed > p.progress.LRO {
			lag += p.progress.Closed - p.progress.LRO
		}
	}
	m.lroLag.Set(float64(lag))
}
