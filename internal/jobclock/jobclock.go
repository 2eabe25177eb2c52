// Package jobclock is the local clock of pgleader's job runner, a seam for
// tests only: a process test sets Now to run one replica with its clock
// ahead of the others'. libfaketime cannot do that for a Go program, which
// reads the time through the vDSO, not through the C library that
// libfaketime replaces.
//
// The runner waits by the database clock: it reads it with each statement
// and keeps only the offset of the local clock from it, so a replica whose
// clock is off by seconds wakes at the same instants as the others. Now is
// what that offset is measured against.
package jobclock

import "time"

// Now returns the local time. Tests replace it before a runner starts.
var Now = time.Now
