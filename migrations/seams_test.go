package migrations_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// checkKeep is take with p_keep, as the Go successor sends it.
func checkKeep(t *testing.T, db *pgxpool.Pool, key, owner string) campaignResult {
	t.Helper()
	var r campaignResult
	err := db.QueryRow(context.Background(),
		`SELECT acquired, holder, token, expires_at, value FROM pgleader.take($1, $2, '10 seconds', '1 second')`,
		key, owner).Scan(&r.acquired, &r.holder, &r.token, &r.expires, &r.value)
	if err != nil {
		t.Fatalf("take(%s, %s, keep): %v", key, owner, err)
	}
	return r
}

// TestHandedOffRowNotConfirmedInGrace: after a failover that lost rows, the
// row left may hand a term to an owner that confirmed, led and handed it on
// already (b hands token 1 to c here; the rows after that are "lost").
// During the grace none of the three ways a successor confirms a term —
// campaign, take, take with keep — may confirm it: the owner would lead
// the token twice. After the grace the row is the new server's own.
func TestHandedOffRowNotConfirmedInGrace(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	campaign(t, db.Pool, "k", "b", "", 0, "10 seconds")
	campaign(t, db.Pool, "k", "c", "addr-c", 0, "30 seconds")
	if released, successor, _ := handOff(t, db.Pool, "k", "b", 1, nil); !released || str(successor) != "c" {
		t.Fatalf("hand_off = %v, %s; want c", released, str(successor))
	}
	forgetEpoch(t, db)

	for _, c := range []struct {
		how string
		do  func() campaignResult
	}{
		{"campaign", func() campaignResult { return campaign(t, db.Pool, "k", "c", "addr-c", 0, "30 seconds") }},
		{"take", func() campaignResult { return take(t, db.Pool, "k", "c") }},
		{"take with keep", func() campaignResult { return checkKeep(t, db.Pool, "k", "c") }},
	} {
		if r := c.do(); r.acquired {
			t.Errorf("%s by c in the grace confirmed token %d; want not acquired", c.how, r.token)
		}
	}
	if l := readLease(t, db.Pool, "k"); !l.handedOff || str(l.holder) != "c" {
		t.Fatalf("row after the grace's checks: holder %s, handed_off %v; want c, still handed off", str(l.holder), l.handedOff)
	}

	endGrace(t, db)
	if r := checkKeep(t, db.Pool, "k", "c"); !r.acquired || r.token != 2 {
		t.Fatalf("take with keep by c after the grace = %+v; want token 2 acquired", r)
	}
}

// TestSettingsWaitForOpenLeaseOperations: a setter and a lease operation
// that reads the setting are serialized. A transaction that acquired with
// a 60 s TTL and is still open keeps max_ttl from dropping to 2 s (the
// setter waits, then finds the term and refuses); a setter's open
// transaction makes an acquire wait and then refuse a TTL above the new max_ttl. Without it a
// 60 s term commits under a 2 s max_ttl, and the grace after a failover
// would be 2 s.
func TestSettingsWaitForOpenLeaseOperations(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	a := db.Conn(t)
	mustExec(t, a, `BEGIN`)
	if r := acquire(t, a, "k", "a", "60 seconds"); !r.acquired {
		t.Fatalf("acquire = %+v", r)
	}
	setter := db.Conn(t)
	pid := backendPID(t, setter)
	done := make(chan error, 1)
	go func() {
		_, err := setter.Exec(ctx, `SELECT pgleader.set_max_ttl('2 seconds')`)
		done <- err
	}()
	waitSleeping(t, db.Pool, pid)
	mustExec(t, a, `COMMIT`)
	select {
	case err := <-done:
		wantCode(t, "set_max_ttl after a 60 s term committed", err, "55000", "below the TTL")
	case <-time.After(waitTimeout):
		t.Fatal("set_max_ttl did not return")
	}
	if m := maxTTL(t, db.Pool); m != 10*time.Minute {
		t.Fatalf("max_ttl = %v; want 10m unchanged", m)
	}

	// The other order: the setter's transaction first.
	mustExec(t, setter, `BEGIN`)
	mustExec(t, setter, `SELECT pgleader.set_max_ttl('2 minutes')`)
	b := db.Conn(t)
	bpid := backendPID(t, b)
	go func() {
		_, err := b.Exec(ctx, `SELECT pgleader.acquire('j', 'b', '3 minutes')`)
		done <- err
	}()
	waitLockWait(t, db.Pool, bpid)
	mustExec(t, setter, `COMMIT`)
	select {
	case err := <-done:
		wantCode(t, "acquire after max_ttl 2 min committed", err, "22023", "exceeds max_ttl")
	case <-time.After(waitTimeout):
		t.Fatal("acquire did not return")
	}
}

// TestSettersGiveUpOnALongTransaction: a setter does not queue behind a
// lease operation's open transaction (a queued lock would hold up every
// other lease operation behind it): it fails with 55P03 and changes
// nothing, while other lease operations go on.
func TestSettersGiveUpOnALongTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	a := db.Conn(t)
	mustExec(t, a, `BEGIN`)
	acquire(t, a, "k", "a", "10 seconds")
	defer mustExec(t, a, `ROLLBACK`)

	errs := make(chan error, 2)
	for _, sql := range []string{`SELECT pgleader.set_max_ttl('1 minute')`, `SELECT pgleader.set_max_clock_offset('2 seconds')`} {
		go func() {
			_, err := db.Pool.Exec(ctx, sql)
			errs <- err
		}()
	}
	// While the setters try, another lease operation is not held up.
	for range 3 {
		if r := acquire(t, db.Pool, "other", "b", "10 seconds"); !r.acquired && r.holder != "b" {
			t.Fatalf("acquire of another key while setters try = %+v", r)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for range 2 {
		wantCode(t, "a setter beside an open acquire", <-errs, "55P03", "settings are in use")
	}
	var ttl, offset time.Duration
	if err := db.Pool.QueryRow(ctx, `SELECT max_ttl, max_clock_offset FROM pgleader.settings`).Scan(&ttl, &offset); err != nil {
		t.Fatal(err)
	}
	if ttl != 10*time.Minute || offset != time.Second {
		t.Fatalf("settings = %v, %v; want 10m, 1s unchanged", ttl, offset)
	}
}

// TestSetTermCarriesNoElectorLeftovers: a key an elector held and handed
// off, whose successor never confirmed, is then won by a set member. The
// set's term must not show the successor's address, nor be marked handed
// off (else take by the set's owner name would confirm it as an elector's
// term); and release_many clears what a resign or transfer marked.
func TestSetTermCarriesNoElectorLeftovers(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	campaign(t, db.Pool, "k", "a", "addr-a", 5, "10 seconds")
	campaign(t, db.Pool, "k", "s", "addr-c", 7, "300 milliseconds")
	if _, successor, _ := handOff(t, db.Pool, "k", "a", 1, nil); str(successor) != "s" {
		t.Fatalf("hand_off to %s; want s", str(successor))
	}
	time.Sleep(400 * time.Millisecond) // the unconfirmed term expires

	var tok int64
	if err := db.Pool.QueryRow(ctx, `SELECT token FROM pgleader.acquire_many('{k}', 's', '10 seconds', 1)`).Scan(&tok); err != nil {
		t.Fatal(err)
	}
	var value, transfer *string
	var handed bool
	var priority int
	var resign *int64
	row := func() {
		t.Helper()
		err := db.Pool.QueryRow(ctx, `SELECT value, handed_off, priority, transfer_to, resign_token FROM pgleader.lease WHERE key = 'k'`).
			Scan(&value, &handed, &priority, &transfer, &resign)
		if err != nil {
			t.Fatal(err)
		}
	}
	row()
	if value != nil || handed || priority != 0 || transfer != nil || resign != nil {
		t.Fatalf("set's term: value %s, handed_off %v, priority %d, transfer_to %s, resign_token %v; want none of an elector's",
			str(value), handed, priority, str(transfer), resign)
	}
	if r := take(t, db.Pool, "k", "s"); r.acquired {
		t.Fatal("take by the set's owner confirmed the set's term as an elector's")
	}

	campaign(t, db.Pool, "k", "c", "", 0, "10 seconds")
	mustExec(t, db.Pool, `SELECT * FROM pgleader.transfer('k', 'c')`)
	var released []string
	if err := db.Pool.QueryRow(ctx, `SELECT array_agg(key) FROM pgleader.release_many('s', '{k}', ARRAY[$1::bigint])`, tok).Scan(&released); err != nil {
		t.Fatal(err)
	}
	if len(released) != 1 {
		t.Fatalf("release_many released %v", released)
	}
	row()
	if value != nil || handed || transfer != nil || resign != nil {
		t.Fatalf("after release_many: value %s, handed_off %v, transfer_to %s, resign_token %v; want cleared",
			str(value), handed, str(transfer), resign)
	}
}

// TestGuardDoesNotNoticeInCallerTransaction: the first pgleader call after
// a failover notices it (server_epoch, the next token epoch, a lock on
// every lease row). When that call is a lease_guard at the start of an
// application's long transaction, every other lease operation would wait
// for that transaction. The guard must not notice; a holder's renewal in
// its own transaction goes through at once and notices.
func TestGuardDoesNotNoticeInCallerTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	x := acquire(t, db.Pool, "a", "x", "10 seconds")
	y := acquire(t, db.Pool, "b", "y", "10 seconds")
	forgetEpoch(t, db)

	app := db.Conn(t)
	mustExec(t, app, `BEGIN`)
	mustExec(t, app, `SELECT pgleader.lease_guard('b', $1)`, y.token)
	defer mustExec(t, app, `COMMIT`)

	c, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	mustExec(t, c, `SET statement_timeout = '3s'`)
	defer mustExec(t, c, `RESET statement_timeout`)
	var expires *time.Time
	err = c.QueryRow(ctx, `SELECT expires_at FROM pgleader.renew_term('a', 'x', $1, '10 seconds')`, x.token).Scan(&expires)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "57014" {
		t.Fatal("x's renewal waited for the application's transaction until statement_timeout")
	}
	if err != nil || expires == nil {
		t.Fatalf("x's renewal beside the guarded transaction: expires %v, err %v; want renewed", expires, err)
	}
	if e := epoch(t, db); e != 1 {
		t.Fatalf("epoch after the renewal = %d; want 1 (the renewal noticed)", e)
	}
}

// waitSleeping polls until backend pid sleeps in pg_sleep (a setter
// trying for the settings lock).
func waitSleeping(t *testing.T, db *pgxpool.Pool, pid int32) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var ev *string
		if err := db.QueryRow(context.Background(), `SELECT wait_event FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&ev); err != nil {
			t.Fatal(err)
		}
		if ev != nil && *ev == "PgSleep" {
			return
		}
	}
	t.Fatalf("backend %d did not sleep within %v", pid, waitTimeout)
}

func maxTTL(t *testing.T, db *pgxpool.Pool) time.Duration {
	t.Helper()
	var d time.Duration
	if err := db.QueryRow(context.Background(), `SELECT max_ttl FROM pgleader.settings`).Scan(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSettingsOutsideReadCommitted: a REPEATABLE READ transaction's
// snapshot may predate a setter's commit, and the advisory lock does not
// help there (the setter committed before the lease operation asked for
// it). The lease operation must not decide with the settings its snapshot
// shows: it reads the settings row FOR SHARE, which fails with a
// serialization error when the row changed after the snapshot.
func TestSettingsOutsideReadCommitted(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	rr := db.Conn(t)
	mustExec(t, rr, `BEGIN ISOLATION LEVEL REPEATABLE READ`)
	defer mustExec(t, rr, `ROLLBACK`)
	mustExec(t, rr, `SELECT 1 FROM pgleader.lease LIMIT 1`) // takes the snapshot
	mustExec(t, db.Pool, `SELECT pgleader.set_max_ttl('2 minutes')`)
	_, err := rr.Exec(ctx, `SELECT pgleader.acquire('k', 'a', '3 minutes')`)
	wantCode(t, "a 3 minute acquire in a snapshot from before max_ttl became 2 minutes", err, "40001", "")
}
