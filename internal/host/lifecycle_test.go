package host

import (
	"errors"
	"testing"
)

func TestLifecycleStopIsIdempotent(t *testing.T) {
	l := newLifecycle()
	l.stop()
	l.stop()
	if !isClosed(l.stopc) {
		t.Fatal("stop did not ask the loop to stop")
	}
}

func TestLifecycleClosedErrNamesTheFailure(t *testing.T) {
	l := newLifecycle()
	if err := l.closedErr(); err != ErrClosed {
		t.Fatalf("closedErr of a loop that stopped = %v, want ErrClosed", err)
	}
	failure := errors.New("disk gone")
	l.err = failure
	if err := l.closedErr(); err != failure {
		t.Fatalf("closedErr of a loop that failed = %v, want its failure", err)
	}
}
