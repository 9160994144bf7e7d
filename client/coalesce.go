package client

import (
	"io"
	"net/http"
	"runtime"
	"sync"

	"connectrpc.com/connect"
)

// coalesceMaxBytes bounds what a coalescedBody holds for the transport:
// beyond it, Sends wait, as they would on the transport itself.
const coalesceMaxBytes = 256 << 10

// coalescingClient sends a streaming request's messages, as many as are
// waiting, in one HTTP/2 DATA frame and one write.
//
// Connect writes each message of a stream to a pipe that the HTTP/2
// transport reads, and the transport flushes every read to the
// connection: a system call per message, for the client and for the
// node reading it, which halved the PublishStream RPC's throughput
// against the custom stream's (whose writer batches). coalescedBody takes
// the pipe's messages as they come and hands the transport all of them
// at its next read.
type coalescingClient struct {
	next connect.HTTPClient
}

func (c coalescingClient) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.next.Do(req)
	}
	r := *req // a shallow copy, as oneWriteClient makes
	r.Body = newCoalescedBody(req.Body)
	r.GetBody = nil
	return c.next.Do(&r)
}

// coalescedBody reads src on a goroutine of its own into a buffer whose
// whole content each Read returns.
type coalescedBody struct {
	src  io.ReadCloser
	done sync.WaitGroup // the copier

	mu   sync.Mutex
	cond sync.Cond // signalled when buf or err changes
	buf  []byte
	err  error // src's error, once it has one
}

func newCoalescedBody(src io.ReadCloser) *coalescedBody {
	b := &coalescedBody{src: src}
	b.cond.L = &b.mu
	b.done.Go(b.copy)
	return b
}

// copy moves what src gives into buf until src fails or ends.
func (b *coalescedBody) copy() {
	chunk := make([]byte, 32<<10)
	for {
		n, err := b.src.Read(chunk)
		b.mu.Lock()
		for len(b.buf) >= coalesceMaxBytes && b.err == nil {
			b.cond.Wait()
		}
		b.buf = append(b.buf, chunk[:n]...)
		if err != nil && b.err == nil {
			b.err = err
		}
		stop := b.err != nil
		b.cond.Broadcast()
		b.mu.Unlock()
		if stop {
			return
		}
	}
}

func (b *coalescedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) == 0 && b.err == nil {
		for len(b.buf) == 0 && b.err == nil {
			b.cond.Wait()
		}
		// Woken by the first of the messages sent together (the calls
		// one write queued, say): let the others come too.
		b.mu.Unlock()
		runtime.Gosched()
		b.mu.Lock()
	}
	if len(b.buf) == 0 {
		return 0, b.err
	}
	n := copy(p, b.buf)
	b.buf = b.buf[:copy(b.buf, b.buf[n:])]
	b.cond.Broadcast()
	return n, nil
}

// Close closes src and waits for the copier, which its failing read ends.
func (b *coalescedBody) Close() error {
	err := b.src.Close()
	b.mu.Lock()
	if b.err == nil {
		b.err = io.ErrClosedPipe
	}
	b.cond.Broadcast()
	b.mu.Unlock()
	b.done.Wait()
	return err
}
