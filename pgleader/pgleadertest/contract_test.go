package pgleadertest_test

import (
	"testing"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/backendtest"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// TestBackendContract runs the suite every Backend must pass against the
// in-memory backend, so it cannot drift from PostgreSQL's.
func TestBackendContract(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, func(*testing.T) pgleader.Backend { return pgleadertest.NewBackend() })
}

// TestHandoffBackendContract runs it against the view that keeps
// candidates too, so that its hand-off subtests run.
func TestHandoffBackendContract(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, func(*testing.T) pgleader.Backend { return pgleadertest.NewBackend().WithHandOff() })
}
