package client

import (
	"bytes"
	"io"
	"testing"
)

// TestCoalescedBody checks that a coalescedBody passes on everything
// written to its source, in order, and that Close ends its copier while
// a write waits.
func TestCoalescedBody(t *testing.T) {
	pr, pw := io.Pipe()
	b := newCoalescedBody(pr)
	var want bytes.Buffer
	for i := range 100 {
		msg := bytes.Repeat([]byte{byte(i)}, i+1)
		want.Write(msg)
		if _, err := pw.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	pw.Close()
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, want.Len())
	}
	b.Close()

	pr, pw = io.Pipe()
	b = newCoalescedBody(pr)
	written := make(chan error)
	go func() {
		_, err := pw.Write(make([]byte, coalesceMaxBytes*3))
		written <- err
	}()
	b.Close()
	if err := <-written; err == nil {
		t.Error("a write to a closed body succeeded")
	}
}
