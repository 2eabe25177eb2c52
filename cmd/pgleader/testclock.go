//go:build pgleader_testclock

package main

import (
	"fmt"
	"os"
	"time"

	"github.com/pgleader/pgleader/internal/jobclock"
)

// A binary built with -tags pgleader_testclock, for the process tests only,
// runs its job runner's local clock PGLEADER_TEST_CLOCK_AHEAD (a Go
// duration) ahead of the host's, so that one replica of a test's job can
// disagree with the others about the time. libfaketime cannot do that: Go
// reads the time through the vDSO, not through the C library that
// libfaketime replaces. Released builds do not have this file.
func init() {
	v, ok := os.LookupEnv("PGLEADER_TEST_CLOCK_AHEAD")
	if !ok {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgleader: PGLEADER_TEST_CLOCK_AHEAD: %v\n", err)
		os.Exit(2)
	}
	jobclock.Now = func() time.Time { return time.Now().Add(d) }
	// The test checks for this line: a build without the tag ignores the
	// variable, and its test would prove nothing.
	fmt.Fprintf(os.Stderr, "pgleader: test build: the job runner's clock runs %v ahead (PGLEADER_TEST_CLOCK_AHEAD)\n", d)
}
