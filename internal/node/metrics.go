package node

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/delivery"
	"herald/internal/topic"
)

// LatencyBuckets are the buckets of herald's latency histograms: 50µs to
// about 1.6s.
var LatencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 16)

// deliveryMetrics receive push delivery outcomes (delivery.Metrics).
type deliveryMetrics struct {
	disabled     *prometheus.CounterVec
	delivered    *prometheus.CounterVec
	retried      *prometheus.CounterVec
	deadLettered *prometheus.CounterVec
	latency      *prometheus.HistogramVec
}

func newDeliveryMetrics() *deliveryMetrics {
	return &deliveryMetrics{
		disabled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_subscription_disabled_total",
			Help: "Subscriptions this node disabled because their endpoint was gone (HTTP 410) or kept failing for their disable_after; alert on any increase.",
		}, []string{"topic", "subscription"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_delivered_events_total", Help: "Events pushed to their endpoint and acknowledged by it.",
		}, []string{"topic", "endpoint"}),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_delivery_retries_total", Help: "Failed push attempts that will be retried.",
		}, []string{"topic", "endpoint"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_dead_lettered_events_total", Help: "Events moved to the dead-letter queue, by reason.",
		}, []string{"topic", "endpoint", "reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "herald_delivery_latency_seconds", Help: "Time from publish to the endpoint acknowledging the event.",
			Buckets: LatencyBuckets,
		}, []string{"topic", "endpoint"}),
	}
}

func (m *deliveryMetrics) Delivered(topic, scheme string, latency time.Duration) {
	m.delivered.WithLabelValues(topic, scheme).Inc()
	m.latency.WithLabelValues(topic, scheme).Observe(latency.Seconds())
}

func (m *deliveryMetrics) subscriptionDisabled(topic, sub string) {
	m.disabled.WithLabelValues(topic, sub).Inc()
}

func (m *deliveryMetrics) Retried(topic, scheme string) {
	m.retried.WithLabelValues(topic, scheme).Inc()
}

func (m *deliveryMetrics) DeadLettered(topic, scheme, reason string) {
	m.deadLettered.WithLabelValues(topic, scheme, reason).Inc()
}

func newForwardsMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_forwarded_requests_total",
		Help: "Shard requests this node passed to another node because it does not lead the shard, by how: raft (a follower's proposal), relay (from a node holding no replica), fetch, nack, ack (an ack by receipt).",
	}, []string{"how"})
}

// registerMetrics registers the node's series with reg: delivery outcomes
// and the shards' queue depths.
func (n *Node) registerMetrics(reg prometheus.Registerer) error {
	m := n.delivery
	for _, c := range []prometheus.Collector{m.disabled, m.delivered, m.retried, m.deadLettered, m.latency, n.forwards.counter, &depthCollector{node: n}, &healthCollector{node: n}} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register node metrics: %w", err)
		}
	}
	return nil
}

var (
	depthEventsDesc = prometheus.NewDesc("herald_shard_pending_events", "Committed events not yet acknowledged, per shard.", []string{"topic", "shard"}, nil)
	depthBytesDesc  = prometheus.NewDesc("herald_shard_pending_bytes", "Bytes of committed events not yet acknowledged, per shard.", []string{"topic", "shard"}, nil)
	oldestDesc      = prometheus.NewDesc("herald_shard_oldest_event_age_seconds", "Age of the oldest unacknowledged event, per shard.", []string{"topic", "shard"}, nil)
	brokenDesc      = prometheus.NewDesc("herald_shard_unavailable", "1 for a shard that cannot serve (for example a damaged log).", []string{"topic", "shard"}, nil)
)

// depthCollector reads queue depths when Prometheus scrapes, so the
// request paths pay nothing for them.
type depthCollector struct{ node *Node }

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

var (
	failuresDesc = prometheus.NewDesc("herald_delivery_consecutive_failures",
		"Failed push attempts since the last success, per subscription and shard, on the node that leads the shard.", healthLabels, nil)
	lastSuccessDesc = prometheus.NewDesc("herald_delivery_last_success_timestamp_seconds",
		"Unix time of the last successful push, per subscription and shard, on the node that leads the shard; 0 if none since it became leader.", healthLabels, nil)
	lastErrorDesc = prometheus.NewDesc("herald_delivery_last_error_timestamp_seconds",
		"Unix time of the last failed push, per subscription and shard, on the node that leads the shard; 0 if none since it became leader.", healthLabels, nil)
)

// healthLabels label the delivery health gauges: a topic's default
// subscription is "default".
var healthLabels = []string{"topic", "subscription", "shard", "endpoint"}

// healthCollector exports the health of the dispatchers this node runs
// when Prometheus scrapes: only the leader of a shard has its series.
type healthCollector struct{ node *Node }

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- failuresDesc
	ch <- lastSuccessDesc
	ch <- lastErrorDesc
}

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	c.node.push.EachHealth(func(name, sub string, i int, scheme string, h delivery.Health) {
		labels := []string{name, sub, topic.ShardName(name, i), scheme}
		ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.GaugeValue, float64(h.ConsecutiveFailures), labels...)
		ch <- prometheus.MustNewConstMetric(lastSuccessDesc, prometheus.GaugeValue, unixSeconds(h.LastSuccess), labels...)
		ch <- prometheus.MustNewConstMetric(lastErrorDesc, prometheus.GaugeValue, unixSeconds(h.LastErrorTime), labels...)
	})
}

// unixSeconds is t as Unix seconds, and the zero time as 0.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
