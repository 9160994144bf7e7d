package node

import "testing"

// A broadcast wakes whoever waits at a signal, and only at the next one:
// a signal nobody waited for neither wakes a later waiter early nor keeps
// the next signal from waking it.
func TestBroadcastWakesWaitersAtTheNextSignal(t *testing.T) {
	b := newBroadcast()
	b.signal() // nobody waits
	ch := b.wait()
	select {
	case <-ch:
		t.Fatal("a waiter after a signal was woken by it")
	default:
	}
	other := b.wait()
	b.signal()
	for i, c := range []<-chan struct{}{ch, other} {
		select {
		case <-c:
		default:
			t.Fatalf("waiter %d was not woken by the signal", i)
		}
	}
	next := b.wait()
	select {
	case <-next:
		t.Fatal("a waiter after the signal was woken by it")
	default:
	}
	b.signal()
	<-next
}
