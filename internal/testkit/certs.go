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
// certificate it signed for 127.0.0.1, ::1 and localhost, good for a
// server and for a client (as a cluster node's is).
type Certificates struct {
	CAFile   string // ca.pem
	CertFile string // server.pem, or <name>.pem from CA.Issue
	KeyFile  string // server.key, or <name>.key from CA.Issue
}

// certLifetime is how long the certificates are valid on either side of
// their making: wide, so that a slow test or a skewed clock does not
// matter, and relative to the clock, so that no date ever expires them.
const certLifetime = 24 * time.Hour

// CA is a test certificate authority: its certificate is in File (PEM),
// and Issue signs certificates with it.
type CA struct {
	File string
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	next int64 // serial number of the next certificate issued
}

// NewCA writes a fresh CA certificate into dir as ca.pem.
func NewCA(dir string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "herald test CA"},
		NotBefore:             now.Add(-certLifetime),
		NotAfter:              now.Add(certLifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{File: filepath.Join(dir, "ca.pem"), dir: dir, cert: cert, key: key, next: 2}
	if err := writePEM(ca.File, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return ca, nil
}

// Issue writes a new key and a certificate the CA signed for 127.0.0.1,
// ::1 and localhost, for server and client authentication, into the CA's
// directory as name.pem and name.key.
func (ca *CA) Issue(name string) (Certificates, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Certificates{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.next),
		Subject:      pkix.Name{CommonName: name},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
		NotBefore:    now.Add(-certLifetime),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	ca.next++
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Certificates{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Certificates{}, err
	}
	c := Certificates{
		CAFile:   ca.File,
		CertFile: filepath.Join(ca.dir, name+".pem"),
		KeyFile:  filepath.Join(ca.dir, name+".key"),
	}
	if err := writePEM(c.CertFile, "CERTIFICATE", der); err != nil {
		return Certificates{}, err
	}
	if err := writePEM(c.KeyFile, "EC PRIVATE KEY", keyDER); err != nil {
		return Certificates{}, err
	}
	return c, nil
}

func writePEM(name, typ string, der []byte) error {
	if err := os.WriteFile(name, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write test certificate: %w", err)
	}
	return nil
}

// WriteCertificates writes a fresh CA and a certificate it signed into
// dir (ca.pem, server.pem, server.key).
func WriteCertificates(dir string) (Certificates, error) {
	ca, err := NewCA(dir)
	if err != nil {
		return Certificates{}, err
	}
	return ca.Issue("server")
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

// TestCA writes a fresh CA into a temporary directory of t and issues a
// certificate from it for each of names (a cluster's nodes, say).
func TestCA(t testing.TB, names ...string) (*CA, []Certificates) {
	t.Helper()
	ca, err := NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	certs := make([]Certificates, len(names))
	for i, name := range names {
		if certs[i], err = ca.Issue(name); err != nil {
			t.Fatal(err)
		}
	}
	return ca, certs
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
