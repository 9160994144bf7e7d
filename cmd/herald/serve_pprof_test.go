package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"herald/internal/testkit"
)

func TestPprofServesOnLoopbackOnly(t *testing.T) {
	if _, err := startPprof("0.0.0.0:0", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("--pprof-listen on every interface: err %v, want one asking for a loopback address", err)
	}
	if _, err := startPprof("127.0.0.1:notaport", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--pprof-listen") {
		t.Fatalf("--pprof-listen with a bad port: err %v, want one naming the flag", err)
	}
	stop, err := startPprof("", nil)
	if err != nil {
		t.Fatal(err)
	}
	stop() // nothing to stop
}

func TestPprofServesProfiles(t *testing.T) {
	addr := testkit.FreeAddr(t)
	stop, err := startPprof(addr, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("GET goroutine profile: %d %.200s", resp.StatusCode, body)
	}
}
