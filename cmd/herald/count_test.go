package main

import "testing"

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n     int
		thing string
		want  string
	}{
		{1, "dead letter", "1 dead letter"},
		{2, "dead letter", "2 dead letters"},
		{0, "entry", "0 entries"},
		{1, "entry", "1 entry"},
		{3, "key", "3 keys"},
	} {
		if got := count(c.n, c.thing); got != c.want {
			t.Errorf("count(%d, %q) = %q, want %q", c.n, c.thing, got, c.want)
		}
	}
}
