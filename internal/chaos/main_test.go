package chaos_test

import (
	"os"
	"testing"

	"github.com/pgleader/pgleader/internal/chaos"
	"github.com/pgleader/pgleader/internal/pgtest"
)

// TestMain runs a replica process when the process-mode test re-executes
// this binary with chaos.ReplicaEnv set, and the tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv(chaos.ReplicaEnv) != "" {
		os.Exit(chaos.ReplicaMain())
	}
	pgtest.Main(m)
}
