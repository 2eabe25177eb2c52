package pgleader_test

import (
	"testing"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/backendtest"
)

// TestBackendContract runs the suite every Backend must pass against
// PostgreSQL, each subtest on a database of its own.
func TestBackendContract(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, func(t *testing.T) pgleader.Backend {
		return pgleader.NewPostgres(pgtest.New(t).Pool, pgleader.WithLogger(quiet))
	})
}
