package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// pushSink is the push endpoint of non-persistent topics: an HTTP server on
// loopback that reads each request and answers 200. Its close stops it and
// joins the goroutine that serves.
type pushSink struct {
	srv    *http.Server
	url    string
	served chan error // the result of Serve, once it returns
}

func startPushSink() (*pushSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start the push sink: %w", err)
	}
	s := &pushSink{url: "http://" + ln.Addr().String() + "/", served: make(chan error, 1)}
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusOK)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

// close lets requests in flight finish (for up to 10 seconds, then cuts
// them off), and returns once the server has stopped.
func (s *pushSink) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	if serr := <-s.served; !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("push sink: %w", serr)
	}
	return err
}
