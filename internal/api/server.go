package api

import (
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"herald/internal/api/s3ingest"
	"herald/internal/api/sns"
	"herald/internal/auth"
	"herald/internal/node"
	"herald/internal/protocol"
	"herald/proto/herald/v1/heraldv1connect"
)

// compressMinBytes is the smallest response worth gzipping.
const compressMinBytes = 64 << 10

// Handler returns the HTTP handler of a node, open to every caller: the
// API at /herald.v1.HeraldService/, /metrics, /healthz and /readyz. The
// API's metrics are registered with reg, and /metrics serves everything
// reg holds: the node's (node.Config.Registerer), the API's, and the Go
// runtime's and the process's, which Handler adds.
func Handler(n *node.Node, reg *prometheus.Registry) http.Handler {
	return NewHandler(n, reg, Options{})
}

// Options are what NewHandler serves besides the API, and how it checks
// callers.
type Options struct {
	// Tokens are the tokens callers must present (see package auth); nil
	// lets every caller do everything, which herald serve allows only on
	// a loopback address.
	Tokens *auth.Store
	// MetricsNeedToken makes /metrics need a token (of any scope).
	MetricsNeedToken bool
	// Dashboard, if not nil, is served at /dashboard/; its data paths
	// (/dashboard/data/...) need a token of any scope.
	Dashboard http.Handler
	// Logger receives the audit log: a line for every administration of
	// topics and dead letters. nil: slog.Default().
	Logger *slog.Logger
	// SNSZonegroup is the zonegroup in the topic ARNs of the SNS-style API
	// (arn:aws:sns:<zonegroup>::<topic>); empty means "default".
	SNSZonegroup string
	// Stop, once closed, ends the publish streams (the custom one and the
	// PublishStream RPC): each stops reading, answers the calls it has
	// read and closes. Close it when the server begins to shut down,
	// before waiting for requests in flight, of which an open stream is
	// one. nil: streams end when their clients close them.
	Stop <-chan struct{}
}

// NewHandler is Handler with options: every route but the health checks
// and the dashboard's page then needs a token with the scope the route
// table gives it (auth.go).
func NewHandler(n *node.Node, reg *prometheus.Registry, opts Options) http.Handler {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := NewMetrics(reg)
	mux := http.NewServeMux()
	svc := &service{node: n, metrics: m, stop: opts.Stop}
	handlerOpts := []connect.HandlerOption{
		connect.WithInterceptors(m.interceptor(), auditInterceptor(opts.Logger), forwardedHeader()),
		// The request limit is limitRequest's and limitedGzip's (limits.go).
		gzipOption(),
		jsonCodecs(),
		// Gzip only large responses: resetting a gzip writer for every
		// small response costs more than it saves.
		connect.WithCompressMinBytes(compressMinBytes),
	}
	path, h := heraldv1connect.NewHeraldServiceHandler(svc, handlerOpts...)
	mux.Handle(path, limitRequest(jsonErrors(retryAfterStatus(h))))
	// The publish stream RPC is a request that lasts: limitRequest would
	// count all its messages against one request's limit. Each message
	// has that limit instead, which connect enforces before reading it.
	mux.Handle(heraldv1connect.HeraldServicePublishStreamProcedure, streamResponses(connect.NewBidiStreamHandler(
		heraldv1connect.HeraldServicePublishStreamProcedure, svc.PublishStream,
		gzipOption(), jsonCodecs(), connect.WithCompressMinBytes(compressMinBytes),
		connect.WithReadMaxBytes(MaxRequestBytes))))
	// Fetch responses are never compressed, whatever the client accepts:
	// they are the large responses, and are mostly event payloads, which
	// are usually compressed or encrypted by their publishers already.
	// Deflating them at BestSpeed took about a fifth of the server's CPU
	// while draining a backlog of 1 KiB random events, and inflating them
	// as much of the client's, to save nothing. Deciding it here, rather
	// than in the Go client, covers every client (curl --compressed,
	// other SDKs, old Go clients) and keeps the cost off the server, which
	// all consumers share. The same service, with the handler options
	// but one, serves the procedure: the mux prefers the exact path.
	_, fetch := heraldv1connect.NewHeraldServiceHandler(svc,
		append(handlerOpts, connect.WithCompressMinBytes(math.MaxInt))...)
	mux.Handle(heraldv1connect.HeraldServiceFetchProcedure, limitRequest(jsonErrors(retryAfterStatus(fetch))))
	a := &authorizer{tokens: opts.Tokens, metricsNeedToken: opts.MetricsNeedToken, errors: connect.NewErrorWriter(), now: time.Now, log: opts.Logger}
	mux.Handle(protocol.PublishStreamPath, &publishStreams{svc: svc})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { readyz(n, w) })
	if opts.Dashboard != nil {
		mux.Handle(dashboardPath, opts.Dashboard)
	}
	// The SNS-style API takes form-encoded POSTs to /, where the aws CLI
	// and boto3 send them; its Actions' scopes are in snsActionScopes.
	// Without tokens, it serves loopback callers only.
	snsAPI := sns.New(n, sns.Config{Zonegroup: opts.SNSZonegroup, AllowRemote: opts.Tokens != nil})
	mux.Handle("POST "+snsPath+"{$}", snsAPI)
	// S3 event notifications (publish scope), to the topic in the path.
	mux.Handle("POST "+s3IngestPath+"{topic}", retryAfterStatus(s3ingest.New(n, connectError)))
	mux.HandleFunc(s3IngestPath, s3Misrouted)
	// What a browser or a mistyped path finds.
	// ... except for the visit to a SubscriptionConfirmation's
	// SubscribeURL, which the SNS-style API serves.
	mux.Handle("GET /{$}", orConfirmation(snsAPI, root(opts.Dashboard != nil)))
	mux.HandleFunc("/", notFound)
	return a.wrap(mux)
}

// orConfirmation serves the visits to a SubscribeURL (see
// sns.IsConfirmation) with snsAPI, and other requests with h.
func orConfirmation(snsAPI, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sns.IsConfirmation(r) {
			snsAPI.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// dashboardPath is where Options.Dashboard is served.
const dashboardPath = "/dashboard/"

// readyz reports ready (200) once the node has opened every shard it had
// at its start, and until then not ready (503) with how many have opened:
// each shard serves as soon as it has. Shards that could not be opened
// are listed; the node serves every other shard, so it is ready all the
// same.
func readyz(n *node.Node, w http.ResponseWriter) {
	r := n.Readiness()
	broken := n.BrokenShards()
	w.Header().Set("Content-Type", "application/json")
	body := map[string]any{"ready": r.Ready, "shards_open": r.ShardsOpen, "shards": r.Shards}
	if len(broken) > 0 {
		m := make(map[string]string, len(broken))
		for name, err := range broken {
			m[name] = err.Error()
		}
		body["unavailable_shards"] = m
	}
	if !r.Ready {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(body)
}

// retryAfterStatus turns the Connect protocol's 429 for resource_exhausted
// (a full queue, too many proposals: retryable overloads) into 503 with
// Retry-After, which is what HTTP clients and proxies retry on. Connect
// clients read the code from the body, so they are unaffected; gRPC
// responses always carry 200. (A request over the request limit is
// invalid_argument, 400: see limits.go.)
func retryAfterStatus(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&statusRewriter{ResponseWriter: w}, r)
	})
}

type statusRewriter struct {
	http.ResponseWriter
}

func (s *statusRewriter) WriteHeader(code int) {
	if code == http.StatusTooManyRequests {
		code = http.StatusServiceUnavailable
		if s.Header().Get("Retry-After") == "" {
			s.Header().Set("Retry-After", retryAfterSeconds)
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRewriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRewriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
