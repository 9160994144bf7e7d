package client

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"connectrpc.com/connect"
)

// maxOneWriteBody is the largest request body that oneWriteClient copies
// into memory. Larger bodies are rare (batches of big events) and gain
// little: their own writes cost more than one more for the headers.
const maxOneWriteBody = 256 << 10

// oneWriteClient sends each small request's headers and body in one write.
//
// net/http flushes a request's headers on their own before copying its
// body, unless the body is one of the in-memory readers it knows
// (bytes.Reader, bytes.Buffer, strings.Reader). Connect's unary bodies are
// its own type, so every publish cost two writes on the client, and on the
// server two reads with a wake-up between them. At one event per request
// sending it in one write cut the load generator's CPU per event by a
// fifth (docs/bench/results/batch-1-request-path.md). Copying a body of a few KiB is much cheaper than
// a system call.
type oneWriteClient struct {
	next connect.HTTPClient
}

func (c oneWriteClient) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength <= 0 || req.ContentLength > maxOneWriteBody {
		return c.next.Do(req)
	}
	body := make([]byte, req.ContentLength)
	_, err := io.ReadFull(req.Body, body)
	req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read the body of %s: %w", req.URL, err)
	}
	// A shallow copy, as Request.WithContext makes: the caller owns the
	// request it passed, and the transport only reads the headers.
	r := *req
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return c.next.Do(&r)
}
