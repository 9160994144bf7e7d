package testkit

import (
	"syscall"
	"testing"
	"time"
)

// ProcessCPU is the CPU time, user and system, the test process has used:
// benchmarks report the difference over their loop per operation, which
// tells a run bound by the CPU from one bound by waiting.
func ProcessCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
