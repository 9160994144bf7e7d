package protocol

import (
	"runtime"
	"sync"
)

// Writer writes the items of a publish stream (the custom stream's bytes,
// or the gRPC stream's messages) from a goroutine of its own (Run), as
// many as are queued in each write: the calls a client's producers send at
// the same moment, or the answers one commit gives, share one write
// instead of paying a system call each. Both ends of the stream write
// through it.
type Writer[T any] struct {
	write func([]T) error
	kick  chan struct{}

	mu     sync.Mutex
	buf    []T  // items waiting for Run
	closed bool // Close was called: Run writes what is queued and returns
	failed bool // a write failed: items are dropped
}

// NewWriter returns a Writer that writes with write, which must not keep
// its argument.
func NewWriter[T any](write func([]T) error) *Writer[T] {
	return &Writer[T]{write: write, kick: make(chan struct{}, 1)}
}

// Send queues items (a frame's bytes, say). After Close, or once a write
// has failed, it drops them.
func (w *Writer[T]) Send(items ...T) {
	w.mu.Lock()
	if !w.closed && !w.failed {
		w.buf = append(w.buf, items...)
	}
	w.mu.Unlock()
	w.signal()
}

// Close makes Run write what is queued and return. It does not wait, so
// that it may be called from anywhere, Run's own error path included.
func (w *Writer[T]) Close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.signal()
}

// Run writes queued items until Close, or until a write fails, whose
// error it returns.
func (w *Writer[T]) Run() error {
	var out []T
	for range w.kick {
		// Let the other goroutines woken at the same moment queue their
		// items too.
		runtime.Gosched()
		w.mu.Lock()
		clear(out) // let written messages go
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

func (w *Writer[T]) signal() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}
