package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// lineItem is what readLines found next: a line, a pause in the input, its
// end, or a read error.
type lineItem struct {
	n    int    // line number, from 1
	line []byte // without its line ending
	idle bool   // no more input is buffered: the next read may block
	eof  bool
	err  error
}

// readLines sends the non-empty lines of r to items, then an item with eof
// or err set. Before each read that may block, it sends an idle item, so
// that a consumer can act on what it has instead of waiting for input that
// may come late, as from "tail -f". It runs until r ends or ctx is done.
func readLines(ctx context.Context, r io.Reader, items chan<- lineItem) {
	send := func(it lineItem) bool {
		select {
		case items <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		if br.Buffered() == 0 && !send(lineItem{idle: true}) {
			return
		}
		line, err := br.ReadBytes('\n')
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) > 0 && !send(lineItem{n: n, line: line}) {
			return
		}
		switch {
		case errors.Is(err, io.EOF):
			send(lineItem{eof: true})
			return
		case err != nil:
			send(lineItem{err: err})
			return
		}
	}
}

// lineReader runs readLines in a goroutine that it owns: stop ends the
// goroutine and waits for it.
type lineReader struct {
	items  <-chan lineItem
	r      io.Reader
	cancel context.CancelFunc
	done   chan struct{} // closed when readLines has returned
}

// startLineReader starts reading the lines of r; they arrive on items.
func startLineReader(ctx context.Context, r io.Reader) *lineReader {
	ctx, cancel := context.WithCancel(ctx)
	items := make(chan lineItem)
	l := &lineReader{items: items, r: r, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		readLines(ctx, r, items)
	}()
	return l
}

// stop ends the reading and returns once its goroutine has. A read in
// progress is interrupted where r allows it (see interruptRead); where it
// does not, stop waits for the read to return.
func (l *lineReader) stop() {
	l.cancel()
	select {
	case <-l.done:
		return
	default:
	}
	interruptRead(l.r)
	<-l.done
}

// interruptRead makes a read of r in progress return: by a deadline in the
// past where r takes one (files that Go polls, such as pipes and terminals
// opened by reopenForPolling, and connections), else by closing r.
func interruptRead(r io.Reader) {
	if d, ok := r.(interface{ SetReadDeadline(time.Time) error }); ok && d.SetReadDeadline(time.Now()) == nil {
		return
	}
	if c, ok := r.(io.Closer); ok {
		c.Close()
	}
}

// reopenForPolling opens the pipe or terminal f anew, through
// /proc/self/fd on Linux, as a file whose reads a deadline can interrupt.
// Standard input is usually in blocking mode, and a blocked read of it
// cannot be interrupted; making it non-blocking would change it for every
// process sharing it, the shell included, whereas the reopened file is a
// description of its own. It is opened non-blocking, so that a pipe whose
// writer has already gone does not block the open. A regular file is not
// reopened, which would lose its offset, nor need it be: its reads do not
// block.
func reopenForPolling(f *os.File) (*os.File, bool) {
	if runtime.GOOS != "linux" {
		return nil, false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeCharDevice) == 0 {
		return nil, false
	}
	raw, err := f.SyscallConn() // unlike f.Fd, leaves f's mode alone
	if err != nil {
		return nil, false
	}
	var fd uintptr
	if err := raw.Control(func(d uintptr) { fd = d }); err != nil {
		return nil, false
	}
	r, err := os.OpenFile("/proc/self/fd/"+strconv.FormatUint(uint64(fd), 10), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, false
	}
	if r.SetReadDeadline(time.Time{}) != nil { // not polled after all
		r.Close()
		return nil, false
	}
	return r, true
}
