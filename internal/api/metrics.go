package api

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/node"
)

// Metrics are the API's Prometheus series; the node and its host register
// their own.
type Metrics struct {
	publishedEvents *prometheus.CounterVec
	ackedEvents     *prometheus.CounterVec
	fetchedEvents   *prometheus.CounterVec
	publishLatency  *prometheus.HistogramVec
	requests        *prometheus.HistogramVec
	streams         prometheus.Gauge
}

// NewMetrics registers the API's series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
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
			Buckets: node.LatencyBuckets,
		}, []string{"topic"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "herald_request_duration_seconds", Help: "API request latency by method and status code.",
			Buckets: node.LatencyBuckets,
		}, []string{"method", "code"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_publish_streams", Help: "Publish streams open now; their calls count in herald_request_duration_seconds as method /stream/publish, or /herald.v1.HeraldService/PublishStream for the gRPC stream.",
		}),
	}
	reg.MustRegister(m.publishedEvents, m.ackedEvents, m.fetchedEvents, m.publishLatency, m.requests, m.streams)
	return m
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

// streamCall records the latency and code of a call on the publish
// stream method (protocol.PublishStreamPath, or the PublishStream RPC's
// procedure).
func (m *Metrics) streamCall(method string, d time.Duration, code string) {
	m.requests.WithLabelValues(method, code).Observe(d.Seconds())
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
