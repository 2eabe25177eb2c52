package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// TestEpochBumpOwnerOnly: an application role, granted what grant_usage
// grants, cannot move the token epoch by calling _epoch_bump (3,000 calls
// in 6 s spent epochs; at the last one every draw fails); neither can a
// role with no grant. Its lease operations still notice a new server and
// move the epoch through _grace, which runs as the owner.
func TestEpochBumpOwnerOnly(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	role, other := createRole(t, db), createRole(t, db)
	mustExec(t, db.Pool, `SELECT pgleader.grant_usage($1)`, role)
	for _, r := range []string{role, other} {
		var may bool
		if err := db.Pool.QueryRow(ctx, `SELECT has_function_privilege($1, 'pgleader._epoch_bump()', 'EXECUTE')`, r).Scan(&may); err != nil {
			t.Fatal(err)
		}
		if may {
			t.Errorf("%s may execute pgleader._epoch_bump()", r)
		}
	}
	app, err := pgx.Connect(ctx, urlAs(t, db, role))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	_, err = app.Exec(ctx, `SELECT pgleader._epoch_bump()`)
	wantCode(t, "_epoch_bump by the application role", err, "42501", "permission denied")
	if e := epoch(t, db); e != 0 {
		t.Fatalf("epoch = %d after a refused call; want 0", e)
	}
	forgetEpoch(t, db)
	if r := acquire(t, app, "k", "a", "1 minute"); r.acquired {
		t.Fatalf("acquire in the grace = %+v", r)
	}
	if e := epoch(t, db); e != 1 {
		t.Fatalf("epoch after the application role's notice = %d; want 1", e)
	}
}
