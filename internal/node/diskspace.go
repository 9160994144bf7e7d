package node

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultDiskFreeLimit is the free space under which a node stops taking
// new events by default: room for what is in flight, for the acks,
// snapshots and log compactions that free space, and for the node to
// start again.
const DefaultDiskFreeLimit = 128 << 20

// diskCheckInterval is how often the free space is read. At 200 MB/s of
// publishing, a check misses at most 20 MB, well within the limit.
const diskCheckInterval = 100 * time.Millisecond

// diskAlarm refuses new events while the file system of the data directory
// has less free space than the limit, as RabbitMQ's disk alarm blocks
// publishers: everything that frees space — fetch, ack, delivery,
// dead-letter purges, topic deletion — goes on, and publishing resumes by
// itself once space returns.
type diskAlarm struct {
	dir   string
	limit uint64 // bytes; 0 turns the alarm off
	free  func(dir string) (uint64, error)

	low atomic.Pointer[error] // the error to refuse with while under the limit; nil otherwise
}

func newDiskAlarm(cfg Config) *diskAlarm {
	a := &diskAlarm{dir: cfg.DataDir, limit: uint64(max(cfg.DiskFreeLimit, 0)), free: cfg.DiskFree}
	if a.free == nil {
		a.free = statfsFree
	}
	return a
}

// statfsFree returns the bytes of the file system holding dir that an
// unprivileged process may still use.
func statfsFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// check reads the free space and raises or clears the alarm; it returns
// whether the alarm changed, and the free space.
func (a *diskAlarm) check() (changed bool, free uint64, err error) {
	free, err = a.free(a.dir)
	if err != nil {
		return false, 0, fmt.Errorf("read the free space of data directory %s: %w", a.dir, err)
	}
	wasLow := a.low.Load() != nil
	if free >= a.limit {
		a.low.Store(nil)
		return wasLow, free, nil
	}
	var refusal error = &kindError{kind: ErrOverloaded, err: fmt.Errorf("the disk of data directory %s has %s free, under this node's limit of %s (--disk-free-limit): new events are refused until space returns; consume or purge events, delete topics or free space on the disk (fetch, ack and delivery go on), or lower the limit",
		a.dir, byteSize(free), byteSize(a.limit))}
	a.low.Store(&refusal)
	return !wasLow, free, nil
}

// refusal returns the error to refuse new events with, nil if there is
// space.
func (a *diskAlarm) refusal() error {
	if a == nil {
		return nil
	}
	if p := a.low.Load(); p != nil {
		return *p
	}
	return nil
}

// watch checks the free space until stop is closed, logging when the
// alarm is raised and cleared.
func (a *diskAlarm) watch(stop <-chan struct{}, log *slog.Logger) {
	t := time.NewTicker(diskCheckInterval)
	defer t.Stop()
	var failing bool
	for {
		changed, free, err := a.check()
		switch {
		case err != nil && !failing:
			log.Error("cannot read the free disk space; the disk alarm keeps its last state", "err", err)
		case err == nil && changed && a.refusal() != nil:
			log.Warn("free disk space is under the limit: new events are refused until space returns", "data_dir", a.dir, "free", byteSize(free), "limit", byteSize(a.limit))
		case err == nil && changed:
			log.Info("free disk space is back over the limit: new events are taken again", "data_dir", a.dir, "free", byteSize(free), "limit", byteSize(a.limit))
		}
		failing = err != nil
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// byteSize writes a size in the largest binary unit that keeps it at or
// above 1.
func byteSize(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit && exp < 4; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTP"[exp])
}
