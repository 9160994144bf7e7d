package endpoint

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"

	"herald/internal/tlsconfig"
)

// TLSConfig returns the TLS settings of a push endpoint whose scheme uses
// TLS, from its tls_ca_file and tls_insecure_skip_verify attributes: TLS
// 1.2 or later, with the server's certificate verified against the CA
// certificates in caFile, or the system's roots when caFile is empty, or
// not at all when insecureSkipVerify is set.
//
// It reads caFile now, so that a missing or wrong file is reported when the
// endpoint is made rather than by every delivery, and only from within the
// guard's CA directory.
func (g *Guard) TLSConfig(caFile string, insecureSkipVerify bool) (*tls.Config, error) {
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: insecureSkipVerify, // the attribute's documented purpose
	}
	if caFile == "" {
		return c, nil
	}
	pool, err := g.loadCAs(caFile)
	if err != nil {
		return nil, err
	}
	c.RootCAs = pool
	return c, nil
}

// loadCAs reads a PEM file of CA certificates, from within the guard's CA
// directory.
func (g *Guard) loadCAs(path string) (*x509.CertPool, error) {
	data, err := g.readCAFile(path)
	if errors.Is(err, ErrRefused) {
		return nil, err
	}
	if err != nil {
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			err = pathErr.Err // it would name the file a second time
		}
		return nil, fmt.Errorf("tls_ca_file %s cannot be read: %w; install the CA file at that path on every herald node", path, err)
	}
	pool, err := tlsconfig.ParseCAs(data)
	if err != nil {
		return nil, fmt.Errorf("tls_ca_file %s %w", path, err)
	}
	return pool, nil
}
