package endpoint

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"herald/internal/testkit"
)

// everywhere is a guard whose CA directory is the root: every test file
// is in it.
func everywhere(t *testing.T) *Guard {
	t.Helper()
	g, err := NewGuard(GuardConfig{CADir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestTLSConfig(t *testing.T) {
	g := everywhere(t)
	c, err := g.TLSConfig("", false)
	if err != nil {
		t.Fatal(err)
	}
	if c.MinVersion != tls.VersionTLS12 || c.RootCAs != nil || c.InsecureSkipVerify {
		t.Errorf("TLSConfig without attributes = %+v, want TLS 1.2 or later with the system roots", c)
	}
	if c, err := g.TLSConfig("", true); err != nil || !c.InsecureSkipVerify {
		t.Errorf("TLSConfig with tls_insecure_skip_verify = %+v, %v; want verification off", c, err)
	}

	caFile := testkit.TestCertificates(t).CAFile
	c, err = g.TLSConfig(caFile, false)
	if err != nil {
		t.Fatal(err)
	}
	trusts := func(caFile string) bool {
		certPEM, err := os.ReadFile(caFile)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(certPEM)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cert.Verify(x509.VerifyOptions{Roots: c.RootCAs})
		return err == nil
	}
	if !trusts(caFile) || trusts(testkit.TestCertificates(t).CAFile) {
		t.Errorf("TLSConfig(%s) does not trust exactly the file's CA", caFile)
	}
}

func TestTLSConfigRefusesBadCAFiles(t *testing.T) {
	bad := testkit.WriteBadCAFiles(t)
	g := everywhere(t)
	for _, tc := range []struct {
		name string
		file string
		want []string
	}{
		{"missing", bad.Missing, []string{"cannot be read", "no such file", "install the CA file"}},
		{"directory", bad.Dir, []string{"cannot be read", "is a directory", "install the CA file"}},
		{"empty", bad.Empty, []string{"holds no PEM certificate", "give a PEM file"}},
		{"garbage", bad.Garbage, []string{"holds no PEM certificate"}},
		{"key only", bad.KeyOnly, []string{"holds no PEM certificate"}},
		{"corrupt", bad.Corrupt, []string{"certificate 1", "intact copy"}},
	} {
		_, err := g.TLSConfig(tc.file, false)
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
	if _, err := g.TLSConfig(bad.Missing, false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error for a missing file %v is not fs.ErrNotExist", err)
	}
}
