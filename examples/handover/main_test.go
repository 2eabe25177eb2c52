package main

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestDemo tells the whole story against the test server and checks that
// it ends with the summary and drops the database it created.
func TestDemo(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	var out bytes.Buffer
	err := demo(context.Background(), db.URL, &out, options{every: 50 * time.Millisecond, logger: slog.New(slog.DiscardHandler)})
	t.Logf("the story:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"leads with token 1;", "leads with token 2;", "leads with token 51;",
		"token 1 is stale, stored fence is 2",
		"handover gap, from pod-a's stop to pod-b's first unit: ",
		"the first term drew token 51; claims refused: 0",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the story does not say %q", want)
		}
	}
	name := regexp.MustCompile(`pgleader_demo_[0-9a-f]+`).FindString(out.String())
	var exists bool
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if name == "" || exists {
		t.Errorf("the demo's database %q is left behind (or was not named)", name)
	}
}
