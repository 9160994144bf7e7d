package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"herald/bench/load"
	"herald/internal/testkit"
	"herald/internal/tlsconfig"
	"herald/tests/framework"
)

// TestServeRefusesToRunOpenOffLoopback: without tokens, serve refuses a
// non-loopback address with an error that says why and what to do, unless
// --insecure-no-auth is given; with tokens, or on loopback, it starts.
func TestServeRefusesToRunOpenOffLoopback(t *testing.T) {
	logs := slog.New(slog.NewTextHandler(io.Discard, nil))
	everywhere := &net.TCPAddr{IP: net.IPv4zero, Port: 7600}
	cfg := defaultServeConfig()
	_, err := newSecurity(cfg, everywhere, logs)
	for _, want := range []string{"refusing to listen on 0.0.0.0:7600 without tokens", "herald token create", "--tokens-file", "--listen 127.0.0.1:7600", "--insecure-no-auth"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("open on 0.0.0.0: %v, want an error saying %q", err, want)
		}
	}
	for _, addr := range []*net.TCPAddr{{IP: net.IPv6unspecified, Port: 7600}, {IP: net.ParseIP("192.0.2.1"), Port: 7600}} {
		if _, err := newSecurity(cfg, addr, logs); err == nil {
			t.Errorf("open on %s: started", addr)
		}
	}
	for _, addr := range []*net.TCPAddr{{IP: net.IPv4(127, 0, 0, 1), Port: 7600}, {IP: net.IPv6loopback, Port: 7600}} {
		if _, err := newSecurity(cfg, addr, logs); err != nil {
			t.Errorf("open on %s: %v", addr, err)
		}
	}
	insecure := cfg
	insecure.InsecureNoAuth = true
	if _, err := newSecurity(insecure, everywhere, logs); err != nil {
		t.Errorf("--insecure-no-auth on 0.0.0.0: %v", err)
	}
	withTokens := cfg
	withTokens.TokensFile = filepath.Join(t.TempDir(), "tokens")
	cli(t, "", "", "token", "create", "--scope", "admin", "--name", "ops", "--tokens-file", withTokens.TokensFile)
	if _, err := newSecurity(withTokens, everywhere, logs); err != nil {
		t.Errorf("tokens on 0.0.0.0: %v", err)
	}
	withTokens.TokensFile += ".missing"
	if _, err := newSecurity(withTokens, everywhere, logs); err == nil || !strings.Contains(err.Error(), "read tokens file") {
		t.Errorf("a missing tokens file: %v", err)
	}
}

var tokenRE = regexp.MustCompile(`token: (hrld_[0-9a-f_]+)\n`)

// createToken runs herald token create and returns the token.
func createToken(t *testing.T, file, scope, name string) string {
	t.Helper()
	out := cli(t, "", "", "token", "create", "--scope", scope, "--name", name, "--tokens-file", file)
	m := tokenRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("token create printed no token:\n%s", out)
	}
	return m[1]
}

func TestTokenCreate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	a := createToken(t, file, "admin", "ops")
	b := createToken(t, file, "publish,consume", "ci")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], " ops admin ") || !strings.Contains(lines[1], " ci publish,consume ") {
		t.Errorf("tokens file:\n%s", data)
	}
	if strings.Contains(string(data), a[22:]) || strings.Contains(string(data), b[22:]) {
		t.Errorf("the tokens file holds a token's secret:\n%s", data)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("tokens file mode %v, want 0600", fi.Mode().Perm())
	}
	out := cli(t, "", "", "token", "create", "--scope", "consume", "--name", "reader", "--expires-in", "720h")
	if !tokenRE.MatchString(out) || !strings.Contains(out, "add this line") || !regexp.MustCompile(` reader consume [0-9a-f]{64} \d{4}-\d\d-\d\dT`).MatchString(out) {
		t.Errorf("token create without a file:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scope", "root", "--name", "x"}, `--scope: unknown scope "root"`},
		{[]string{"--scope", "admin", "--name", "a b"}, `token name "a b"`},
		{[]string{"--scope", "admin", "--name", "x", "--expires-in", "-1h"}, "--expires-in -1h0m0s: give a positive duration"},
		{[]string{"--name", "x"}, `required flag(s) "scope" not set`},
	} {
		r := runCLI(context.Background(), "", append([]string{"token", "create", "--tokens-file", file}, tc.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("token create %v: exit %d, stderr %q, want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if after, _ := os.ReadFile(file); string(after) != string(data) {
		t.Errorf("failed token creations changed the tokens file:\n%s", after)
	}

	// A file whose last line has no newline (edited by hand) gets one.
	if err := os.WriteFile(file, []byte(strings.TrimSuffix(string(data), "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	createToken(t, file, "consume", "third")
	if after, _ := os.ReadFile(file); strings.Count(string(after), "\n") != 3 || !strings.Contains(string(after), "\n"+strings.Fields(lines[1])[0]+" ci ") {
		t.Errorf("after appending to a file without a final newline:\n%s", after)
	}
}

// TestServeWithTLSAndTokens runs serve with a certificate and a tokens
// file and uses it as users would, through the CLI: with the CA and a
// token of the right scope; without the CA (a TLS error that says what to
// do); without a token or with one of the wrong scope (refused, naming the
// scope); and with a token added to the file and loaded on SIGHUP.
func TestServeWithTLSAndTokens(t *testing.T) {
	dir := t.TempDir()
	certs, err := testkit.WriteCertificates(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	admin := createToken(t, tokens, "admin", "ops")
	publisher := createToken(t, tokens, "publish", "ci")
	bencher := createToken(t, tokens, "admin,publish", "bench")

	cfg := defaultServeConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.Listen = testkit.FreeAddr(t)
	cfg.LogLevel = "info"
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TokensFile = certs.CertFile, certs.KeyFile, tokens
	logs := serveInProcess(t, cfg).logs
	url := "https://" + cfg.Listen
	withCA := []string{"--server", url, "--ca-file", certs.CAFile}
	run := func(args ...string) result { return runCLI(context.Background(), "", args...) }
	framework.WaitFor(t, "the server to answer", func() bool {
		return run(append(withCA, "--token", admin, "topic", "list")...).code == 0
	})

	if r := run(append(withCA, "--token", admin, "topic", "create", "orders", "--shards", "2")...); r.code != 0 {
		t.Fatalf("topic create with the CA and an admin token: %s", r.stderr)
	}
	r := run("--server", url, "--token", admin, "topic", "list")
	if r.code != 1 || !strings.Contains(r.stderr, "certificate signed by unknown authority") || !strings.Contains(r.stderr, "pass the CA's PEM file with --ca-file") {
		t.Errorf("without the CA: exit %d, stderr %q, want a TLS error saying to pass --ca-file", r.code, r.stderr)
	}
	r = run(append(withCA, "topic", "delete", "orders")...)
	if r.code != 1 || !strings.Contains(r.stderr, "DeleteTopic needs a token with the admin scope; no token") {
		t.Errorf("without a token: exit %d, stderr %q", r.code, r.stderr)
	}
	r = run(append(withCA, "--token", publisher, "topic", "delete", "orders")...)
	if r.code != 1 || !strings.Contains(r.stderr, "DeleteTopic needs a token with the admin scope; token") {
		t.Errorf("with a publish token: exit %d, stderr %q", r.code, r.stderr)
	}
	// herald bench verifies the server with --ca-file too, over requests,
	// gRPC and the publish stream.
	for _, mode := range [][]string{nil, {"--grpc"}, {"--stream"}} {
		args := append(append(withCA, "--token", bencher, "bench", "publish", "--topic", "bench", "--count", "20", "--producers", "2", "-o", "json"), mode...)
		r := run(args...)
		var res load.Result
		if err := json.Unmarshal([]byte(r.stdout), &res); r.code != 0 || err != nil || res.Events != 20 || res.Errors != 0 {
			t.Errorf("bench publish %v over TLS: exit %d, %d events, %d errors, stderr %q", mode, r.code, res.Events, res.Errors, r.stderr)
		}
	}
	t.Setenv(tokenEnv, publisher)
	t.Setenv(caFileEnv, certs.CAFile)
	if r := run("--server", url, "publish", "orders", "--key", "k", "one"); r.code != 0 {
		t.Errorf("publish with $HERALD_TOKEN and $HERALD_CA_FILE: %s", r.stderr)
	}
	os.Unsetenv(tokenEnv)
	os.Unsetenv(caFileEnv)

	// A token added to the file works once the server has had SIGHUP.
	consumer := createToken(t, tokens, "consume", "reader")
	if r := run(append(withCA, "--token", consumer, "consume", "orders", "--wait", "0s")...); r.code != 1 {
		t.Fatalf("a token not yet loaded: exit %d", r.code)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, "the new token to be loaded", func() bool {
		return run(append(withCA, "--token", consumer, "consume", "orders", "--wait", "0s")...).code == 0
	})
	// The dashboard is served on the same port, its data behind the tokens.
	tc, err := tlsconfig.Client(nil, certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	for path, want := range map[string]int{"/dashboard/": http.StatusOK, "/dashboard/data/state": http.StatusUnauthorized} {
		resp, err := hc.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || resp.ProtoMajor != 2 {
			t.Errorf("GET %s: %d over %s, want %d over HTTP/2 (which gRPC needs)", path, resp.StatusCode, resp.Proto, want)
		}
	}
	for _, secret := range []string{admin, publisher, consumer} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the server log shows a token:\n%s", logs.String())
		}
	}
	if !strings.Contains(logs.String(), `audit.who="ops (token `) || !strings.Contains(logs.String(), "audit.action=CreateTopic audit.topic=orders") {
		t.Errorf("no audit line for the topic created:\n%s", logs.String())
	}
}

// TestClusterNodeRefusesUnauthenticatedPeersOffLoopback: with tokens, a
// node may listen anywhere, but a cluster node's node-to-node traffic is
// not covered by them, so it refuses a non-loopback address unless told
// the network is trusted.
func TestClusterNodeRefusesUnauthenticatedPeersOffLoopback(t *testing.T) {
	cfg := defaultServeConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "0.0.0.0:0" // refused before anything is served
	cfg.NodeID, cfg.Peers = 1, "1=127.0.0.1:7601,2=127.0.0.1:7602,3=127.0.0.1:7603"
	cfg.TokensFile = t.TempDir() + "/tokens"
	cli(t, "", "", "token", "create", "--scope", "admin", "--name", "ops", "--tokens-file", cfg.TokensFile)
	var logs strings.Builder
	err := serve(context.Background(), cfg, &logs)
	for _, want := range []string{"not authenticated", "--peer-ca-file", "--insecure-no-auth", "loopback"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("cluster node on 0.0.0.0 with tokens: %v, want an error saying %q", err, want)
		}
	}
	if entries, _ := os.ReadDir(cfg.DataDir); len(entries) != 0 {
		t.Errorf("the refused node wrote %d entries into its data directory", len(entries))
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
