package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"herald/internal/testkit"
)

// serveTLS accepts connections on a loopback port with c and completes
// their handshakes, until the test ends.
func serveTLS(t *testing.T, c *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", c)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.(*tls.Conn).Handshake() // the client reports how it went
			conn.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// handshake connects to addr with c and returns the handshake's error.
func handshake(t *testing.T, addr string, c *tls.Config) error {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, c)
	if err != nil {
		return err
	}
	defer conn.Close()
	// With TLS 1.3 a refused client certificate shows on the first read.
	conn.Read(make([]byte, 1))
	_, err = conn.Read(make([]byte, 1))
	if err == io.EOF {
		err = nil
	}
	return err
}

func client(t *testing.T, r *Reloader, caFile string) *tls.Config {
	t.Helper()
	c, err := Client(r, caFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientWithTheCAConnectsWithoutItFails(t *testing.T) {
	certs := testkit.TestCertificates(t)
	r, err := NewReloader(certs.CertFile, certs.KeyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Server(r, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, sc)
	if err := handshake(t, addr, client(t, nil, certs.CAFile)); err != nil {
		t.Errorf("client with the CA: %v", err)
	}
	err = handshake(t, addr, client(t, nil, testkit.TestCertificates(t).CAFile))
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("client with another CA: %v, want x509.UnknownAuthorityError", err)
	}
}

// TestReloadOnFileChangeAndOnRequest: new files are served from the next
// handshake after they change; files that cannot be loaded leave the
// previous certificate in service.
func TestReloadOnFileChangeAndOnRequest(t *testing.T) {
	dir := t.TempDir()
	old, err := testkit.WriteCertificates(dir)
	if err != nil {
		t.Fatal(err)
	}
	oldCA, _ := os.ReadFile(old.CAFile)
	oldCAFile := dir + "/old-ca.pem"
	os.WriteFile(oldCAFile, oldCA, 0o600)
	r, err := NewReloader(old.CertFile, old.KeyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r.checkEvery = 0 // look at the files at every handshake
	sc, _ := Server(r, "")
	addr := serveTLS(t, sc)
	if err := handshake(t, addr, client(t, nil, oldCAFile)); err != nil {
		t.Fatal(err)
	}
	renewed, err := testkit.WriteCertificates(dir) // a new CA and certificate, same paths
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, addr, client(t, nil, renewed.CAFile)); err != nil {
		t.Errorf("after the files changed, a client of the new CA: %v", err)
	}
	if err := handshake(t, addr, client(t, nil, oldCAFile)); err == nil {
		t.Error("after the files changed, the old certificate is still served")
	}

	// A key that does not belong to the certificate: Reload fails and the
	// renewed certificate stays.
	other := testkit.TestCertificates(t)
	key, _ := os.ReadFile(other.KeyFile)
	if err := os.WriteFile(renewed.KeyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "private key does not match public key") {
		t.Errorf("Reload with a mismatched key = %v", err)
	}
	if err := handshake(t, addr, client(t, nil, renewed.CAFile)); err != nil {
		t.Errorf("after a failed reload: %v, want the previous certificate served", err)
	}
}

func TestMutualTLS(t *testing.T) {
	certs := testkit.TestCertificates(t)
	r, err := NewReloader(certs.CertFile, certs.KeyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Server(r, certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, sc)
	if err := handshake(t, addr, client(t, r, certs.CAFile)); err != nil {
		t.Errorf("peer with a certificate of the CA: %v", err)
	}
	if err := handshake(t, addr, client(t, nil, certs.CAFile)); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("peer without a certificate: %v, want the server to require one", err)
	}
}

// TestSharedServer: on a port shared with API clients, a client without a
// certificate gets through (the handler then checks PeerVerified), one with
// a certificate of another CA does not.
func TestSharedServer(t *testing.T) {
	certs := testkit.TestCertificates(t)
	r, err := NewReloader(certs.CertFile, certs.KeyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := SharedServer(r, certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, sc)
	if err := handshake(t, addr, client(t, nil, certs.CAFile)); err != nil {
		t.Errorf("API client without a certificate: %v", err)
	}
	if err := handshake(t, addr, client(t, r, certs.CAFile)); err != nil {
		t.Errorf("peer with a certificate of the CA: %v", err)
	}
	other := testkit.TestCertificates(t)
	stranger, err := NewReloader(other.CertFile, other.KeyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, addr, client(t, stranger, certs.CAFile)); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
	if PeerVerified(nil) || PeerVerified(&tls.ConnectionState{}) || !PeerVerified(&tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{}}}) {
		t.Error("PeerVerified is wrong")
	}
}

func TestNewReloaderErrors(t *testing.T) {
	certs := testkit.TestCertificates(t)
	for _, tc := range []struct{ cert, key, want string }{
		{certs.CertFile, "", "both a certificate file (--tls-cert-file) and its key file (--tls-key-file)"},
		{certs.CertFile, certs.CertFile + ".missing", "no such file"},
		{certs.KeyFile, certs.KeyFile, "give a PEM certificate (chain) and the PEM private key"},
	} {
		if _, err := NewReloader(tc.cert, tc.key, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewReloader(%s, %s) = %v, want %q", tc.cert, tc.key, err, tc.want)
		}
	}
	if _, err := Client(nil, certs.KeyFile); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Errorf("Client with a key as CA file: %v", err)
	}
}
