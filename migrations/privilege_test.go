package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
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

// TestEpochBumpRevokedOnUpgrade: a role granted on version 11, when
// grant_usage gave EXECUTE on every function, loses it on _epoch_bump by
// the upgrade.
func TestEpochBumpRevokedOnUpgrade(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	if err := migrations.To(ctx, db.Pool, 11); err != nil {
		t.Fatal(err)
	}
	role := createRole(t, db)
	mustExec(t, db.Pool, `SELECT pgleader.grant_usage($1)`, role)
	may := func() bool {
		t.Helper()
		var ok bool
		if err := db.Pool.QueryRow(ctx, `SELECT has_function_privilege($1, 'pgleader._epoch_bump()', 'EXECUTE')`, role).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !may() {
		t.Fatal("on version 11 the granted role cannot execute _epoch_bump; the test needs it to")
	}
	if err := migrations.Up(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if may() {
		t.Fatal("after the upgrade the granted role may still execute _epoch_bump")
	}
}
