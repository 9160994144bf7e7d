package load

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"herald/bench/proccpu"
)

// ProcessesCPU is the CPU time the server processes of the system measured
// (named by --server-pids) used in the measured interval: user plus system
// time from /proc/PID/stat, read just before the interval begins and just
// after it ends, summed over the processes. The load generator's own CPU is
// not in it.
type ProcessesCPU struct {
	// PIDs are the server processes, all nodes of a cluster.
	PIDs []int `json:"pids"`
	// Seconds is their CPU time (user + system) in the measured interval.
	Seconds float64 `json:"seconds"`
	// MicrosPerEvent is Seconds in microseconds divided by the events
	// acknowledged in the interval (Result.Events).
	MicrosPerEvent float64 `json:"us_per_event"`
	// Cores is Seconds over the interval's wall-clock length: how many of
	// the machine's cores the servers kept busy on average.
	Cores float64 `json:"cores"`
	// StealSeconds is the CPU time the hypervisor took from the machine's
	// virtual CPUs in the interval, summed over them (/proc/stat's steal;
	// 0 on bare metal). On a shared virtual machine, a run whose host
	// took much measures the host's other tenants as well as the system.
	StealSeconds float64 `json:"machine_steal_seconds"`
}

// addServerPIDsFlag defines --server-pids on fs.
func addServerPIDsFlag(fs *pflag.FlagSet, pids *string) {
	fs.StringVar(pids, "server-pids", *pids, "process ids of the system's server processes (comma-separated; every node of a cluster): report their user+system CPU time (from /proc/PID/stat) per acknowledged event over the measured interval, and the CPU time the hypervisor took from the machine meanwhile (steal, from /proc/stat)")
}

// parsePIDs reads a --server-pids list: process ids, comma-separated;
// empty is none.
func parsePIDs(list string) ([]int, error) {
	var pids []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("--server-pids %q: %q is not a process id", list, f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// cpuSample is the summed CPU time of the server processes at one moment,
// and the machine's steal.
type cpuSample struct {
	at    time.Time
	cpu   time.Duration
	steal time.Duration
	err   error
}

// sampleCPU reads the CPU time of pids, and the machine's steal, now.
func sampleCPU(pids []int) cpuSample {
	var s cpuSample
	for _, pid := range pids {
		d, err := proccpu.Of(pid)
		if err != nil {
			s.err = err
			break
		}
		s.cpu += d
	}
	if s.err == nil {
		s.steal, s.err = proccpu.Steal()
	}
	s.at = time.Now()
	return s
}

// serverCPU returns what the processes used between the samples from and
// to, per event of events acknowledged between them.
func serverCPU(pids []int, from, to cpuSample, events int64) (*ProcessesCPU, error) {
	for _, s := range []cpuSample{from, to} {
		if s.err != nil {
			return nil, fmt.Errorf("--server-pids: %w", s.err)
		}
	}
	sec := (to.cpu - from.cpu).Seconds()
	c := &ProcessesCPU{PIDs: pids, Seconds: sec, StealSeconds: (to.steal - from.steal).Seconds()}
	if events > 0 {
		c.MicrosPerEvent = sec * 1e6 / float64(events)
	}
	if wall := to.at.Sub(from.at).Seconds(); wall > 0 {
		c.Cores = sec / wall
	}
	return c, nil
}

// medianServerCPU is the median of the runs' server CPU figures, nil
// unless every run has them.
func medianServerCPU(runs []Result) *ProcessesCPU {
	for i := range runs {
		if runs[i].ServerCPU == nil {
			return nil
		}
	}
	vs := func(f func(*ProcessesCPU) float64) float64 {
		v := make([]float64, len(runs))
		for i := range runs {
			v[i] = f(runs[i].ServerCPU)
		}
		return median(v)
	}
	return &ProcessesCPU{
		PIDs:           runs[0].ServerCPU.PIDs,
		Seconds:        vs(func(c *ProcessesCPU) float64 { return c.Seconds }),
		MicrosPerEvent: vs(func(c *ProcessesCPU) float64 { return c.MicrosPerEvent }),
		Cores:          vs(func(c *ProcessesCPU) float64 { return c.Cores }),
		StealSeconds:   vs(func(c *ProcessesCPU) float64 { return c.StealSeconds }),
	}
}

// FormatCPU formats r's server CPU per event in µs, "–" without one.
func FormatCPU(r *Result) string {
	if r.ServerCPU == nil {
		return "–"
	}
	v := r.ServerCPU.MicrosPerEvent
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
