package api

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/node"
)

// Metrics are the Prometheus series herald exports.
type Metrics struct {
	publishedEvents *prometheus.CounterVec
	ackedEvents     *prometheus.CounterVec
	fetchedEvents   *prometheus.CounterVec
	publishLatency  *prometheus.HistogramVec
	requests        *prometheus.HistogramVec
	fsync           prometheus.Histogram
	snapshot        prometheus.Histogram

	delivered       *prometheus.CounterVec
	retried         *prometheus.CounterVec
	deadLettered    *prometheus.CounterVec
	deliveryLatency *prometheus.HistogramVec
}

// latencyBuckets span 50µs to about 1.6s.
var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 16)

// NewMetrics registers herald's series with reg, including a collector
// that reads every shard's queue depth at scrape time.
func NewMetrics(reg prometheus.Registerer, n *node.Node) *Metrics {
	m := &Metrics{
		publishedEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_published_events_total", Help: "Events committed by Publish or Commit.",
		}, []string{"topic"}),
		ackedEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_acked_events_total", Help: "Events acknowledged by consumers.",
		}, []string{"topic"}),
		fetchedEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_fetched_events_total", Help: "Events handed to pull consumers (redeliveries included).",
		}, []string{"topic"}),
		publishLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "herald_publish_duration_seconds", Help: "Time from receiving a Publish or Commit to its events being committed.",
			Buckets: latencyBuckets,
		}, []string{"topic"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "herald_request_duration_seconds", Help: "API request latency by method and status code.",
			Buckets: latencyBuckets,
		}, []string{"method", "code"}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herald_fsync_duration_seconds", Help: "Duration of log fdatasyncs (one per group-committed batch).",
			Buckets: latencyBuckets,
		}),
		snapshot: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herald_snapshot_duration_seconds", Help: "Duration of writing a snapshot and compacting the log.",
			Buckets: latencyBuckets,
		}),
	}
	m.delivered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_delivered_events_total", Help: "Events pushed to their endpoint and acknowledged by it.",
	}, []string{"topic", "endpoint"})
	m.retried = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_delivery_retries_total", Help: "Failed push attempts that will be retried.",
	}, []string{"topic", "endpoint"})
	m.deadLettered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_dead_lettered_events_total", Help: "Events moved to the dead-letter queue, by reason.",
	}, []string{"topic", "endpoint", "reason"})
	m.deliveryLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "herald_delivery_latency_seconds", Help: "Time from publish to the endpoint acknowledging the event.",
		Buckets: latencyBuckets,
	}, []string{"topic", "endpoint"})
	reg.MustRegister(m.publishedEvents, m.ackedEvents, m.fetchedEvents, m.publishLatency, m.requests, m.fsync, m.snapshot,
		m.delivered, m.retried, m.deadLettered, m.deliveryLatency, &depthCollector{node: n})
	n.SetDeliveryMetrics(m)
	onFsync := func(d time.Duration) { m.fsync.Observe(d.Seconds()) }
	onSnapshot := func(d time.Duration) { m.snapshot.Observe(d.Seconds()) }
	n.Host().Stats().OnFsync.Store(&onFsync)
	n.Host().Stats().OnSnapshot.Store(&onSnapshot)
	return m
}

// Delivered, Retried and DeadLettered receive push delivery outcomes.
func (m *Metrics) Delivered(topic, scheme string, latency time.Duration) {
	m.delivered.WithLabelValues(topic, scheme).Inc()
	m.deliveryLatency.WithLabelValues(topic, scheme).Observe(latency.Seconds())
}

func (m *Metrics) Retried(topic, scheme string) { m.retried.WithLabelValues(topic, scheme).Inc() }

func (m *Metrics) DeadLettered(topic, scheme, reason string) {
	m.deadLettered.WithLabelValues(topic, scheme, reason).Inc()
}

func (m *Metrics) published(topic string, events int, d time.Duration) {
	m.publishedEvents.WithLabelValues(topic).Add(float64(events))
	m.publishLatency.WithLabelValues(topic).Observe(d.Seconds())
}

func (m *Metrics) acked(topic string, events int) {
	m.ackedEvents.WithLabelValues(topic).Add(float64(events))
}

func (m *Metrics) fetched(topic string, events int) {
	m.fetchedEvents.WithLabelValues(topic).Add(float64(events))
}

// interceptor records every request's latency and status code.
func (m *Metrics) interceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			resp, err := next(ctx, req)
			code := "ok"
			var ce *connect.Error
			if errors.As(err, &ce) {
				code = ce.Code().String()
			} else if err != nil {
				code = connect.CodeUnknown.String()
			}
			m.requests.WithLabelValues(req.Spec().Procedure, code).Observe(time.Since(start).Seconds())
			return resp, err
		}
	})
}

var (
	depthEventsDesc = prometheus.NewDesc("herald_shard_pending_events", "Committed events not yet acknowledged, per shard.", []string{"topic", "shard"}, nil)
	depthBytesDesc  = prometheus.NewDesc("herald_shard_pending_bytes", "Bytes of committed events not yet acknowledged, per shard.", []string{"topic", "shard"}, nil)
	oldestDesc      = prometheus.NewDesc("herald_shard_oldest_event_age_seconds", "Age of the oldest unacknowledged event, per shard.", []string{"topic", "shard"}, nil)
	brokenDesc      = prometheus.NewDesc("herald_shard_unavailable", "1 for a shard that cannot serve (for example a damaged log).", []string{"topic", "shard"}, nil)
)

// depthCollector reads queue depths when Prometheus scrapes, so the
// request paths pay nothing for them.
type depthCollector struct{ node *node.Node }

func (c *depthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- depthEventsDesc
	ch <- depthBytesDesc
	ch <- oldestDesc
	ch <- brokenDesc
}

func (c *depthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now := time.Now()
	for _, t := range c.node.ListTopics() {
		st, err := c.node.TopicStats(ctx, t.Name)
		if err != nil {
			continue
		}
		for _, s := range st.Shards {
			broken := 0.0
			if s.Err != nil {
				broken = 1
			}
			ch <- prometheus.MustNewConstMetric(brokenDesc, prometheus.GaugeValue, broken, t.Name, s.Name)
			ch <- prometheus.MustNewConstMetric(depthEventsDesc, prometheus.GaugeValue, float64(s.Stats.Events), t.Name, s.Name)
			ch <- prometheus.MustNewConstMetric(depthBytesDesc, prometheus.GaugeValue, float64(s.Stats.Bytes), t.Name, s.Name)
			age := 0.0
			if s.Stats.OldestEventTime != 0 {
				age = now.Sub(time.Unix(0, s.Stats.OldestEventTime)).Seconds()
			}
			ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, t.Name, s.Name)
		}
	}
}
