// Package hook holds switches that break pgleader on purpose, so that the
// fault-injection checker (internal/chaos) can show it catches the
// breakage. Nothing but tests of the checker sets them.
package hook

import "sync/atomic"

// NoYield, when set, disables the term's timeline: a term whose renewals
// fail is never told to yield, its body is never cancelled at C, and
// Term.Live ignores the clock. Lost and stopped terms still end.
var NoYield atomic.Bool
