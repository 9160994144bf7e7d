package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// startPprof serves Go's profiles on addr (--pprof-listen), a listener of
// its own so that the API's authentication need not know of them. The
// profiles show the process's internals to whoever reaches them, so only
// a loopback address is accepted. Empty addr serves nothing. The returned
// function stops the server.
func startPprof(addr string, logger *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-listen %s: %w", addr, err)
	}
	if !isLoopback(ln.Addr()) {
		ln.Close()
		return nil, fmt.Errorf("--pprof-listen %s: profiles may only be served on a loopback address (127.0.0.1:6060, say); reach them from elsewhere through an SSH tunnel", addr)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("the profiles server (--pprof-listen) stopped", "err", err)
		}
	}()
	logger.Info("serving Go profiles", "pprof_listen", ln.Addr().String())
	return func() {
		srv.Close()
		<-done
	}, nil
}
