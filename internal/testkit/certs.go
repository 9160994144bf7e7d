package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certificates are the PEM files WriteCertificates writes: a CA and a
// server certificate it signed for 127.0.0.1 and ::1.
type Certificates struct {
	CAFile   string // ca.pem
	CertFile string // server.pem
	KeyFile  string // server.key
}

// certLifetime is how long the certificates are valid on either side of
// their making: wide, so that a slow test or a skewed clock does not
// matter, and relative to the clock, so that no date ever expires them.
const certLifetime = 24 * time.Hour

// WriteCertificates writes a fresh CA and a server certificate into dir.
func WriteCertificates(dir string) (Certificates, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Certificates{}, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "herald test CA"},
		NotBefore:             now.Add(-certLifetime),
		NotAfter:              now.Add(certLifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return Certificates{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Certificates{}, err
	}
	cert := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
		NotBefore:    now.Add(-certLifetime),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, cert, ca, &key.PublicKey, caKey)
	if err != nil {
		return Certificates{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Certificates{}, err
	}
	c := Certificates{
		CAFile:   filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "server.pem"),
		KeyFile:  filepath.Join(dir, "server.key"),
	}
	for name, block := range map[string]*pem.Block{
		c.CAFile:   {Type: "CERTIFICATE", Bytes: caDER},
		c.CertFile: {Type: "CERTIFICATE", Bytes: der},
		c.KeyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(name, pem.EncodeToMemory(block), 0o600); err != nil {
			return Certificates{}, fmt.Errorf("write test certificate: %w", err)
		}
	}
	return c, nil
}

// TestCertificates writes fresh certificates into a temporary directory
// of t.
func TestCertificates(t testing.TB) Certificates {
	t.Helper()
	c, err := WriteCertificates(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// BadCAFiles are files that are not a usable CA certificate file, each
// broken in its own way, for the tests of settings that name one.
type BadCAFiles struct {
	Missing string // does not exist
	Dir     string // a directory
	Empty   string // an empty file
	Garbage string // text that is no PEM
	KeyOnly string // a PEM private key, no certificate
	Corrupt string // a PEM certificate block whose content does not parse
}

// WriteBadCAFiles writes the BadCAFiles into a temporary directory of t.
func WriteBadCAFiles(t testing.TB) BadCAFiles {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return BadCAFiles{
		Missing: filepath.Join(dir, "missing.pem"),
		Dir:     dir,
		Empty:   write("empty.pem", ""),
		Garbage: write("garbage.pem", "this is not a certificate\n"),
		KeyOnly: write("key.pem", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
		Corrupt: write("corrupt.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
	}
}
