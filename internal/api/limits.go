package api

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"

	"connectrpc.com/connect"

	"herald/internal/protocol"
)

// MaxRequestBytes bounds a request body, as sent and once decompressed: a
// batch of events up to the payload limit each. Clients split larger
// batches into several requests.
const MaxRequestBytes = protocol.MaxRequestBytes

// The request limit is enforced here rather than by connect's
// WithReadMaxBytes, which answers resource_exhausted: the code of a full
// queue, which clients retry and HTTP answers with 503, while a request
// over the limit fails again however often it is sent. Both readers below
// fail with the same invalid_argument error, which connect passes on as
// it is (it returns *connect.Error values from readers unchanged).

// limitBody makes the body of r fail with tooLarge once more than
// MaxRequestBytes of it have been read.
func limitBody(r *http.Request) {
	if r.Body == nil {
		return
	}
	r.Body = &limitedBody{
		Reader: &limitedReader{r: r.Body, left: MaxRequestBytes, size: r.ContentLength},
		Closer: r.Body,
	}
}

type limitedBody struct {
	io.Reader
	io.Closer
}

// limitedReader reads r until more than left bytes came from it.
type limitedReader struct {
	r    io.Reader
	left int64
	size int64 // the whole size if known (Content-Length), else -1
	what string
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, tooLarge(l.what, l.size)
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n, tooLarge(l.what, l.size)
	}
	return n, err
}

// tooLarge is the error of a request over MaxRequestBytes: what it was
// ("" for the body as sent), and its size if known (else < 0).
func tooLarge(what string, size int64) *connect.Error {
	if what == "" {
		what = "the request"
	}
	if size > 0 {
		what = fmt.Sprintf("%s (%d bytes)", what, size)
	}
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
		"%s is larger than the request limit of %d bytes (64 MiB); nothing was published: "+
			"send the events in several smaller requests (herald publish and the Go client split batches by size themselves); see docs/api.md",
		what, MaxRequestBytes))
}

// limitedGzip is a gzip decompressor for connect whose output fails with
// tooLarge past MaxRequestBytes, so that a small compressed request cannot
// unpack into more than an uncompressed one may hold.
type limitedGzip struct {
	gz  gzip.Reader
	out limitedReader
}

func newLimitedGzip() connect.Decompressor {
	g := &limitedGzip{}
	g.out = limitedReader{r: &g.gz, size: -1, what: "the decompressed request"}
	return g
}

func (g *limitedGzip) Read(p []byte) (int, error) { return g.out.Read(p) }
func (g *limitedGzip) Close() error               { return g.gz.Close() }

func (g *limitedGzip) Reset(r io.Reader) error {
	g.out.left = MaxRequestBytes
	return g.gz.Reset(r)
}

// gzipOption serves gzip with limitedGzip in place of connect's own, and
// compresses responses at gzip.BestSpeed: large responses are mostly of
// event payloads (dead letters; Fetch batches are not compressed at all,
// see NewHandler), which are often incompressible, and at the default
// level deflating Fetch batches took about half the server's CPU while
// draining a backlog of 1 KiB random events, for nothing saved.
func gzipOption() connect.HandlerOption {
	return connect.WithCompression("gzip", newLimitedGzip, newFastGzip)
}

// newFastGzip returns a gzip writer at gzip.BestSpeed.
func newFastGzip() connect.Compressor {
	w, err := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	if err != nil {
		panic(err) // BestSpeed is a valid level
	}
	return w
}
