package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/pgleader/pgleader/internal/embedpg"
)

// RequireServerTools names the environment variable that turns missing
// server tools (ServerBin, SkipWithout) from a skip into a failure, as
// .ci/run sets it.
const RequireServerTools = "PGLEADER_REQUIRE_SERVER_TOOLS"

// ServerBin returns the directory of PostgreSQL's server programs with
// what a replicated cluster of the test's own needs (initdb, pg_ctl,
// pg_basebackup). Without them the test is skipped (see SkipWithout).
func ServerBin(t testing.TB) string {
	t.Helper()
	bin, err := embedpg.FindBin()
	for _, tool := range []string{"initdb", "pg_ctl", "pg_basebackup"} {
		if err != nil {
			break
		}
		_, err = os.Stat(filepath.Join(bin, tool))
	}
	if err != nil {
		SkipWithout(t, fmt.Sprintf("PostgreSQL's server programs (%v)", err), "the PostgreSQL server package")
	}
	return bin
}

// SkipWithout skips the test for want of what, which the package install
// provides, unless RequireServerTools is set: then it fails it.
func SkipWithout(t testing.TB, what, install string) {
	t.Helper()
	if os.Getenv(RequireServerTools) != "" {
		t.Fatalf("pgtest: %s not found (install %s), and %s is set", what, install, RequireServerTools)
	}
	t.Skipf("pgtest: SKIPPED, %s not found (install %s to run this test; CI sets %s=1 and runs it)", what, install, RequireServerTools)
}
