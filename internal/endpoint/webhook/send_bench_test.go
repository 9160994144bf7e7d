package webhook

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herald/internal/endpoint"
	"herald/internal/testkit"
)

// receiverEnv makes the test binary a webhook receiver that answers 204 at
// once: TestReceiverProcess is then the whole process.
const receiverEnv = "HERALD_WEBHOOK_BENCH_RECEIVER"

// TestReceiverProcess is the receiver BenchmarkSendCPU starts as a
// process of its own, so that the benchmark's CPU is the sender's alone.
// Run as a test (without receiverEnv) it does nothing.
func TestReceiverProcess(t *testing.T) {
	if os.Getenv(receiverEnv) == "" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(ln.Addr())
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); _ = srv.Close() }() // ends with the benchmark
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		t.Fatal(err)
	}
}

// startReceiverProcess starts TestReceiverProcess and returns its URL.
func startReceiverProcess(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestReceiverProcess$")
	cmd.Env = append(os.Environ(), receiverEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("receiver process: %v", err)
	}
	return "http://" + strings.TrimSpace(addr) + "/hook"
}

// BenchmarkSendCPU measures the sender's CPU per webhook request, with 16
// requests in flight (a dispatcher's default) to a receiver in another
// process: net/http's own client posting a ready body over HTTP/1.1 and
// over HTTP/2 without TLS (what one HTTP request costs at least, whoever
// sends it), against Endpoint.Send encoding and posting an event of 1 KiB.
func BenchmarkSendCPU(b *testing.B) {
	url := startReceiverProcess(b)
	m := &endpoint.Message{
		ID: "orders/2/17", Topic: "orders", Shard: 2, Offset: 17, Key: "customer-42",
		Time: time.Unix(1_700_000_000, 0), Payload: bytes.Repeat([]byte{0xff, 0x01, 0x7f, 0x00}, 256), Attempt: 1,
	}
	body, err := endpoint.Envelope(m)
	if err != nil {
		b.Fatal(err)
	}
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	for _, c := range []struct {
		name      string
		protocols *http.Protocols
	}{{"net-http", nil}, {"net-http-h2c", &h2c}} {
		b.Run(c.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: maxIdleConns, Protocols: c.protocols}}
			defer client.CloseIdleConnections()
			sendInParallel(b, func() error {
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				if err := resp.Body.Close(); err != nil {
					return err
				}
				if c.protocols != nil && resp.ProtoMajor != 2 {
					return fmt.Errorf("answered over %s, want HTTP/2", resp.Proto)
				}
				return nil
			})
		})
	}
	b.Run("Endpoint.Send", func(b *testing.B) {
		e := startEndpoint(b, attributes(url))
		sendInParallel(b, func() error { return e.Send(context.Background(), m) })
	})
}

// sendInParallel runs send b.N times from 16 goroutines and reports the
// process's CPU per send.
func sendInParallel(b *testing.B, send func() error) {
	const inFlight = 16
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	cpuStart := testkit.ProcessCPU(b)
	for range inFlight {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := send(); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	cpu := testkit.ProcessCPU(b) - cpuStart
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-µs/request")
}
