package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// startingPoll is how often a command asks again a server that is starting.
const startingPoll = 200 * time.Millisecond

// waitStarting is the CLI's HTTP transport: a request that a starting
// server answers with its starting marker (see gate) is sent again until
// the server serves it or the request's time (--timeout, plus --wait for
// a fetch) runs out. The server did not serve it, so sending it again is
// safe, publishes included. When the time runs out, the server's answer
// stands: it says the server is starting.
type waitStarting struct {
	next   http.RoundTripper
	server string
	notice io.Writer // told once that the command waits
	once   sync.Once
}

// httpClient returns the CLI's HTTP client: TLS as --ca-file says, and
// waiting for a starting server.
func (g *globals) httpClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if g.tls != nil {
		tr.TLSClientConfig = g.tls.Clone()
	}
	return &http.Client{Transport: &waitStarting{next: tr, server: g.server, notice: g.stderr}}
}

func (w *waitStarting) RoundTrip(req *http.Request) (*http.Response, error) {
	for {
		resp, err := w.next.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(startingHeader) == "" {
			return resp, err
		}
		again, ok := w.again(req)
		if !ok {
			return resp, nil
		}
		w.once.Do(func() {
			fmt.Fprintf(w.notice, "herald: the server at %s is starting (opening its data, or in a cluster waiting for a majority of its --peers); waiting%s\n",
				w.server, waitingFor(req.Context()))
		})
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		select {
		case <-req.Context().Done():
			return nil, req.Context().Err()
		case <-time.After(startingPoll):
		}
		req = again
	}
}

// again returns a copy of req to send once more, and false if it cannot
// be sent again: its body cannot be read again, or its time would run out
// before the next try.
func (w *waitStarting) again(req *http.Request) (*http.Request, bool) {
	if deadline, ok := req.Context().Deadline(); ok && time.Until(deadline) < startingPoll {
		return nil, false
	}
	r := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return r, true
	}
	if req.GetBody == nil {
		return nil, false
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	r.Body = body
	return r, true
}

// waitingFor says how long a request may still wait.
func waitingFor(ctx context.Context) string {
	if deadline, ok := ctx.Deadline(); ok {
		return fmt.Sprintf(" up to %v", time.Until(deadline).Round(time.Second))
	}
	return ""
}
