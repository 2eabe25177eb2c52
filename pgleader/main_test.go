package pgleader_test

import (
	"testing"

	"github.com/pgleader/pgleader/internal/pgtest"
)

func TestMain(m *testing.M) {
	if runSetChild() { // a child process of TestSetSessionBound*
		return
	}
	pgtest.Main(m)
}
