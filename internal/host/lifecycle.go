package host

import "sync"

// lifecycle owns how a group's loop ends: the request to stop (stopc,
// closed once however often stop is asked), the loop's exit (done), and
// the failure that ended it, if one did (err, set before done is closed,
// so that whoever sees done closed may read it).
type lifecycle struct {
	stopc    chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	err      error
}

func newLifecycle() lifecycle {
	return lifecycle{stopc: make(chan struct{}), done: make(chan struct{})}
}

// stop asks the loop to stop.
func (l *lifecycle) stop() { l.stopOnce.Do(func() { close(l.stopc) }) }

// closedErr is what callers get once the loop has exited.
func (l *lifecycle) closedErr() error {
	if l.err != nil {
		return l.err
	}
	return ErrClosed
}
