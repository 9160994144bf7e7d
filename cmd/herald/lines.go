package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
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
