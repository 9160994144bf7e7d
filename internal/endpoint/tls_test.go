package endpoint

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned returns a CA certificate in PEM.
func selfSigned(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "herald test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestTLSConfig(t *testing.T) {
	c, err := TLSConfig("", false)
	if err != nil {
		t.Fatal(err)
	}
	if c.MinVersion != tls.VersionTLS12 || c.RootCAs != nil || c.InsecureSkipVerify {
		t.Errorf("TLSConfig without attributes = %+v, want TLS 1.2 or later with the system roots", c)
	}
	if c, err := TLSConfig("", true); err != nil || !c.InsecureSkipVerify {
		t.Errorf("TLSConfig with tls_insecure_skip_verify = %+v, %v; want verification off", c, err)
	}

	ca := selfSigned(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = TLSConfig(caFile, false)
	if err != nil {
		t.Fatal(err)
	}
	trusts := func(certPEM []byte) bool {
		block, _ := pem.Decode(certPEM)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cert.Verify(x509.VerifyOptions{Roots: c.RootCAs})
		return err == nil
	}
	if !trusts(ca) || trusts(selfSigned(t)) {
		t.Errorf("TLSConfig(%s) does not trust exactly the file's CA", caFile)
	}
}

func TestTLSConfigRefusesBadCAFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		file string
		want []string
	}{
		{"missing", filepath.Join(dir, "missing.pem"), []string{"cannot be read", "no such file", "install the CA file"}},
		{"directory", dir, []string{"cannot be read", "is a directory", "install the CA file"}},
		{"empty", write("empty.pem", ""), []string{"holds no PEM certificate", "give a PEM file"}},
		{"garbage", write("garbage.pem", "not a certificate\n"), []string{"holds no PEM certificate"}},
		{"key only", write("key.pem", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), []string{"holds no PEM certificate"}},
		{"corrupt", write("corrupt.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), []string{"certificate 1", "intact copy"}},
	} {
		_, err := TLSConfig(tc.file, false)
		if err == nil {
			t.Errorf("%s: TLSConfig(%s) succeeded", tc.name, tc.file)
			continue
		}
		// The file is named once: the error of os.ReadFile would repeat it.
		if strings.Count(err.Error(), tc.file) != 1 || !strings.HasPrefix(err.Error(), "tls_ca_file "+tc.file) {
			t.Errorf("%s: error %q does not name the file once, at its start", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
	if _, err := TLSConfig(filepath.Join(dir, "missing.pem"), false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error for a missing file %v is not fs.ErrNotExist", err)
	}
}
