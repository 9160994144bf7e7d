package transport

import (
	"encoding/binary"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// wholeMessages is the HTTP client of the peers' streams. It hands
// net/http each streamed request body one whole gRPC message per read.
//
// connect-go writes a message to the request body in two writes, the
// message's 5-byte prefix and then its bytes, and net/http sends each
// read of the body as its own HTTP/2 DATA frame with its own flush: two
// frames and two socket writes per batch of Raft messages, and twice the
// goroutine handoffs, for nothing. Read whole, a batch costs one of each.
type wholeMessages struct {
	c connect.HTTPClient
}

func (w wholeMessages) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody && req.ContentLength < 0 &&
		strings.HasPrefix(req.Header.Get("Content-Type"), "application/grpc") {
		req.Body = &messageReader{body: req.Body}
	}
	return w.c.Do(req)
}

// grpcPrefixLen is the length of the prefix of a gRPC length-prefixed
// message: a flags byte and the message's length, big-endian.
const grpcPrefixLen = 5

// messageReader reads a stream of gRPC length-prefixed messages so that
// a read returns a message's prefix together with its bytes, as far as
// the caller's buffer holds them.
type messageReader struct {
	body io.ReadCloser
	left int // bytes of the current message not yet read
}

func (r *messageReader) Read(p []byte) (int, error) {
	if r.left > 0 {
		n, err := r.body.Read(p[:min(len(p), r.left)])
		r.left -= n
		if err == io.EOF && r.left > 0 {
			err = io.ErrUnexpectedEOF // a message cut short
		}
		return n, err
	}
	if len(p) < grpcPrefixLen {
		// Too small to take a prefix whole: pass the read through, and
		// lose track of the messages (correct, if no longer whole).
		r.left = -1
	}
	if r.left < 0 {
		return r.body.Read(p)
	}
	n, err := io.ReadFull(r.body, p[:grpcPrefixLen])
	if err != nil {
		// io.EOF at a message boundary: the stream ended.
		return n, err
	}
	r.left = int(binary.BigEndian.Uint32(p[1:grpcPrefixLen]))
	if r.left == 0 {
		return n, nil
	}
	// The message's bytes follow its prefix at once (connect writes them
	// right after it), so waiting for them here costs nothing.
	m, err := io.ReadFull(r.body, p[grpcPrefixLen:grpcPrefixLen+min(len(p)-grpcPrefixLen, r.left)])
	r.left -= m
	if err == io.ErrUnexpectedEOF || (err == io.EOF && m == 0) {
		err = io.ErrUnexpectedEOF // a message cut short
	}
	return n + m, err
}

func (r *messageReader) Close() error { return r.body.Close() }
