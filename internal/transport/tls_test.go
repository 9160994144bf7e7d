package transport

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	pb "go.etcd.io/raft/v3/raftpb"

	"herald/internal/backoff"
	"herald/internal/testkit"
	"herald/internal/tlsconfig"
	clusterv1 "herald/proto/herald/cluster/v1"
)

// startTLSNode serves a transport over TLS on its own loopback listener,
// as herald serve does with --peer-ca-file: the port is shared with API
// clients, so a client certificate is verified when given (SharedServer)
// and the cluster handler refuses connections without one. server is the
// node's certificate; dial is what the node dials its peers with.
func startTLSNode(t *testing.T, id uint64, ln net.Listener, server testkit.Certificates, dial *tls.Config, peers map[uint64]string) *node {
	t.Helper()
	r, err := tlsconfig.NewReloader(server.CertFile, server.KeyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := tlsconfig.SharedServer(r, server.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{rec: newRecorder()}
	n.tr = New(Config{NodeID: id, Peers: peers, TLS: dial, Retry: backoff.Policy{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	n.tr.Start(n.rec)
	mux := http.NewServeMux()
	mux.Handle(n.tr.Handler())
	n.serve(t, ln, mux, serverTLS)
	return n
}

// dialTLS returns what a node presenting cert (none when nil) dials with,
// trusting the servers that caFile's CA signed.
func dialTLS(t *testing.T, cert *testkit.Certificates, caFile string) *tls.Config {
	t.Helper()
	var r *tlsconfig.Reloader
	if cert != nil {
		var err error
		if r, err = tlsconfig.NewReloader(cert.CertFile, cert.KeyFile, nil); err != nil {
			t.Fatal(err)
		}
	}
	c, err := tlsconfig.Client(r, caFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMutualTLSRefusesStrangers: over mutual TLS, a node with a
// certificate of the cluster's CA reaches its peer, by stream and by rpc;
// one without a certificate, one whose certificate another CA signed, and
// one dialing unencrypted HTTP/2 are refused, and nothing they send
// reaches the receiver or the rpc handler.
func TestMutualTLSRefusesStrangers(t *testing.T) {
	ca, certs := testkit.TestCA(t, "node1", "node2")
	_, stranger := testkit.TestCA(t, "node3")
	ln1, ln2 := listen(t), listen(t)
	peers := map[uint64]string{1: "https://" + ln1.Addr().String(), 2: "https://" + ln2.Addr().String()}
	b := startTLSNode(t, 2, ln2, certs[1], dialTLS(t, &certs[1], ca.File), peers)
	var mu sync.Mutex
	var calls []uint64
	b.tr.Handle(Handlers{Join: func(ctx context.Context, req *clusterv1.JoinRequest) (*clusterv1.JoinResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, req.GetNode())
		return echoJoin(ctx, req)
	}})

	strangers := map[string]*Transport{
		"no certificate":              New(Config{NodeID: 3, Peers: peers, TLS: dialTLS(t, nil, ca.File)}),
		"a certificate of another CA": New(Config{NodeID: 3, Peers: peers, TLS: dialTLS(t, &stranger[0], ca.File)}),
		"unencrypted HTTP/2":          New(Config{NodeID: 3, Peers: map[uint64]string{2: "http://" + ln2.Addr().String()}}),
	}
	for what, tr := range strangers {
		rec := newRecorder()
		tr.Start(rec)
		t.Cleanup(tr.Close)
		_, err := tr.Join(context.Background(), 2, &clusterv1.JoinRequest{Node: 3})
		if err == nil {
			t.Errorf("%s: the rpc went through", what)
		} else if what == "no certificate" && connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s: rpc = %v, want unauthenticated", what, err)
		}
		// Raft messages until the stream is seen to fail: each is lost.
		deadline := time.After(20 * time.Second)
	sending:
		for i := uint64(1); ; i++ {
			tr.Send(1, []pb.Message{msg(pb.MsgApp, 3, 2, i)})
			rec.mu.Lock()
			refused := rec.unreachable[2] > 0
			rec.mu.Unlock()
			if refused {
				break
			}
			select {
			case <-rec.changed:
			case <-time.After(20 * time.Millisecond):
			case <-deadline:
				t.Errorf("%s: the raft stream was not refused within 20s", what)
				break sending
			}
		}
	}

	a := startTLSNode(t, 1, ln1, certs[0], dialTLS(t, &certs[0], ca.File), peers)
	out, err := a.tr.Join(context.Background(), 2, &clusterv1.JoinRequest{Node: 1})
	if err != nil || !slices.Equal(out.GetFounders(), []uint64{1}) {
		t.Fatalf("node 1's rpc over mutual TLS = %v, %v", out, err)
	}
	a.tr.Send(1, []pb.Message{msg(pb.MsgApp, 1, 2, 42)})
	b.rec.waitFor(t, "node 1's message", func(r *recorder) bool { return len(r.got[1]) > 0 })
	b.rec.mu.Lock()
	defer b.rec.mu.Unlock()
	for _, m := range b.rec.got[1] {
		if m.From != 1 {
			t.Errorf("a stranger's message reached the receiver: %v", m)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(calls, []uint64{1}) {
		t.Errorf("the rpc handler ran for nodes %v, want only node 1's rpc", calls)
	}
}
