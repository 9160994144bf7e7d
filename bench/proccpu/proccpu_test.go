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

func TestParseSteal(t *testing.T) {
	stat := "cpu  1713466 1399 1048506 2896288 185746 0 107740 55347 0 0\ncpu0 856733 700 524253 1448144 92873 0 53870 27673 0 0\nintr 1 2 3\n"
	got, err := ParseSteal(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 553470 * time.Millisecond; got != want { // 55347 ticks of 10 ms, the summed line's
		t.Errorf("ParseSteal = %s, want %s", got, want)
	}
	for _, bad := range []string{"", "intr 1 2 3\n", "cpu  1 2 3 4 5 6 7\n", "cpu  1 2 3 4 5 6 7 x 0 0\n"} {
		if _, err := ParseSteal(bad); err == nil {
			t.Errorf("ParseSteal(%q) succeeded, want an error", bad)
		}
	}
}

// This machine's /proc/stat has a steal figure, and it never goes back.
func TestStealOfThisMachine(t *testing.T) {
	before, err := Steal()
	if err != nil {
		t.Fatal(err)
	}
	after, err := Steal()
	if err != nil {
		t.Fatal(err)
	}
	if after < before {
		t.Errorf("steal went from %s to %s", before, after)
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
