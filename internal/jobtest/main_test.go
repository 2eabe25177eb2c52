package jobtest_test

import (
	"testing"

	"github.com/pgleader/pgleader/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
