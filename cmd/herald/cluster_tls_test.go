package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"herald/client"
	"herald/internal/testkit"
	"herald/internal/tlsconfig"
	clusterv1 "herald/proto/herald/cluster/v1"
	"herald/proto/herald/cluster/v1/clusterv1connect"
)

// TestE2EClusterOverMutualTLS runs three herald serve processes with
// TLS and --peer-ca-file: the nodes reach each other (a majority is
// needed to serve at all), an event published through each node is
// consumed through another, and an API client, which trusts the CA but
// has no node certificate, is refused by the node-to-node service.
func TestE2EClusterOverMutualTLS(t *testing.T) {
	ca, certs := testkit.TestCA(t, "node1", "node2", "node3")
	tc, err := tlsconfig.Client(nil, ca.File)
	if err != nil {
		t.Fatal(err)
	}
	var addrs, spec []string
	for i := range 3 {
		addrs = append(addrs, testkit.FreeAddr(t))
		spec = append(spec, fmt.Sprintf("%d=%s", i+1, addrs[i]))
	}
	clients := make([]*client.Client, 3)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		clients[i] = client.New("https://"+addrs[i], client.WithTLSConfig(tc), client.WithPublishRetries(20))
		wg.Go(func() {
			_, errs[i] = tryStartServerWith(t, clients[i], t.TempDir(), addrs[i], "--node-id", fmt.Sprint(i+1), "--peers", strings.Join(spec, ","),
				"--tls-cert-file", certs[i].CertFile, "--tls-key-file", certs[i].KeyFile, "--peer-ca-file", ca.File)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}

	ctx := context.Background()
	if _, err := clients[0].CreateTopic(ctx, "orders", map[string]string{"shards": "3"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i, c := range clients {
		payload := fmt.Sprintf("through node %d", i+1)
		ids, err := c.Publish(ctx, "orders", client.Event{Key: fmt.Sprint("k", i), Payload: []byte(payload)})
		if err != nil {
			t.Fatalf("publish through node %d: %v", i+1, err)
		}
		want[ids[0]] = payload
	}
	byShard, unreadable := drainTopic(t, clients[1], "orders")
	if len(unreadable) > 0 {
		t.Fatalf("unreadable shards: %v", unreadable)
	}
	got := map[string]string{}
	for _, ds := range byShard {
		for _, d := range ds {
			got[d.ID] = string(d.Payload)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("consumed through node 2: %v, want %v", got, want)
	}

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	peerless := clusterv1connect.NewClusterServiceClient(hc, "https://"+addrs[0], connect.WithGRPC())
	_, err = peerless.Fetch(ctx, connect.NewRequest(&clusterv1.FetchRequest{}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "node certificate") {
		t.Errorf("the cluster service called without a node certificate: %v, want unauthenticated, asking for a node certificate", err)
	}
}

// TestPeerMutualTLSSettings: --peer-ca-file needs the node's certificate
// and a readable CA file; a cluster node with TLS needs it; with it, a
// cluster node may listen off loopback without --insecure-no-auth; each
// refusal says what to do and, through serve, touches no data.
func TestPeerMutualTLSSettings(t *testing.T) {
	logs := slog.New(slog.NewTextHandler(io.Discard, nil))
	ca, certs := testkit.TestCA(t, "node1")
	loopback := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7601}
	everywhere := &net.TCPAddr{IP: net.IPv4zero, Port: 7601}

	cfg := defaultServeConfig()
	cfg.PeerCAFile = ca.File
	_, err := newSecurity(cfg, loopback, logs)
	if err == nil || !strings.Contains(err.Error(), "--peer-ca-file needs --tls-cert-file and --tls-key-file") {
		t.Errorf("--peer-ca-file without a certificate: %v", err)
	}

	cfg.TLSCertFile, cfg.TLSKeyFile = certs[0].CertFile, certs[0].KeyFile
	bad := testkit.WriteBadCAFiles(t)
	for what, file := range map[string]string{"missing": bad.Missing, "a directory": bad.Dir, "empty": bad.Empty, "a key": bad.KeyOnly, "corrupt": bad.Corrupt} {
		broken := cfg
		broken.PeerCAFile = file
		if _, err := newSecurity(broken, loopback, logs); err == nil || !strings.Contains(err.Error(), "--peer-ca-file") {
			t.Errorf("a %s peer CA file: %v, want an error naming --peer-ca-file", what, err)
		}
	}

	sec, err := newSecurity(cfg, loopback, logs)
	if err != nil {
		t.Fatal(err)
	}
	if err := sec.checkCluster(everywhere, false); err != nil {
		t.Errorf("a cluster node with mutual TLS on 0.0.0.0: %v", err)
	}
	if sec.peerScheme() != "https" {
		t.Errorf("peers of a TLS node are dialed with %s", sec.peerScheme())
	}

	// TLS without the peer CA: the node's peers could not dial it.
	cfg.PeerCAFile = ""
	cfg.DataDir = t.TempDir()
	cfg.Listen = testkit.FreeAddr(t)
	cfg.NodeID, cfg.Peers = 1, "1="+cfg.Listen+",2=127.0.0.1:7602,3=127.0.0.1:7603"
	var out strings.Builder
	err = serve(context.Background(), cfg, &out)
	if err == nil || !strings.Contains(err.Error(), "a cluster node with TLS needs --peer-ca-file") {
		t.Errorf("a cluster node with TLS and no peer CA: %v", err)
	}
	if entries, _ := os.ReadDir(cfg.DataDir); len(entries) != 0 {
		t.Errorf("the refused node wrote %d entries into its data directory", len(entries))
	}
}
