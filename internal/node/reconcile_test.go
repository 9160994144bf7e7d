package node

import (
	"testing"
	"time"
)

// TestUntilClosedEndsOnStopOrCancel: the context ends when stop is
// closed, and cancel returns once the watcher has returned.
func TestUntilClosedEndsOnStopOrCancel(t *testing.T) {
	stop := make(chan struct{})
	ctx, cancel := untilClosed(stop)
	close(stop)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the context did not end when stop was closed")
	}
	cancel()

	ctx, cancel = untilClosed(make(chan struct{}))
	cancel()
	if ctx.Err() == nil {
		t.Error("the context did not end on cancel")
	}
}
