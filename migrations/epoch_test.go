package migrations_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
)

// epochSpan is the number of tokens of one epoch (pgleader._epoch_bump).
const epochSpan = int64(1) << 40

func epoch(t *testing.T, db *pgtest.DB) int64 {
	t.Helper()
	var e int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT epoch FROM pgleader.settings`).Scan(&e); err != nil {
		t.Fatal(err)
	}
	return e
}

// counter is a key's row: its counter and token_min (0 for NULL).
func counter(t *testing.T, db *pgtest.DB, key string) (token, min int64) {
	t.Helper()
	err := db.Pool.QueryRow(context.Background(),
		`SELECT token, coalesce(token_min, 0) FROM pgleader.lease WHERE key = $1`, key).Scan(&token, &min)
	if err != nil {
		t.Fatalf("row of %s: %v", key, err)
	}
	return token, min
}

// TestEpochAfterCrashRecovery simulates crash recovery without a crash:
// server_epoch emptied, as crash recovery leaves it. The first lease
// operation moves the cluster to epoch 1 and every key's counter to at
// least 2^40, so every token drawn afterwards is above every token drawn
// before, for keys free, held, never seen, and above the epoch's range.
func TestEpochAfterCrashRecovery(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if e := epoch(t, db); e != 0 {
		t.Fatalf("epoch of a fresh install = %d; want 0", e)
	}
	// free: drew 1..3, released. held: a live term. high: advanced above
	// epoch 0's range. lost: its row is lost with the crash.
	var top int64
	for range 3 {
		r := acquire(t, db.Pool, "free", "a", "1 minute")
		mustExec(t, db.Pool, `SELECT pgleader.release('free', 'a', $1)`, r.token)
		top = r.token
	}
	held := acquire(t, db.Pool, "held", "a", "1 minute")
	mustExec(t, db.Pool, `SELECT pgleader.advance('high', $1)`, int64(1)<<50)
	lost := acquire(t, db.Pool, "lost", "a", "1 minute")
	if top != 3 || held.token != 1 || lost.token != 1 {
		t.Fatalf("tokens before = %d, %d, %d; want 3, 1, 1 (a fresh install counts from 1)", top, held.token, lost.token)
	}
	mustExec(t, db.Pool, `DELETE FROM pgleader.lease WHERE key = 'lost'`)
	forgetEpoch(t, db)

	// The first lease operation notices.
	if r := acquire(t, db.Pool, "held", "b", "1 minute"); r.acquired || r.holder != "a" {
		t.Fatalf("acquire of a held key in grace = %+v", r)
	}
	if e := epoch(t, db); e != 1 {
		t.Fatalf("epoch after the notice = %d; want 1", e)
	}
	for _, c := range []struct {
		key      string
		tok, min int64
	}{
		{"free", epochSpan, 0},
		{"held", held.token, epochSpan}, // its holder still renews token 1
		{"high", 1<<50 + epochSpan, 0},
	} {
		if tok, min := counter(t, db, c.key); tok != c.tok || min != c.min {
			t.Errorf("%s after the notice: counter %d, token_min %d; want %d, %d", c.key, tok, min, c.tok, c.min)
		}
	}
	if e := renew(t, db.Pool, "held", "a", held.token, "1 minute"); e == nil {
		t.Fatal("the held term could not renew in the grace")
	}
	mustExec(t, db.Pool, `SELECT pgleader.lease_guard('held', $1)`, held.token)

	// A second notice (another failover) does not happen while the row is
	// there: the notice is once per server.
	_ = acquire(t, db.Pool, "free", "b", "1 minute")
	if e := epoch(t, db); e != 1 {
		t.Fatalf("epoch after a second operation = %d; want 1", e)
	}

	endGrace(t, db)
	mustExec(t, db.Pool, `SELECT pgleader.release('held', 'a', $1)`, held.token)
	for _, c := range []struct {
		key  string
		want int64
	}{
		{"free", epochSpan + 1},
		{"held", epochSpan + 1},
		{"lost", epochSpan + 1}, // a row created in epoch 1 starts at its base
		{"high", 1<<50 + epochSpan + 1},
	} {
		if r := acquire(t, db.Pool, c.key, "b", "1 minute"); !r.acquired || r.token != c.want {
			t.Errorf("acquire %s after the grace = %+v; want token %d", c.key, r, c.want)
		}
	}
	if _, min := counter(t, db, "held"); min != 0 {
		t.Errorf("token_min after the draw = %d; want NULL", min)
	}

	// Another crash: epoch 2, every counter at least 2^41.
	forgetEpoch(t, db)
	var inGrace bool
	if err := db.Pool.QueryRow(ctx, `SELECT in_grace FROM pgleader.grace()`).Scan(&inGrace); err != nil || !inGrace {
		t.Fatalf("grace() = %v, %v", inGrace, err)
	}
	if e := epoch(t, db); e != 2 {
		t.Fatalf("epoch after the second notice = %d; want 2", e)
	}
	if tok, min := counter(t, db, "free"); tok != epochSpan+1 || min != 2*epochSpan {
		t.Errorf("free (held since) after the second notice: %d, %d; want %d, %d", tok, min, epochSpan+1, 2*epochSpan)
	}
}

// TestEpochNoticedOnce: sessions that notice at the same time move the
// epoch once. The first holds its notice open; the others wait for its
// insert into server_epoch, then find it and draw nothing more.
func TestEpochNoticedOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	for i := range 50 {
		acquire(t, db.Pool, fmt.Sprintf("k%02d", i), "a", "1 second")
	}
	forgetEpoch(t, db)

	first, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	if _, err := first.Exec(ctx, `SELECT pgleader.grace()`); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		conn, err := pgx.Connect(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		pid := backendPID(t, conn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sql string
			switch i % 4 {
			case 0:
				sql = `SELECT * FROM pgleader.acquire('k00', 'b', '1 second')`
			case 1:
				sql = `SELECT * FROM pgleader.acquire_many(ARRAY['k01','k02'], 'b', '1 second', 2)`
			case 2:
				sql = `SELECT pgleader.renew('k03', 'a', 1, '1 second')`
			default:
				sql = `SELECT * FROM pgleader.advance('k04', 7)`
			}
			_, err := conn.Exec(ctx, sql)
			errs <- err
		}()
		waitLockWait(t, db.Pool, pid)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if e := epoch(t, db); e != 1 {
		t.Fatalf("epoch after concurrent notices = %d; want 1", e)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader.lease WHERE greatest(token, coalesce(token_min, 0)) <> $1`, epochSpan).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d counters not at 2^40 (%v): the epoch moved more than once", n, err)
	}
}

// TestEpochDrawLimit: a key draws fewer than 2^40 tokens per epoch. The
// draw that would count into the next epoch's range is refused in words
// and changes nothing; a floor may still move the key above it.
func TestEpochDrawLimit(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	mustExec(t, db.Pool, `SELECT pgleader.advance('k', $1)`, epochSpan-2)
	r := acquire(t, db.Pool, "k", "a", "1 minute")
	if !r.acquired || r.token != epochSpan-1 {
		t.Fatalf("last draw of epoch 0 = %+v; want %d", r, epochSpan-1)
	}
	mustExec(t, db.Pool, `SELECT pgleader.release('k', 'a', $1)`, r.token)
	_, err := db.Pool.Exec(ctx, `SELECT * FROM pgleader.acquire('k', 'a', '1 minute')`)
	wantCode(t, "acquire past epoch 0", err, "22003", `key "k" has drawn every token of epoch 0`)
	_, err = db.Pool.Exec(ctx, `SELECT * FROM pgleader.acquire_many(ARRAY['k'], 'a', '1 minute', 1)`)
	wantCode(t, "acquire_many past epoch 0", err, "22003", `key "k" has drawn every token of epoch 0`)
	if tok, _ := counter(t, db, "k"); tok != epochSpan-1 {
		t.Fatalf("counter after refused draws = %d; want %d (unchanged)", tok, epochSpan-1)
	}
	// A floor at the next epoch's base moves the key above the range.
	var won bool
	var tok int64
	err = db.Pool.QueryRow(ctx, `SELECT acquired, token FROM pgleader.acquire('k', 'a', '1 minute', $1)`, epochSpan).Scan(&won, &tok)
	if err != nil || !won || tok != epochSpan+1 {
		t.Fatalf("acquire with floor 2^40 = %v, %d, %v; want token %d", won, tok, err, epochSpan+1)
	}
}

// TestEpochTop: the last epoch, 2^22 - 1, ends at 2^62 - 1, the largest
// fence token; a server after it draws nothing, in words.
func TestEpochTop(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	mustExec(t, db.Pool, `UPDATE pgleader.settings SET epoch = 4194302`)
	forgetEpoch(t, db)
	mustExec(t, db.Pool, `SELECT pgleader.grace()`)
	endGrace(t, db)
	r := acquire(t, db.Pool, "k", "a", "1 minute")
	if e := epoch(t, db); e != 4194303 || !r.acquired || r.token != 4194303<<40+1 {
		t.Fatalf("epoch %d, acquire %+v; want 4194303, token %d", e, r, int64(4194303<<40+1))
	}
	mustExec(t, db.Pool, `SELECT pgleader.fence_claim('r', $1)`, r.token)
	mustExec(t, db.Pool, `SELECT pgleader.fence_write('r', $1)`, maxFloor) // the top of the last epoch is MaxToken

	mustExec(t, db.Pool, `SELECT pgleader.release('k', 'a', $1)`, r.token)
	forgetEpoch(t, db)
	mustExec(t, db.Pool, `SELECT pgleader.grace()`)
	endGrace(t, db)
	if e := epoch(t, db); e != 4194304 {
		t.Fatalf("epoch after the last = %d; want 4194304 (none left)", e)
	}
	for _, sql := range []string{
		`SELECT * FROM pgleader.acquire('k', 'a', '1 minute')`,
		`SELECT * FROM pgleader.acquire('new', 'a', '1 minute')`,
		`SELECT * FROM pgleader.acquire_many(ARRAY['k'], 'a', '1 minute', 1)`,
	} {
		_, err := db.Pool.Exec(ctx, sql)
		wantCode(t, sql, err, "22003", "no token epoch left")
	}
}

// TestEpochBumpCost measures the notice on 10,000 keys (logged, not
// asserted beyond a generous bound: it runs once per failover).
func TestEpochBumpCost(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	mustExec(t, db.Pool, `INSERT INTO pgleader.lease (key, token) SELECT 'k' || i, i FROM generate_series(1, 10000) AS i`)
	mustExec(t, db.Pool, `UPDATE pgleader.lease SET holder = 'a', acquired_at = clock_timestamp(), renewed_at = clock_timestamp(), expires_at = clock_timestamp() + interval '1 minute' WHERE token % 2 = 0`)
	forgetEpoch(t, db)
	start := time.Now()
	mustExec(t, db.Pool, `SELECT pgleader.grace()`)
	took := time.Since(start)
	t.Logf("notice with 10000 keys (half held): %v", took)
	if took > 10*time.Second {
		t.Errorf("notice took %v", took)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader.lease WHERE greatest(token, coalesce(token_min, 0)) < $1`, epochSpan).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d counters below 2^40 (%v)", n, err)
	}
}

// TestEpochTopUpgrade: a server already past its last epoch when version
// 17 (whose lease_draw runs only for rows it can act on) is applied still
// draws nothing: the migration marks its rows as _epoch_bump now does.
func TestEpochTopUpgrade(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	if err := migrations.To(ctx, db.Pool, 16); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db.Pool, `SELECT pgleader.advance('k', 5)`)
	mustExec(t, db.Pool, `UPDATE pgleader.settings SET epoch = 4194303`)
	forgetEpoch(t, db)
	mustExec(t, db.Pool, `SELECT pgleader.grace()`)
	endGrace(t, db)
	if e := epoch(t, db); e != 4194304 {
		t.Fatalf("epoch = %d; want 4194304 (none left)", e)
	}
	if err := migrations.Up(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`SELECT * FROM pgleader.acquire('k', 'a', '1 minute')`,
		`SELECT * FROM pgleader.acquire_many(ARRAY['k'], 'a', '1 minute', 1)`,
		`SELECT * FROM pgleader.set_acquire('s', 'a', ARRAY['k'], '1 minute', 0)`,
	} {
		_, err := db.Pool.Exec(ctx, sql)
		wantCode(t, sql, err, "22003", "no token epoch left")
	}
}

// TestEpochNewKeysOfACampaign: the rows acquire_many and set_acquire create
// for keys never seen start at the epoch's base, as the column's default
// does (version 27 reads the base once per statement rather than once per
// row): in epoch 1, a new key's first token is 2^40 + 1.
func TestEpochNewKeysOfACampaign(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_ = acquire(t, db.Pool, "seen", "a", "1 minute") // a key, so that the notice has one to move
	forgetEpoch(t, db)
	mustExec(t, db.Pool, `SELECT pgleader.grace()`)
	if e := epoch(t, db); e != 1 {
		t.Fatalf("epoch after the notice = %d; want 1", e)
	}
	endGrace(t, db)
	check := func(what, sql string, want int) {
		t.Helper()
		var keys []string
		var tokens []int64
		if err := db.Pool.QueryRow(ctx, sql).Scan(&keys, &tokens); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(keys) != want {
			t.Fatalf("%s won %v; want %d keys", what, keys, want)
		}
		for i, k := range keys {
			if tokens[i] != epochSpan+1 {
				t.Errorf("%s: %s's first token = %d; want %d (epoch 1's base + 1)", what, k, tokens[i], epochSpan+1)
			}
		}
	}
	check("acquire_many", `SELECT array_agg(key ORDER BY key), array_agg(token ORDER BY key)
		FROM pgleader.acquire_many(ARRAY['m1','m2','m3'], 'b', '1 minute', 3)`, 3)
	check("set_acquire", `SELECT keys, tokens
		FROM pgleader.set_acquire('s', 'b', ARRAY['s1','s2','s3','s4'], '1 minute', 0, 0, NULL, 4)`, 4)
}
