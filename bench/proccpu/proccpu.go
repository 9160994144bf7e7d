// Package proccpu reads how much CPU time a process has used, from Linux's
// /proc/PID/stat, for the benchmarks that report a server's CPU per event
// or while idle, and how much the hypervisor took from the machine, from
// /proc/stat, which tells a run on a shared virtual machine that its host
// disturbed.
package proccpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: Linux reports
// them in USER_HZ (what getconf CLK_TCK prints), 100 on every
// architecture Go supports, whatever the kernel's own tick rate.
const userHZ = 100

// Of returns the user plus system CPU time process pid has used.
func Of(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read process %d's CPU time (Linux's /proc): %w", pid, err)
	}
	d, err := Parse(string(b))
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	return d, nil
}

// Parse reads utime + stime, fields 14 and 15 of a /proc/PID/stat line.
// The command name, field 2, is in parentheses and may hold spaces and
// parentheses, so fields are counted from the last ')'.
func Parse(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/PID/stat %q: no command name in parentheses", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/PID/stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] { // fields 14 and 15, counting the pid and the name as 1 and 2
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/PID/stat: CPU time %q: %w", s, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// Steal returns the CPU time the hypervisor has taken from this machine's
// virtual CPUs since boot, summed over them: time a virtual CPU had work
// but the host ran something else. It is 0 on bare metal.
func Steal() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read the machine's CPU times (Linux's /proc/stat): %w", err)
	}
	return ParseSteal(string(b))
}

// ParseSteal reads the steal time, the eighth figure of the "cpu" line
// (all CPUs summed), from the contents of /proc/stat.
func ParseSteal(stat string) (time.Duration, error) {
	for line := range strings.Lines(stat) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 9 {
			return 0, fmt.Errorf("/proc/stat: the cpu line has %d figures, want at least 8 (the eighth is steal)", len(f)-1)
		}
		ticks, err := strconv.ParseUint(f[8], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: steal time %q: %w", f[8], err)
		}
		return time.Duration(ticks) * time.Second / userHZ, nil
	}
	return 0, fmt.Errorf("/proc/stat: no cpu line")
}
