package node

import (
	"testing"
	"time"
)

// A member is alive only while it both answers this node's pings and
// pings this node: a node that can reach the others, but not be reached,
// must see them as gone, or its quiesced leaders never notice that they
// are cut off.
func TestLivenessNeedsBothDirections(t *testing.T) {
	l := newLiveness()
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	if l.alive(2) {
		t.Fatal("a member never heard of is alive")
	}
	l.note(l.answered, 2)
	if l.alive(2) {
		t.Fatal("a member that answers pings but sends none is alive")
	}
	l.note(l.pinged, 3)
	if l.alive(3) {
		t.Fatal("a member that pings but never answers is alive")
	}
	l.note(l.pinged, 2)
	if !l.alive(2) {
		t.Fatal("a member that answers and pings is not alive")
	}
	now = now.Add(livenessWindow)
	l.note(l.answered, 2)
	if l.alive(2) {
		t.Fatal("a member whose last ping is a window old is alive")
	}
}
