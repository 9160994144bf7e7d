package controller

import (
	"errors"
	"testing"

	"herald/internal/topic"
)

// TestNameCluster checks that the first cluster id given sticks, on every
// replica and through a snapshot, and that a malformed command is refused.
func TestNameCluster(t *testing.T) {
	s := New()
	if got := s.Cluster(); got != "" {
		t.Fatalf("a new state has cluster id %q", got)
	}
	if r := apply(t, s, Command{Op: OpNameCluster, Cluster: "first"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	// A second leader's proposal, raced with the first, changes nothing.
	if r := apply(t, s, Command{Op: OpNameCluster, Cluster: "second"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := s.Cluster(); got != "first" {
		t.Fatalf("cluster id %q, want the first one given", got)
	}
	back := New()
	if err := back.Restore(mustSnapshot(t, s)); err != nil {
		t.Fatal(err)
	}
	if got := back.Cluster(); got != "first" {
		t.Fatalf("cluster id %q after a snapshot, want first", got)
	}

	for _, c := range []Command{
		{Op: OpNameCluster},                        // no id
		{Op: OpNameCluster, Cluster: "x", Node: 2}, // a node it would ignore
		{Op: OpRebalance, Cluster: "x"},            // an id another op would ignore
	} {
		r := apply(t, s, c)
		if !errors.Is(r.Err, topic.ErrInvalid) {
			t.Errorf("%+v: err %v, want invalid", c, r.Err)
		}
	}
	if got := s.Cluster(); got != "first" {
		t.Fatalf("cluster id %q after refused commands", got)
	}
}
