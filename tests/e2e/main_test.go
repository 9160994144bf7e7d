package e2e

import (
	"testing"

	"herald/tests/framework"
)

// The end-to-end suite drives the real herald binary as a user would: the
// CLI, single servers and clusters of herald serve processes on loopback.
func TestMain(m *testing.M) { framework.Main(m, "tests/e2e") }
