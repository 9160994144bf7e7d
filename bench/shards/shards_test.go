package shards

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseVmRSS(t *testing.T) {
	status := "Name:\therald\nVmPeak:\t  900000 kB\nVmRSS:\t  204800 kB\nThreads:\t12\n"
	got, err := parseVmRSS(status)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(200 << 20); got != want {
		t.Errorf("parseVmRSS = %d, want %d", got, want)
	}
	for _, bad := range []string{"Name:\therald\n", "VmRSS:\t12 MB\n", "VmRSS:\tlots kB\n"} {
		if _, err := parseVmRSS(bad); err == nil {
			t.Errorf("parseVmRSS(%q) succeeded, want an error", bad)
		}
	}
}

func TestMedianRun(t *testing.T) {
	runs := []Run{
		{Boot: 3 * time.Second, IdleCPU: 0.3, RSS: 300},
		{Boot: time.Second, IdleCPU: 0.1, RSS: 100},
		{Boot: 2 * time.Second, IdleCPU: 0.2, RSS: 200},
	}
	if m := medianRun(runs); m.Boot != 2*time.Second || m.IdleCPU != 0.2 || m.RSS != 200 {
		t.Errorf("median of three = %+v, want the middle run", m)
	}
	if m := medianRun(runs[:2]); m.Boot != 2*time.Second || m.RSS != 200 {
		t.Errorf("median of two = %+v, want their mean", m)
	}
}

func TestOpenFiles(t *testing.T) {
	// A first file starts whatever the runtime opens with the first one.
	first, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	n, err := openFiles(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if m, err := openFiles(os.Getpid()); err != nil || m != n+1 {
		t.Fatalf("openFiles after opening one more file = %d, %v; want %d", m, err, n+1)
	}
	if _, err := openFiles(-1); err == nil || !strings.Contains(err.Error(), "/proc") {
		t.Fatalf("openFiles of no process: %v, want an error naming /proc", err)
	}
}

func TestBrokenShardsError(t *testing.T) {
	err := brokenShardsError(map[string]string{"b.1": "too many open files", "a.3": "log corrupted"})
	if want := "2 shards could not be opened, a.3 first: log corrupted"; err.Error() != want {
		t.Fatalf("brokenShardsError = %q, want %q", err, want)
	}
}
