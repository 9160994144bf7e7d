// Package transport connects the nodes of a herald cluster. Each node
// opens one long-lived Raft stream to each peer (a connection of its own,
// switched from HTTP/1.1 on the peers' API port; stream.go) and sends on
// it, in batches, the Raft messages of all its groups addressed to that
// peer; it receives the peers' streams and hands their messages to its
// host. Besides the streams, a node calls the
// typed rpcs of the cluster service on its peers (the leader of a shard
// it does not lead, say) and answers theirs with its Handlers.
//
// Raft tolerates lost messages, so the transport never blocks raft: a
// peer's queue is bounded, and what does not fit is dropped and reported
// unreachable, as is what was in flight when a stream broke. A broken
// stream is reopened after a pause that grows while the peer stays
// unreachable. A dead connection (a peer that stopped answering without
// closing it, behind a partition) is found by the stream's keepalives,
// and by HTTP/2 pings for the rpcs.
//
// With Config.TLS, the connections are mutual TLS: a node dials its peers
// over TLS presenting its certificate, and its handler refuses a request
// whose connection did not present a certificate the server verified
// (tlsconfig.SharedServer), so that API clients, who share the port but
// have no certificate, cannot speak for a node.
package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/backoff"
	"herald/internal/tlsconfig"
	"herald/proto/herald/cluster/v1/clusterv1connect"
)

// Receiver is what the transport hands incoming messages and send
// outcomes to: the host of the node's Raft groups.
type Receiver interface {
	// Receive takes a message for a group without blocking; it may drop
	// the message (a busy or unknown group).
	Receive(group uint64, m pb.Message) error
	// ReportUnreachable tells group that a message to node to was lost.
	ReportUnreachable(group, to uint64)
	// ReportSnapshot tells group whether the snapshot it sent to node to
	// went out (failed false) or was lost (failed true).
	ReportSnapshot(group, to uint64, failed bool)
}

// Config configures a Transport.
type Config struct {
	NodeID uint64
	// Peers maps every other node's id to the base URL of its API port
	// (http://127.0.0.1:7602, https:// with TLS). The node's own id may be
	// present; it is ignored.
	Peers map[uint64]string
	// QueueSize bounds the messages waiting for one peer (default 4096).
	QueueSize int
	// MaxBatch bounds the messages sent to a peer in one batch (default 512).
	MaxBatch int
	// Retry paces reconnection to an unreachable peer (default 50ms
	// doubling to 2s, with jitter).
	Retry backoff.Policy
	// TLS, when set, makes the cluster's connections mutual TLS: peers
	// are dialed with it (tlsconfig.Client, with the node's certificate
	// and the CA that signs the nodes'), and Handler refuses requests
	// without a verified client certificate.
	TLS    *tls.Config
	Logger *slog.Logger

	// dial connects to a peer's URL for its Raft stream (tests count
	// what goes through it); nil means dialer(TLS).
	dial func(context.Context, *url.URL) (net.Conn, error)
}

func (c *Config) setDefaults() {
	if c.QueueSize <= 0 {
		c.QueueSize = 4096
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 512
	}
	if c.Retry.Initial <= 0 {
		c.Retry = backoff.Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.5}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.dial == nil {
		c.dial = dialer(c.TLS)
	}
}

// http2Client speaks HTTP/2, over TLS with tc and unencrypted without,
// pinging a connection that has been quiet for two seconds and closing it
// if the ping goes unanswered for two more: a partitioned peer must be
// noticed long before TCP would.
func http2Client(tc *tls.Config) *http.Client {
	var p http.Protocols
	if tc != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: &http.Transport{
		Protocols:       &p,
		TLSClientConfig: tc,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout:  2 * time.Second,
			PingTimeout:      2 * time.Second,
			WriteByteTimeout: 4 * time.Second,
		},
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	}}
}

// Transport is a node's side of the cluster's connections.
type Transport struct {
	cfg  Config
	log  *slog.Logger
	rpcs *http.Client // HTTP/2, for the rpcs

	peersMu sync.RWMutex
	peers   map[uint64]*peer // grows with AddPeer
	started bool             // Start ran: a peer added later starts at once

	mu       sync.RWMutex
	receiver Receiver

	handlers atomic.Pointer[Handlers] // see Handle

	cluster clusterCheck // see SetCluster

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// New returns a transport to cfg.Peers. It sends nothing until Start.
func New(cfg Config) *Transport {
	cfg.setDefaults()
	t := &Transport{
		cfg:   cfg,
		log:   cfg.Logger.With("node", cfg.NodeID),
		rpcs:  http2Client(cfg.TLS),
		peers: make(map[uint64]*peer),
		stop:  make(chan struct{}),
	}
	for id, url := range cfg.Peers {
		if id == cfg.NodeID {
			continue
		}
		t.peers[id] = t.newPeer(id, url)
	}
	return t
}

func (t *Transport) newPeer(id uint64, url string) *peer {
	p := &peer{t: t, id: id, url: url, queue: make(chan outgoing, t.cfg.QueueSize)}
	p.client = clusterv1connect.NewClusterServiceClient(identified{next: t.rpcs, t: t, peer: p.describe()}, url, connect.WithGRPC())
	return p
}

// peer returns the peer with id, or nil.
func (t *Transport) peer(id uint64) *peer {
	t.peersMu.RLock()
	defer t.peersMu.RUnlock()
	return t.peers[id]
}

// Start hands incoming messages to r from now on and starts a sender per
// peer.
func (t *Transport) Start(r Receiver) {
	t.mu.Lock()
	t.receiver = r
	t.mu.Unlock()
	t.peersMu.Lock()
	defer t.peersMu.Unlock()
	t.started = true
	for _, p := range t.peers {
		t.wg.Go(p.run)
	}
}

// Close stops the senders, dropping what they still queue, ends the
// streams peers opened to this node, and waits for both. Call it after
// the node's API requests have finished (they may need the cluster) and
// before the HTTP server's Shutdown (which would wait for the streams).
func (t *Transport) Close() {
	t.once.Do(func() {
		t.peersMu.Lock() // AddPeer starts no sender after this
		close(t.stop)
		t.peersMu.Unlock()
	})
	t.wg.Wait()
}

// Handler returns the path and HTTP handler of the node-to-node service
// (its rpcs and the Raft stream), to mount on the node's API port. With
// Config.TLS, it serves only requests whose connection presented a
// verified client certificate.
func (t *Transport) Handler() (string, http.Handler) {
	path, rpcs := clusterv1connect.NewClusterServiceHandler(&service{t: t})
	rpcs = t.knownProcedures(rpcs)
	h := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The stream and the rpc it replaces share a path: a GET opens
		// the stream, a POST calls the rpc (a node of the release before).
		if r.URL.Path == raftStreamPath && r.Method != http.MethodPost {
			t.serveRaftStream(w, r)
			return
		}
		rpcs.ServeHTTP(w, r)
	}))
	h = t.sameCluster(h)
	if t.cfg.TLS != nil {
		h = peersOnly(h)
	}
	return path, h
}

// peersOnly refuses, as unauthenticated, a request whose connection did
// not present a client certificate that the server verified: on a port
// shared with the API, a TLS connection without one is an API client's.
func peersOnly(h http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tlsconfig.PeerVerified(r.TLS) {
			err := connect.NewError(connect.CodeUnauthenticated, errors.New("the cluster service is for herald nodes only: connect with a node certificate signed by the CA of --peer-ca-file"))
			errs.Write(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Send queues msgs of group for their recipients. It never blocks: a
// message that does not fit in its peer's queue is dropped and reported
// unreachable (raft sends it again). It implements host.Transport.
func (t *Transport) Send(group uint64, msgs []pb.Message) {
	for _, m := range msgs {
		p := t.peer(m.To)
		if p == nil {
			t.log.Warn("dropping a raft message to an unknown node; is it in --peers?", "to", m.To, "group", group)
			continue
		}
		select {
		case p.queue <- outgoing{group: group, msg: m}:
		default:
			t.report(group, m, true)
		}
	}
}

// report tells the sending group that m was lost (or, with lost false,
// that a snapshot in m went out).
func (t *Transport) report(group uint64, m pb.Message, lost bool) {
	t.mu.RLock()
	r := t.receiver
	t.mu.RUnlock()
	if r == nil {
		return
	}
	if m.Type == pb.MsgSnap {
		r.ReportSnapshot(group, m.To, lost)
	}
	if lost {
		r.ReportUnreachable(group, m.To)
	}
}

type outgoing struct {
	group uint64
	msg   pb.Message
}
