package replication_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgleader/pgleader/internal/chaos"
	"github.com/pgleader/pgleader/migrations"
)

// TestLateWriteAfterFailover is the model's trail for the token epochs
// (pgleader._epoch_bump, docs/model-checking.md), on a real primary P and
// asynchronous standby S, with the store in the same database (the fence
// resource "digest", sqlfence's guard row).
//
// Replication is cut. C acquires token N on P and claims the store there.
// C's next write is held (its body paused, or the packet delayed) until
// after D has acquired on S, after the grace, and claimed. P dies with
// nothing of this replicated; S is promoted. Without the epoch jump
// ("noepoch": _epoch_bump replaced by a function that changes nothing) D
// draws N again, its claim is accepted on the rolled-back store, and C's
// late write with N is accepted after it: a write of C's term after D's
// first write (P2). With the jump D draws above 2^40 and C's write is
// refused (PF001).
func TestLateWriteAfterFailover(t *testing.T) {
	t.Parallel()
	bin := postgresBin(t)
	ctx := context.Background()
	primary := startCluster(t, bin, chaos.ClusterOptions{})
	repl := startProxy(t, primary.Addr())
	standby := startStandby(t, primary, repl.Addr(), chaos.ClusterOptions{})

	const maxTTL = "2 seconds"
	dbs := []string{"noepoch", "epoch"}
	for _, db := range dbs {
		exec1(t, dbURL(primary.Addr(), "postgres"), "CREATE DATABASE "+db)
		url := dbURL(primary.Addr(), db)
		if err := migrations.UpURL(ctx, url); err != nil {
			t.Fatal(err)
		}
		exec1(t, url, `SELECT pgleader.set_max_ttl($1::interval)`, maxTTL)
		if db == "noepoch" {
			exec1(t, url, `CREATE OR REPLACE FUNCTION pgleader._epoch_bump() RETURNS bigint
				LANGUAGE sql AS $$ SELECT 0::bigint $$`)
		}
	}
	waitReplayed(t, pool(t, dbURL(primary.Addr(), "postgres")), pool(t, dbURL(standby.Addr(), "postgres")))
	repl.Cut() // nothing from here on reaches the standby

	cToken := map[string]int64{}
	for _, db := range dbs {
		p := pool(t, dbURL(primary.Addr(), db))
		var won bool
		var tok int64
		if err := p.QueryRow(ctx, `SELECT acquired, token FROM pgleader.acquire('digest-publisher', 'C', $1::interval)`, maxTTL).Scan(&won, &tok); err != nil || !won {
			t.Fatalf("%s: C's acquire on P = %v, %v", db, won, err)
		}
		if _, err := p.Exec(ctx, `SELECT pgleader.fence_claim('digest', $1)`, tok); err != nil {
			t.Fatalf("%s: C's claim on P: %v", db, err)
		}
		if _, err := p.Exec(ctx, `SELECT pgleader.fence_write('digest', $1)`, tok); err != nil {
			t.Fatalf("%s: C's write on P: %v", db, err)
		}
		cToken[db] = tok
		p.Close()
	}
	if err := primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()

	for _, db := range dbs {
		s := pool(t, dbURL(standby.Addr(), db))
		var lost int64
		if err := s.QueryRow(ctx, `SELECT token FROM pgleader.lease('digest-publisher')`).Scan(&lost); err != nil || lost != 0 {
			t.Fatalf("%s: S has token %d (%v) for the key; the scenario needs C's term lost", db, lost, err)
		}
		// D campaigns on S until the grace is over.
		var dToken int64
		waitUntil(t, db+": D to win on S", liveness, func() bool {
			var won bool
			err := s.QueryRow(ctx, `SELECT acquired, token FROM pgleader.acquire('digest-publisher', 'D', $1::interval)`, maxTTL).Scan(&won, &dToken)
			if err != nil {
				t.Fatalf("%s: D's acquire on S: %v", db, err)
			}
			return won
		})
		if _, err := s.Exec(ctx, `SELECT pgleader.fence_claim('digest', $1)`, dToken); err != nil {
			t.Fatalf("%s: D's claim on S (token %d): %v", db, dToken, err)
		}
		// C's held write arrives now, after D's first write.
		_, err := s.Exec(ctx, `SELECT pgleader.fence_write('digest', $1)`, cToken[db])
		var pgErr *pgconn.PgError
		refused := errors.As(err, &pgErr) && pgErr.Code == "PF001"
		if err != nil && !refused {
			t.Fatalf("%s: C's late write: %v", db, err)
		}
		t.Logf("%s: C token %d on P; D token %d on S %v after promotion; C's late write refused: %v",
			db, cToken[db], dToken, time.Since(promoted).Round(time.Millisecond), refused)
		switch db {
		case "noepoch":
			if dToken != cToken[db] || refused {
				t.Errorf("noepoch: D drew %d (C had %d), C's late write refused: %v; the control must show the violation (D draws C's token, C's write accepted)",
					dToken, cToken[db], refused)
			}
		case "epoch":
			if dToken <= cToken[db] || dToken != 1<<40+1 || !refused {
				t.Errorf("epoch: D drew %d (C had %d), C's late write refused: %v; want D above 2^40 and the write refused",
					dToken, cToken[db], refused)
			}
		}
	}
}
