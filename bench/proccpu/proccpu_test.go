package proccpu

import (
	"os"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	// A command name with spaces and parentheses must not shift the fields.
	stat := "4242 (herald (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 130 0 0 20 0 12 0 100 2000000 5000 18446744073709551615"
	got, err := Parse(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3800 * time.Millisecond; got != want { // (250+130) ticks of 10ms
		t.Errorf("Parse = %s, want %s", got, want)
	}
	for _, bad := range []string{"4242 herald S 1", "4242 (herald) S 1 2 3", "4242 (herald) S 1 4242 4242 0 -1 4194560 1000 0 0 0 x 130 0"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", bad)
		}
	}
}

// The process's own CPU time grows as it works.
func TestOfThisProcess(t *testing.T) {
	before, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	after, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time %s after 50 ms of work, %s before", after, before)
	}
}
