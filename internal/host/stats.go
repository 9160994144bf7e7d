package host

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Stats are host-wide counters, safe to read at any time. Observers, if
// set, also receive each duration (the API layer feeds its histograms).
type Stats struct {
	Fsyncs        atomic.Uint64
	FsyncNanos    atomic.Uint64
	Snapshots     atomic.Uint64
	SnapshotNanos atomic.Uint64
	Applied       atomic.Uint64

	OnFsync    atomic.Pointer[func(time.Duration)]
	OnSnapshot atomic.Pointer[func(time.Duration)]
}

func (s *Stats) observeFsync(d time.Duration) {
	s.Fsyncs.Add(1)
	s.FsyncNanos.Add(uint64(d))
	if f := s.OnFsync.Load(); f != nil {
		(*f)(d)
	}
}

func (s *Stats) observeSnapshot(d time.Duration) {
	s.Snapshots.Add(1)
	s.SnapshotNanos.Add(uint64(d))
	if f := s.OnSnapshot.Load(); f != nil {
		(*f)(d)
	}
}

// raftLogger routes etcd raft's logging to slog. Raft's Info level is
// chatty (every election), so it maps to Debug.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)                   { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Debugf(format string, v ...any)   { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r raftLogger) Info(v ...any)                    { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Infof(format string, v ...any)    { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r raftLogger) Warning(v ...any)                 { r.l.Warn(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(format string, v ...any) { r.l.Warn(fmt.Sprintf(format, v...)) }
func (r raftLogger) Error(v ...any)                   { r.l.Error(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(format string, v ...any)   { r.l.Error(fmt.Sprintf(format, v...)) }
func (r raftLogger) Fatal(v ...any)                   { r.Panic(v...) }
func (r raftLogger) Fatalf(format string, v ...any)   { r.Panicf(format, v...) }
func (r raftLogger) Panic(v ...any) {
	s := fmt.Sprint(v...)
	r.l.Error(s)
	panic(s)
}
func (r raftLogger) Panicf(format string, v ...any) {
	s := fmt.Sprintf(format, v...)
	r.l.Error(s)
	panic(s)
}
