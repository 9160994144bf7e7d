package main

import (
	"context"
	"io"
	"os"
	"testing"
	"time"
)

// stopsWithin fails t unless l.stop returns within a few seconds.
func stopsWithin(t *testing.T, l *lineReader) {
	t.Helper()
	stopped := make(chan struct{})
	go func() {
		l.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return while a read was blocked")
	}
}

// firstLine returns the first line item l sends, skipping idle ones.
func firstLine(t *testing.T, l *lineReader) lineItem {
	t.Helper()
	for it := range l.items {
		if !it.idle {
			return it
		}
	}
	panic("unreachable: items is never closed")
}

func TestLineReaderStopInterruptsABlockedRead(t *testing.T) {
	t.Run("io.Pipe", func(t *testing.T) {
		r, w := io.Pipe()
		defer w.Close()
		l := startLineReader(context.Background(), r)
		go io.WriteString(w, "one\n")
		if it := firstLine(t, l); string(it.line) != "one" {
			t.Errorf("line %q, want one", it.line)
		}
		stopsWithin(t, l) // the writer stays open: the next read blocks
	})
	t.Run("reopened os.Pipe", func(t *testing.T) {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer pw.Close()
		defer pr.Close()
		polled, ok := reopenForPolling(pr)
		if !ok {
			t.Skip("this system cannot reopen a pipe for polling")
		}
		defer polled.Close()
		l := startLineReader(context.Background(), polled)
		io.WriteString(pw, "one\n")
		if it := firstLine(t, l); string(it.line) != "one" {
			t.Errorf("line %q, want one", it.line)
		}
		stopsWithin(t, l)
	})
}

// TestReopenForPollingAfterTheWriterHasGone checks that a pipe whose writer
// has written and closed it is still read in full, and that opening it
// anew does not wait for a writer.
func TestReopenForPollingAfterTheWriterHasGone(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	io.WriteString(pw, "a\nb\n")
	pw.Close()
	polled, ok := reopenForPolling(pr)
	if !ok {
		t.Skip("this system cannot reopen a pipe for polling")
	}
	defer polled.Close()
	data, err := io.ReadAll(polled)
	if err != nil || string(data) != "a\nb\n" {
		t.Errorf("read %q, %v; want a\\nb\\n", data, err)
	}

	// A regular file is left alone.
	f, err := os.CreateTemp(t.TempDir(), "events")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := reopenForPolling(f); ok {
		t.Error("a regular file was reopened")
	}
}
