package load

import (
	"context"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"
)

func TestParsePIDs(t *testing.T) {
	got, err := parsePIDs(" 12, 34 ,,56")
	if err != nil || len(got) != 3 || got[0] != 12 || got[2] != 56 {
		t.Errorf("parsePIDs = %v, %v", got, err)
	}
	for _, bad := range []string{"12,x", "-3", "0"} {
		if _, err := parsePIDs(bad); err == nil {
			t.Errorf("parsePIDs(%q) accepted", bad)
		}
	}
	if err := (&Config{Producers: 1, Batch: 1, Keys: 1, Count: 1, ServerPIDs: "1,a"}).Validate(); err == nil {
		t.Error("Validate accepted --server-pids 1,a")
	}
}

// TestRunServerCPU has a busy child process stand for the server: its CPU
// time over the measured second is reported, per event, and the warm-up's
// is not.
func TestRunServerCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("burns a core for two seconds")
	}
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Skip("no sh:", err)
	}
	defer func() { busy.Process.Kill(); busy.Wait() }()
	f := newFake(time.Millisecond)
	cfg := Config{Producers: 2, Batch: 1, EventBytes: 1, Keys: 1, Duration: time.Second, Warmup: time.Second,
		ServerPIDs: strconv.Itoa(busy.Process.Pid)}
	res, err := Run(context.Background(), cfg, f.newProducer)
	if err != nil {
		t.Fatal(err)
	}
	c := res.ServerCPU
	if c == nil {
		t.Fatal("no server CPU in the result")
	}
	// At most the measured second's (a tick of slack), and on a loaded
	// machine at least some of it.
	if c.Seconds > 1.1 || c.Seconds < 0.2 || c.Cores > 1.1 {
		t.Errorf("server CPU %.2f s (%.2f cores) over a measured second of one busy process", c.Seconds, c.Cores)
	}
	if want := c.Seconds * 1e6 / float64(res.Events); c.MicrosPerEvent != want {
		t.Errorf("µs/event %.2f, want %.2f", c.MicrosPerEvent, want)
	}
	if c.StealSeconds < 0 || c.StealSeconds > 1.1*float64(runtime.NumCPU()) {
		t.Errorf("the host took %.2f s of the machine's CPU in a measured second", c.StealSeconds)
	}
	m := Median([]Result{*res, *res})
	if m.ServerCPU == nil || m.ServerCPU.MicrosPerEvent != c.MicrosPerEvent || m.ServerCPU.StealSeconds != c.StealSeconds {
		t.Errorf("median server CPU %+v", m.ServerCPU)
	}
}

// The steal reported is what the host took between the two samples, not
// since boot.
func TestServerCPUSteal(t *testing.T) {
	start := time.Now()
	from := cpuSample{at: start, cpu: 10 * time.Second, steal: 40 * time.Second}
	to := cpuSample{at: start.Add(2 * time.Second), cpu: 11 * time.Second, steal: 40*time.Second + 250*time.Millisecond}
	c, err := serverCPU([]int{1}, from, to, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if c.StealSeconds != 0.25 || c.Seconds != 1 || c.Cores != 0.5 || c.MicrosPerEvent != 1000 {
		t.Errorf("serverCPU = %+v, want 0.25 s stolen, 1 s of CPU, 0.5 cores, 1000 µs/event", c)
	}
}
