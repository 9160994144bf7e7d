package testkit

import "testing"

// A test picks all its nodes' ports before any of them listens: the
// ports picked must differ, though each is free when picked.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := make(map[int]bool)
	for range 500 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
