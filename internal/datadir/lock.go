// Package datadir guards a node's data directory: that one process at a
// time uses it (Lock), and that it is used by the node and cluster it
// belongs to (Identity).
//
// Two servers on one directory would both append to the same write-ahead
// log and shard files and leave them unreadable; a directory started as
// another node, or among the nodes of another cluster, would serve or
// overwrite another replica's Raft state. Both are refused before anything
// in the directory is read or written.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// LockFile is the file in a data directory that the process using it holds
// locked (flock) for as long as it runs. It also says who that is. The lock
// goes with the process, however it ends: a SIGKILLed server leaves the
// file behind but not the lock, so nothing needs cleaning up by hand.
const LockFile = "LOCK"

// A Lock is a held data directory lock.
type Lock struct {
	f *os.File
}

// ErrLocked is wrapped by the error Acquire returns when another process
// holds the directory.
var ErrLocked = errors.New("data directory is in use by another process")

// Acquire locks dir for this process, creating dir if it is missing. If
// another process holds it, Acquire fails at once with an error wrapping
// ErrLocked that names the directory and the holder. what describes this
// process for the next one to be refused (for example the command line).
func Acquire(dir, what string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory %s cannot be created: %w; choose another --data-dir or fix its permissions", dir, err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the lock file of data directory %s: %w; check the directory's permissions", dir, err)
	}
	if err := flock(f); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is held by %s; stop that process first, or give this one another --data-dir (two processes on one directory would destroy its data)",
				ErrLocked, dir, holder(path))
		}
		return nil, fmt.Errorf("lock data directory %s (%s): %w", dir, path, err)
	}
	// Who holds it, for the next process to be refused. Best effort: the
	// lock itself is what protects the directory.
	note := fmt.Sprintf("pid %d since %s: %s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339), what)
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(note), 0)
	}
	return &Lock{f: f}, nil
}

// flock takes an exclusive lock on f without waiting, retrying on EINTR.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// holder describes the process named in the lock file at path.
func holder(path string) string {
	data, err := os.ReadFile(path)
	if note := strings.TrimSpace(string(data)); err == nil && note != "" {
		return "process " + note
	}
	return "another process (it has not said which)"
}

// Release unlocks the directory. The file stays: removing it could let two
// later processes each lock a file of their own.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor releases the flock
	l.f = nil
	return err
}
