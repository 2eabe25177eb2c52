package pgtest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// outcomeTB records how a helper ended a test, without ending this one.
type outcomeTB struct {
	testing.TB
	skipped, failed string
}

func (o *outcomeTB) Helper() {}
func (o *outcomeTB) Skipf(format string, args ...any) {
	o.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (o *outcomeTB) Fatalf(format string, args ...any) {
	o.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestPgbouncerMissing: without pgbouncer, a test that needs it is skipped
// with a line that says what to install, unless RequirePgbouncer is set
// (CI), and then it fails.
func TestPgbouncerMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved := pgbouncerPaths
	pgbouncerPaths = nil
	t.Cleanup(func() { pgbouncerPaths = saved })
	run := func() *outcomeTB {
		o := &outcomeTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			(&DB{}).Pgbouncer(o)
		}()
		<-done
		return o
	}

	t.Setenv(RequirePgbouncer, "")
	if o := run(); o.failed != "" || !strings.Contains(o.skipped, "pgbouncer is not installed (apt-get install pgbouncer") {
		t.Errorf("without pgbouncer: skipped %q, failed %q; want a skip saying what to install", o.skipped, o.failed)
	}
	t.Setenv(RequirePgbouncer, "1")
	if o := run(); o.skipped != "" || !strings.Contains(o.failed, RequirePgbouncer+" is set") {
		t.Errorf("without pgbouncer, required: skipped %q, failed %q; want a failure", o.skipped, o.failed)
	}
}
