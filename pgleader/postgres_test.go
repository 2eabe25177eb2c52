package pgleader_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/internal/racetest"
	"github.com/pgleader/pgleader/pgleader"
)

const ttl = 10 * time.Second

func newBackend(t *testing.T) (*pgleader.Postgres, *pgtest.DB) {
	t.Helper()
	db := pgtest.New(t)
	return pgleader.NewPostgres(db.Pool), db
}

func mustAcquire(t *testing.T, b pgleader.Backend, key, owner string, ttl time.Duration) pgleader.Lease {
	t.Helper()
	l, ok, err := b.Campaign(context.Background(), key, pgleader.Candidate{Owner: owner}, ttl, 0)
	if err != nil {
		t.Fatalf("acquire %s by %s: %v", key, owner, err)
	}
	if !ok {
		t.Fatalf("acquire %s by %s: held by %s (token %d)", key, owner, l.Holder, l.Token)
	}
	return l
}

func mustRelease(t *testing.T, b pgleader.Backend, key, owner string, token int64) {
	t.Helper()
	ok, err := b.Release(context.Background(), key, owner, token)
	if err != nil || !ok {
		t.Fatalf("release %s/%s/%d = %v, %v; want true", key, owner, token, ok, err)
	}
}

func waitFree(t *testing.T, b pgleader.Backend, key string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		l, err := b.Lease(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if !l.Held() {
			return
		}
		time.Sleep(min(l.Remaining(), 20*time.Millisecond) + time.Millisecond)
	}
	t.Fatalf("lease %s still held after 30s", key)
}

// TestExpiryUsesDatabaseClock shows that expiry is decided by the database's
// clock at the moment each statement runs: a lease taken late in a long
// transaction expires TTL after that moment (clock_timestamp), not after the
// transaction's start (now()). That a candidate wins exactly when the
// backend's clock passes the reported expiry is in the contract suite
// (backendtest, subtest Expiry).
func TestExpiryUsesDatabaseClock(t *testing.T) {
	t.Parallel()
	_, db := newBackend(t)
	ctx := context.Background()

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.5)`); err != nil {
		t.Fatal(err)
	}
	inTx := pgleader.NewPostgres(tx)
	l := mustAcquire(t, inTx, "k", "a", 300*time.Millisecond)
	var txStart time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&txStart); err != nil {
		t.Fatal(err)
	}
	if !l.ExpiresAt.After(txStart.Add(500 * time.Millisecond)) {
		t.Fatalf("expiry %v is within 500ms of the transaction start %v: it used now()", l.ExpiresAt, txStart)
	}
	if _, err := inTx.Renew(ctx, "k", "a", l.Token, 300*time.Millisecond); err != nil {
		t.Fatalf("renew inside the long transaction: %v", err)
	}
	var holds bool
	if err := tx.QueryRow(ctx, `SELECT pgleader.holds('k', $1)`, l.Token).Scan(&holds); err != nil || !holds {
		t.Fatalf("holds inside the long transaction = %v, %v; want true", holds, err)
	}
}

// TestAdvanceAfterLostLeaseData: after the lease rows are deleted, the
// counter restarts at 0 and advance moves it past the store's floor. The
// rest of Advance's contract is in the suite (backendtest, subtest Advance).
func TestAdvanceAfterLostLeaseData(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t)
	ctx := context.Background()

	for i := 0; i < 3; i++ {
		l := mustAcquire(t, b, "k", "a", ttl)
		mustRelease(t, b, "k", "a", l.Token)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM pgleader.lease`); err != nil {
		t.Fatal(err)
	}
	if l, err := b.Lease(ctx, "k"); err != nil || l.Token != 0 {
		t.Fatalf("after losing the data: %+v, %v; want token 0", l, err)
	}
	ok, counter, err := b.Advance(ctx, "k", 50)
	if err != nil || !ok || counter != 50 {
		t.Fatalf("advance(50) = %v, %d, %v; want true, 50", ok, counter, err)
	}
	if l := mustAcquire(t, b, "k", "a", ttl); l.Token != 51 {
		t.Fatalf("token after advance(50) = %d, want 51", l.Token)
	}
}

// TestAcquireRace has 16 candidates on their own connections compete for one
// key, round after round; between rounds the winner releases or its lease
// expires. Every round must have exactly one winner at a time, and tokens
// must be dense: the next token for each winner, none repeated. The
// suite's race (backendtest, subtest AcquireRace) shares one pool; this one
// gives every candidate a session of its own, so the row lock decides.
func TestAcquireRace(t *testing.T) {
	t.Parallel()
	const (
		candidates = 16
		rounds     = 200
		expireTTL  = 300 * time.Millisecond
	)
	_, db := newBackend(t)
	ctx := context.Background()

	backends := make([]pgleader.Backend, candidates)
	for i := range backends {
		backends[i] = pgleader.NewPostgres(db.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 1 }))
		if _, err := backends[i].Lease(ctx, "k"); err != nil { // open the connection before racing
			t.Fatal(err)
		}
	}

	next := int64(1)
	for round := 0; round < rounds; round++ {
		byExpiry := round%4 == 3
		roundTTL := ttl
		if byExpiry {
			roundTTL = expireTTL
		}
		winner, w := racetest.Round(t, round, backends, "k", roundTTL, byExpiry, &next)
		if byExpiry {
			waitFree(t, backends[0], "k")
		} else {
			mustRelease(t, backends[0], "k", winner, w.Token)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t)
	ctx := context.Background()
	long := strings.Repeat("k", pgleader.MaxKeyLen+1)
	maxKey := strings.Repeat("k", pgleader.MaxKeyLen)

	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"acquire empty key", func() error { _, _, err := b.Acquire(ctx, "", "a", ttl); return err }, "key must not be empty"},
		{"acquire empty owner", func() error { _, _, err := b.Acquire(ctx, "k", "", ttl); return err }, "owner must not be empty"},
		{"acquire long key", func() error { _, _, err := b.Acquire(ctx, long, "a", ttl); return err }, "key is 201 bytes; the limit is 200"},
		{"acquire long owner", func() error { _, _, err := b.Acquire(ctx, "k", long, ttl); return err }, "owner is 201 bytes"},
		{"acquire zero ttl", func() error { _, _, err := b.Acquire(ctx, "k", "a", 0); return err }, "ttl must be at least 1µs"},
		{"acquire negative ttl", func() error { _, _, err := b.Acquire(ctx, "k", "a", -time.Second); return err }, "ttl must be at least"},
		{"acquire nanosecond ttl", func() error { _, _, err := b.Acquire(ctx, "k", "a", time.Nanosecond); return err }, "ttl must be at least"},
		{"acquire NUL in key", func() error { _, _, err := b.Acquire(ctx, "k\x00", "a", ttl); return err }, "valid UTF-8 without NUL"},
		{"acquire invalid UTF-8", func() error { _, _, err := b.Acquire(ctx, "k\xff", "a", ttl); return err }, "valid UTF-8"},
		{"renew empty key", func() error { _, err := b.Renew(ctx, "", "a", 1, ttl); return err }, "key must not be empty"},
		{"renew zero ttl", func() error { _, err := b.Renew(ctx, "k", "a", 1, 0); return err }, "ttl must be"},
		{"renew zero token", func() error { _, err := b.Renew(ctx, "k", "a", 0, ttl); return err }, "token must be positive"},
		{"release empty owner", func() error { _, err := b.Release(ctx, "k", "", 1); return err }, "owner must not be empty"},
		{"release negative token", func() error { _, err := b.Release(ctx, "k", "a", -1); return err }, "token must be positive"},
		{"lease long key", func() error { _, err := b.Lease(ctx, long); return err }, "limit is 200"},
		{"advance empty key", func() error { _, _, err := b.Advance(ctx, "", 5); return err }, "key must not be empty"},
		{"advance negative floor", func() error { _, _, err := b.Advance(ctx, "k", -1); return err }, "floor must not be negative"},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, pgleader.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v; want ErrInvalid containing %q", c.name, err, c.want)
		}
	}
	if l := mustAcquire(t, b, maxKey, "a", ttl); l.Token != 1 {
		t.Fatalf("a key of exactly %d bytes: token %d", pgleader.MaxKeyLen, l.Token)
	}

	// The SQL functions refuse the same input for callers that bypass Go.
	for _, q := range []string{
		`SELECT * FROM pgleader.acquire('', 'a', '1s')`,
		`SELECT * FROM pgleader.acquire('k', '', '1s')`,
		`SELECT * FROM pgleader.acquire(repeat('k', 201), 'a', '1s')`,
		`SELECT * FROM pgleader.acquire('k', 'a', '0s')`,
		`SELECT * FROM pgleader.acquire('k', 'a', '-1s')`,
		`SELECT pgleader.renew('k', 'a', 1, NULL)`,
		`SELECT * FROM pgleader.advance('k', -1)`,
	} {
		var pgErr *pgconn.PgError
		_, err := db.Pool.Exec(ctx, q)
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.HasPrefix(pgErr.Message, "pgleader: ") {
			t.Errorf("%s: err = %v; want SQLSTATE 22023 with a pgleader message", q, err)
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader.lease WHERE key = 'k'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused calls left %d rows, %v", n, err)
	}
}

func TestNotMigrated(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	b := pgleader.NewPostgres(db.Pool)
	ctx := context.Background()
	calls := map[string]func() error{
		"acquire": func() error { _, _, err := b.Acquire(ctx, "k", "a", ttl); return err },
		"renew":   func() error { _, err := b.Renew(ctx, "k", "a", 1, ttl); return err },
		"release": func() error { _, err := b.Release(ctx, "k", "a", 1); return err },
		"lease":   func() error { _, err := b.Lease(ctx, "k"); return err },
		"advance": func() error { _, _, err := b.Advance(ctx, "k", 1); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, pgleader.ErrNotMigrated) || !strings.Contains(err.Error(), "migrations.Up") {
			t.Errorf("%s on an unmigrated database: %v; want ErrNotMigrated naming migrations.Up", name, err)
		}
	}
}

func TestBackendInsideTransaction(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t)
	ctx := context.Background()

	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		mustAcquire(t, pgleader.NewPostgres(tx), "k", "a", ttl)
		return errors.New("roll back")
	})
	if err == nil {
		t.Fatal("BeginFunc: want the rollback error")
	}
	// Rolled back: the token was not consumed.
	if l := mustAcquire(t, b, "k", "a", ttl); l.Token != 1 {
		t.Fatalf("token after a rolled-back acquire = %d, want 1", l.Token)
	}
}
