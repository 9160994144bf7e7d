// Package framework is what herald's process-level suites share: the
// herald binary, built once per test package by Main, servers started from
// it on loopback, and the consuming helpers their checks rest on. The
// suites are tests/e2e (the CLI and servers as a user drives them) and
// tests/robustness (kills, faults, damaged and full disks); both skip
// under -short, which leaves the fast tier to the unit tests.
package framework

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the herald binary Main built; the one global, as TestMain
// must hand it to the tests.
var binary string

// Main is a suite's TestMain. Under -short it says why it runs nothing
// and exits 0; otherwise it builds the herald binary (with the race
// detector, as the servers' races are bugs too), runs the tests and
// removes the binary.
func Main(m *testing.M, suite string) {
	flag.Parse()
	if testing.Short() {
		fmt.Printf("%s: skipped under -short: its tests run herald serve processes (minutes); run them with go test ./tests/... or make test\n", suite)
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "herald-"+filepath.Base(suite)+"-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "herald")
	if err := build(binary); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// build builds the herald command into path.
func build(path string) error {
	out, err := exec.Command("go", "build", "-race", "-o", path, "herald/cmd/herald").CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build herald/cmd/herald: %w\n%s", err, out)
	}
	return nil
}

// Binary is the herald binary Main built.
func Binary() string {
	if binary == "" {
		panic("framework.Binary: the package's TestMain must call framework.Main")
	}
	return binary
}
