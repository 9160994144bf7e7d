package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is a server subprocess: its own process group, so that a
// script and the programs it starts stop together, and stopped with the
// test binary should that die without cleaning up.
type process struct {
	name    string // for messages
	cmd     *exec.Cmd
	logFile string
	exited  chan struct{}
}

// startProcess starts cmd with its output appended to logFile.
func startProcess(name string, cmd *exec.Cmd, logFile string) (*process, error) {
	out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logFile: logFile, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// waitReady polls ready until it succeeds, the process exits or timeout
// passes; the error then says why and ends with the process's log.
func (p *process) waitReady(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited at startup (%v); its log ends with:\n%s", p.name, p.cmd.ProcessState, p.logTail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop(time.Second)
			return fmt.Errorf("%s is not ready after %v (%v); its log ends with:\n%s", p.name, timeout, err, p.logTail())
		}
	}
}

// stop sends the process group SIGTERM, waits up to grace for the
// process to exit, then kills whatever is left of the group. Stopping a
// stopped process does nothing.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		fmt.Fprintf(os.Stderr, "testkit: kill %s's process group %d: %v\n", p.name, pgid, err)
	}
	<-p.exited
}

// logTail returns the last lines of the process's log.
func (p *process) logTail() string { return fileTail(p.logFile, 20) }

func fileTail(name string, lines int) string {
	data, err := os.ReadFile(name)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(all[max(len(all)-lines, 0):], "\n")
}
