package shards

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseCPUTime(t *testing.T) {
	// A command name with spaces and parentheses must not shift the fields.
	stat := "4242 (herald (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 130 0 0 20 0 12 0 100 2000000 5000 18446744073709551615"
	got, err := parseCPUTime(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3800 * time.Millisecond; got != want { // (250+130) ticks of 10ms
		t.Errorf("parseCPUTime = %s, want %s", got, want)
	}
	for _, bad := range []string{"4242 herald S 1", "4242 (herald) S 1 2 3", "4242 (herald) S 1 4242 4242 0 -1 4194560 1000 0 0 0 x 130 0"} {
		if _, err := parseCPUTime(bad); err == nil {
			t.Errorf("parseCPUTime(%q) succeeded, want an error", bad)
		}
	}
}

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
