// Package wait has the context-aware sleep that the elector, the bench and
// the chaos harness share.
package wait

import (
	"context"
	"time"
)

// Sleep waits d or until ctx is done, and reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
