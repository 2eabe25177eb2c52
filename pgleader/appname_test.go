package pgleader_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// TestConnectionsNameThemselves: an operator finds the backend's own
// connections in pg_stat_activity by application_name.
func TestConnectionsNameThemselves(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	a := startOn(t, pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet)), pgleader.Spec{Key: "k", TTL: 3 * time.Second}, "a")
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	bBackend := pgleader.NewPostgres(db.NewPool(t), pgleader.WithLogger(quiet))
	startOn(t, bBackend, pgleader.Spec{Key: "k", TTL: 3 * time.Second}, "b")
	waitFor(t, "b to listen", bBackend.Listening)
	count := func(name string) (n int) {
		err := db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, name).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, "b's LISTEN connection named 'pgleader listen'", func() bool { return count("pgleader listen") >= 1 })
	waitFor(t, "the lease connections named 'pgleader lease'", func() bool { return count("pgleader lease") == 2 })
}
