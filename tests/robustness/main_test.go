package robustness

import (
	"testing"

	"herald/tests/framework"
)

// The robustness suite breaks real herald serve processes: SIGKILLs under
// load, a fault-injecting cluster, flipped bits, a full disk, a damaged
// write-ahead log.
func TestMain(m *testing.M) { framework.Main(m, "tests/robustness") }
