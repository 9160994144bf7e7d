package testkit

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// motoStartTimeout bounds moto_server's start: a Python program that
// imports all of moto, usually one to five seconds.
const motoStartTimeout = 60 * time.Second

// StartMoto starts moto's S3-compatible server (moto_server, from PyPI)
// on a free loopback port, and stops it when the test ends; it returns the
// endpoint, http://127.0.0.1:<port>. Moto accepts any credentials and
// keeps everything in memory. Under -short it skips the test instead.
func StartMoto(t testing.TB) (endpoint string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts moto_server (a Python process); the fast tier (-short) starts no external program")
	}
	bin := motoServerBinary(t)
	port := FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logFile := filepath.Join(t.TempDir(), "moto_server.log")
	p, err := startProcess("moto_server", exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port)), logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(5 * time.Second) })
	endpoint = "http://" + addr
	client := &http.Client{Timeout: time.Second}
	err = p.waitReady(motoStartTimeout, func() error {
		// S3's ListBuckets: moto answers it once its routes are loaded.
		resp, err := client.Get(endpoint + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET / answered %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return endpoint
}

// CreateBucket creates bucket on the moto server at endpoint, with a
// plain path-style PUT: moto does not check signatures.
func CreateBucket(t testing.TB, endpoint, bucket string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, endpoint+"/"+bucket, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("create bucket %s at %s: %v", bucket, endpoint, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create bucket %s at %s: %s", bucket, endpoint, resp.Status)
	}
}

// MotoVenv is the virtual environment scripts/install-test-deps.sh
// installs moto into: $HERALD_MOTO_VENV, by default
// ${XDG_CACHE_HOME:-$HOME/.cache}/herald-test/moto-venv.
func MotoVenv() string {
	if dir := os.Getenv("HERALD_MOTO_VENV"); dir != "" {
		return dir
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "herald-test", "moto-venv")
}

// motoServerBinary finds moto_server where install-test-deps.sh puts it,
// or else on $PATH.
func motoServerBinary(t testing.TB) string {
	t.Helper()
	venv := MotoVenv()
	if venv != "" {
		p := filepath.Join(venv, "bin", "moto_server")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("moto_server"); err == nil {
		return p
	}
	t.Fatalf("moto_server not found in %s/bin or on $PATH: run scripts/install-test-deps.sh (it installs moto[server] from PyPI; make test runs the script), or point $HERALD_MOTO_VENV at a virtual environment with moto[server]", venv)
	return ""
}
