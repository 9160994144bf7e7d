package protocol

import (
	"bufio"
	"bytes"
	"io"
	"testing"
)

// FrameBuffered says yes only for a whole frame in the reader's buffer:
// never for a frame cut short, whose rest ReadFrame would wait for.
func TestFrameBuffered(t *testing.T) {
	frames := AppendFrame(AppendFrame(nil, 1, []byte("first")), 2, bytes.Repeat([]byte("x"), 300))
	for cut := 0; cut <= len(frames); cut++ {
		r := bufio.NewReader(bytes.NewReader(frames[:cut]))
		r.Peek(cut) // buffer what there is
		first := len(AppendFrame(nil, 1, []byte("first")))
		if got, want := FrameBuffered(r), cut >= first; got != want {
			t.Fatalf("%d of %d bytes buffered: FrameBuffered = %v, want %v", cut, len(frames), got, want)
		}
		if cut < first {
			continue
		}
		if _, _, err := ReadFrame(r, 1<<10, nil); err != nil {
			t.Fatal(err)
		}
		if got, want := FrameBuffered(r), cut == len(frames); got != want {
			t.Fatalf("after the first frame, %d of %d bytes: FrameBuffered = %v, want %v", cut, len(frames), got, want)
		}
	}
	if FrameBuffered(bufio.NewReader(io.MultiReader())) {
		t.Fatal("FrameBuffered on an empty reader")
	}
}
