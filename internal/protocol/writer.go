package protocol

import (
	"runtime"
	"sync"
)

// Writer writes the frames of a publish stream from a goroutine of its
// own (Run), as many as are queued in each write: the calls a client's
// producers send at the same moment, or the answers one commit gives,
// share one write instead of paying a system call each. Both ends of the
// stream write through it.
type Writer struct {
	write func([]byte) error
	kick  chan struct{}

	mu     sync.Mutex
	buf    []byte // frames waiting for Run
	closed bool   // Close was called: Run writes what is queued and returns
	failed bool   // a write failed: frames are dropped
}

// NewWriter returns a Writer that writes with write.
func NewWriter(write func([]byte) error) *Writer {
	return &Writer{write: write, kick: make(chan struct{}, 1)}
}

// Send queues frame. After Close, or once a write has failed, it drops it.
func (w *Writer) Send(frame []byte) {
	w.mu.Lock()
	if !w.closed && !w.failed {
		w.buf = append(w.buf, frame...)
	}
	w.mu.Unlock()
	w.signal()
}

// Close makes Run write what is queued and return. It does not wait, so
// that it may be called from anywhere, Run's own error path included.
func (w *Writer) Close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.signal()
}

// Run writes queued frames until Close, or until a write fails, whose
// error it returns.
func (w *Writer) Run() error {
	var out []byte
	for range w.kick {
		// Let the other goroutines woken at the same moment queue their
		// frames too.
		runtime.Gosched()
		w.mu.Lock()
		out, w.buf = w.buf, out[:0]
		closed := w.closed
		w.mu.Unlock()
		if len(out) > 0 {
			if err := w.write(out); err != nil {
				w.mu.Lock()
				w.failed, w.buf = true, nil
				w.mu.Unlock()
				return err
			}
		}
		if closed {
			return nil
		}
	}
	return nil
}

func (w *Writer) signal() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}
