// Package tlsconfig builds the TLS settings herald serves with: a
// certificate and key from files, reloaded when the files change or when
// asked (herald serve asks on SIGHUP), so that a renewed certificate is
// picked up without a restart; and, for mutual TLS between cluster nodes,
// the CA that peers' certificates must chain to.
//
// The node-to-node transport uses it as
//
//	r, err := tlsconfig.NewReloader(certFile, keyFile, logger)
//	serverTLS, err := tlsconfig.Server(r, peerCAFile) // peers must present a certificate
//	clientTLS, err := tlsconfig.Client(r, peerCAFile) // and verify ours
//
// or, on a port it shares with the API (whose clients have no
// certificate), SharedServer, with PeerVerified in the peers' handler.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// checkEvery is how often, at most, a handshake looks at the files for a
// change: a stat of two files, cheap, but not for every connection.
const checkEvery = time.Second

// Reloader holds a certificate loaded from a pair of PEM files and loads
// it again when they change. It is safe for concurrent use.
type Reloader struct {
	certFile, keyFile string
	log               *slog.Logger
	checkEvery        time.Duration

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp // of certFile and keyFile when cert was loaded
	checked time.Time
}

// fileStamp tells whether a file has changed.
type fileStamp struct {
	mod  time.Time
	size int64
}

// NewReloader loads the certificate now, so that a missing or wrong file
// stops the server at start.
func NewReloader(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS needs both a certificate file (--tls-cert-file) and its key file (--tls-key-file)")
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, log: log, checkEvery: checkEvery}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload loads the files again. On error the certificate in use stays.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.load()
}

func (r *Reloader) load() error {
	stamp, err := r.stamps()
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s with key %s: %w; give a PEM certificate (chain) and the PEM private key that belongs to it", r.certFile, r.keyFile, err)
	}
	r.cert, r.stamp = &cert, stamp
	return nil
}

func (r *Reloader) stamps() ([2]fileStamp, error) {
	var s [2]fileStamp
	for i, name := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return s, fmt.Errorf("TLS certificate or key file: %w", err)
		}
		s[i] = fileStamp{fi.ModTime(), fi.Size()}
	}
	return s, nil
}

// current returns the certificate, loaded again first if the files
// changed since it was (looked at no more than once per checkEvery).
func (r *Reloader) current() *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= r.checkEvery {
		r.checked = now
		if s, err := r.stamps(); err == nil && s != r.stamp {
			if err := r.load(); err != nil {
				// Half-way through a renewal (a new certificate, the old
				// key), say: the next check tries again.
				r.log.Warn("the TLS certificate files changed but cannot be loaded; still serving the previous certificate", "err", err)
			} else {
				r.log.Info("TLS certificate reloaded", "cert_file", r.certFile)
			}
		}
	}
	return r.cert
}

// GetCertificate is for tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.current(), nil
}

// GetClientCertificate is for tls.Config.GetClientCertificate, for a
// client that proves itself with the same certificate (mutual TLS).
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.current(), nil
}

// Server returns the TLS settings of a server that presents r's
// certificate. With clientCAFile, clients must present a certificate that
// chains to a CA in it (mutual TLS).
func Server(r *Reloader, clientCAFile string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
	if clientCAFile != "" {
		pool, err := loadPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// SharedServer returns the TLS settings of a port that API clients and
// cluster peers share, as herald's does: a client certificate is not
// required (API clients have none), but one that is presented must chain
// to a CA in peerCAFile. The peers' handler must then refuse requests
// whose connection has no verified certificate: see PeerVerified.
func SharedServer(r *Reloader, peerCAFile string) (*tls.Config, error) {
	c, err := Server(r, peerCAFile)
	if err != nil {
		return nil, err
	}
	c.ClientAuth = tls.VerifyClientCertIfGiven
	return c, nil
}

// PeerVerified reports whether a request's connection (http.Request.TLS)
// presented a client certificate that SharedServer or Server verified.
func PeerVerified(state *tls.ConnectionState) bool {
	return state != nil && len(state.VerifiedChains) > 0
}

// Client returns the TLS settings of a client that verifies servers
// against the CAs in caFile (the system's when empty) and, when r is not
// nil, presents r's certificate (mutual TLS).
func Client(r *Reloader, caFile string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if r != nil {
		c.GetClientCertificate = r.GetClientCertificate
	}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	return c, nil
}

func loadPool(caFile string) (*x509.CertPool, error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool, err := ParseCAs(data)
	if err != nil {
		return nil, fmt.Errorf("CA file %s %w", caFile, err)
	}
	return pool, nil
}

// ParseCAs reads the CA certificates of a PEM file. Unlike
// x509.CertPool.AppendCertsFromPEM, which says only whether it found any
// and skips certificates it cannot parse, it says what is wrong, so that a
// wrong file (a key, a DER file, a truncated copy) is quick to spot. Its
// errors start with what follows the file's name in a message.
func ParseCAs(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		n++
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("has a broken certificate %d: %w; replace the file with an intact copy", n, err)
		}
		pool.AddCert(cert)
	}
	if n == 0 {
		return nil, errors.New("holds no PEM certificate (no -----BEGIN CERTIFICATE----- block); give a PEM file of the CA certificates that sign the server's certificate")
	}
	return pool, nil
}
