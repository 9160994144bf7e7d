// Package client is the Go client library for herald, a durable, sharded
// event queue.
//
// A Client talks to any herald node over the Connect protocol (the default)
// or gRPC. Its methods take and return plain Go types; callers never build
// protobuf messages. Errors returned by the server are *connect.Error values,
// returned as is, so connect.CodeOf works on them; IsNotFound,
// IsAlreadyExists, IsResourceExhausted and IsRetryable cover the common
// cases.
//
//	c := client.New(client.DefaultAddress)
//	ids, err := c.Publish(ctx, "orders", client.Event{Key: "customer-42", Payload: data})
//
// A server reads requests of up to MaxRequestBytes (64 MiB); Publish sends
// a larger batch as several requests.
package client

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"herald/proto/herald/v1/heraldv1connect"
)

// DefaultAddress is the base URL of a herald node running locally with its
// default settings.
const DefaultAddress = "http://127.0.0.1:7600"

// Client calls a herald node. It is safe for concurrent use.
type Client struct {
	svc      heraldv1connect.HeraldServiceClient
	timeout  time.Duration
	batchMax int // > 0: WithPublishBatching
	batchers batchers
	retries  int            // WithPublishRetries
	router   *router        // WithLeaderRouting
	stream   *publishStream // WithPublishStream without WithLeaderRouting (the router has a stream per node)
}

// An Option configures a Client.
type Option func(*config)

type config struct {
	httpClient *http.Client
	grpc       bool
	timeout    time.Duration
	batchMax   int
	retries    int
	token      string
	tls        *tls.Config
	routing    bool     // WithLeaderRouting
	stream     bool     // WithPublishStream
	streamRPC  bool     // WithPublishStreamRPC
	seeds      []string // WithLeaderRouting
}

// WithToken makes the Client send token ("Authorization: Bearer") with
// every call, as a server with tokens configured requires.
func WithToken(token string) Option {
	return func(c *config) { c.token = token }
}

// WithTLSConfig makes the Client's own HTTP client use tc for https://
// base URLs, for example to trust the CA of the server's certificate
// (tc.RootCAs). With WithHTTPClient, only the publish stream
// (WithPublishStream), which keeps its own connections, uses it.
func WithTLSConfig(tc *tls.Config) Option {
	return func(c *config) { c.tls = tc }
}

// WithHTTPClient makes the Client send its requests with hc. With WithGRPC,
// hc must speak HTTP/2 (for an http:// base URL: unencrypted HTTP/2).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) { c.httpClient = hc }
}

// WithGRPC makes the Client use the gRPC protocol instead of the Connect
// protocol. Without WithHTTPClient, the Client then uses HTTP/2, unencrypted
// for http:// base URLs.
func WithGRPC() Option {
	return func(c *config) { c.grpc = true }
}

// WithTimeout bounds every call to d (0, the default, means no bound other
// than the caller's context). Fetch gets d plus the time it is asked to wait.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// compressMinBytes is the smallest message worth gzipping.
const compressMinBytes = 64 << 10

// New returns a Client for the herald node at baseURL, such as
// "http://127.0.0.1:7600". An empty baseURL means DefaultAddress, and a
// baseURL without a scheme gets "http://".
func New(baseURL string, opts ...Option) *Client {
	var cfg config
	for _, opt := range opts {
		opt(&cfg)
	}
	var hc connect.HTTPClient = cfg.httpClient
	if cfg.httpClient == nil {
		hc = defaultHTTPClient(cfg.grpc, cfg.tls)
	}
	hc = oneWriteClient{next: hc}
	// Events are mostly small and the server is usually near: compressing
	// every request costs more CPU than it saves (gzip state is reset per
	// message).
	copts := []connect.ClientOption{connect.WithCompressMinBytes(compressMinBytes)}
	if cfg.grpc {
		copts = append(copts, connect.WithGRPC())
	}
	if cfg.token != "" {
		copts = append(copts, connect.WithInterceptors(bearerToken(cfg.token)))
	}
	c := &Client{
		svc:      heraldv1connect.NewHeraldServiceClient(hc, normalizeURL(baseURL), copts...),
		timeout:  cfg.timeout,
		batchMax: cfg.batchMax,
		retries:  cfg.retries,
	}
	if cfg.stream && !cfg.routing {
		c.stream = newPublishStream(normalizeURL(baseURL), cfg.token, cfg.tls, cfg.streamRPC)
	}
	if cfg.routing {
		c.router = newRouter(normalizeURL(baseURL), cfg.seeds, func(url string) heraldv1connect.HeraldServiceClient {
			return heraldv1connect.NewHeraldServiceClient(hc, url, copts...)
		})
		if cfg.stream {
			c.router.newStream = func(url string) *publishStream { return newPublishStream(url, cfg.token, cfg.tls, cfg.streamRPC) }
		}
	}
	return c
}

// Close closes the Client's publish stream (WithPublishStream), failing
// the calls still waiting on it. A Client without one holds nothing that
// needs closing. The Client must not be used afterwards.
func (c *Client) Close() error {
	if c.stream != nil {
		c.stream.close()
	}
	if c.router != nil {
		c.router.closeStreams()
	}
	return nil
}

// Service returns the generated Connect client underneath c, for callers
// that need the protobuf messages themselves.
func (c *Client) Service() heraldv1connect.HeraldServiceClient {
	return c.svc
}

func normalizeURL(baseURL string) string {
	if baseURL == "" {
		return DefaultAddress
	}
	if !strings.Contains(baseURL, "://") {
		baseURL = "http://" + baseURL
	}
	return strings.TrimRight(baseURL, "/")
}

// bearerToken adds the token to every request.
func bearerToken(token string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	}
}

func defaultHTTPClient(grpc bool, tc *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tc != nil {
		tr.TLSClientConfig = tc.Clone()
	}
	if grpc {
		var p http.Protocols
		p.SetHTTP2(true)
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	return &http.Client{Transport: tr}
}

// callContext applies the Client's timeout, extended by extra, to ctx.
func (c *Client) callContext(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	if c.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout+extra)
}
