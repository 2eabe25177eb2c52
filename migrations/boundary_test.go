package migrations_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// TestSettingsSerializedWhenTheAdvisoryLockIsTaken: any role that can
// connect can take the settings' advisory lock. A lease operation that
// finds it held exclusively does not wait for it (else such a session
// would stall every lease operation): it reads the settings row FOR SHARE
// instead. The setters' serialization must still hold: here an
// acquire with a 60 s TTL runs while a hostile session holds the advisory
// lock, its transaction stays open, the hostile session lets go, and a
// setter lowering max_ttl to 2 s must wait for that transaction (it tries
// for the settings row, for up to 5 s) and then refuse. Were the fallback
// a plain read, the setter would find no term, and a 60 s term would
// commit under a 2 s max_ttl.
func TestSettingsSerializedWhenTheAdvisoryLockIsTaken(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, hostileURL := db.NewRole(t, "")
	_, appURL := db.NewRole(t, "SELECT pgleader.grant_usage($1)")

	hostile := connect(t, hostileURL)
	mustExec(t, hostile, `SELECT pg_advisory_lock(1885826148, 1)`)

	app := connect(t, appURL)
	mustExec(t, app, `BEGIN`)
	actx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	var acquired bool
	if err := app.QueryRow(actx, `SELECT acquired FROM pgleader.acquire('k', 'a', '60 seconds')`).Scan(&acquired); err != nil || !acquired {
		t.Fatalf("acquire while another session holds the settings' advisory lock: %v, %v", acquired, err)
	}
	mustExec(t, hostile, `SELECT pg_advisory_unlock(1885826148, 1)`)

	setter := db.Conn(t)
	pid := backendPID(t, setter)
	done := make(chan error, 1)
	go func() {
		_, err := setter.Exec(ctx, `SELECT pgleader.set_max_ttl('2 seconds')`)
		done <- err
	}()
	waitAdvisoryHeld(t, db.Pool, pid) // then it tries for the settings row, which the open acquire reads
	mustExec(t, app, `COMMIT`)
	select {
	case err := <-done:
		wantCode(t, "set_max_ttl after a 60 s term committed", err, "55000", "below the TTL")
	case <-time.After(waitTimeout):
		t.Fatal("set_max_ttl did not return")
	}
	if m := maxTTL(t, db.Pool); m != 10*time.Minute {
		t.Fatalf("max_ttl = %v; want 10m unchanged", m)
	}
}

// connect opens a connection with url, closed when the test ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestGrantUsageTakesBackMore: grant_usage leaves a role exactly what an
// application needs, whatever it had before in the schema: here the
// owner first gives it what grant_usage used to give (SELECT, INSERT,
// UPDATE on the tables, EXECUTE on every function, _epoch_bump
// included), and after grant_usage the role has no privilege on any table,
// EXECUTE on the application's functions and on nothing else.
func TestGrantUsageTakesBackMore(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	role, _ := db.NewRole(t, "")
	r := pgx.Identifier{role}.Sanitize()
	mustExec(t, db.Pool, `GRANT USAGE ON SCHEMA pgleader TO `+r)
	mustExec(t, db.Pool, `GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA pgleader TO `+r)
	mustExec(t, db.Pool, `GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgleader TO `+r)
	wrong := func() []string {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `
			SELECT c.relname || ' ' || p.priv
			  FROM pg_class AS c, unnest(ARRAY['SELECT','INSERT','UPDATE','DELETE','TRUNCATE','REFERENCES','TRIGGER']) AS p(priv)
			 WHERE c.relnamespace = 'pgleader'::regnamespace AND c.relkind = 'r' AND has_table_privilege($1, c.oid, p.priv)
			UNION ALL
			SELECT 'EXECUTE ' || f.oid::regprocedure::text
			  FROM pg_proc AS f
			 WHERE f.pronamespace = 'pgleader'::regnamespace
			   AND has_function_privilege($1, f.oid, 'EXECUTE') <> (f.oid IN (SELECT * FROM pgleader._app_functions()))`, role)
		if err != nil {
			t.Fatal(err)
		}
		w, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	if before := wrong(); !slices.Contains(before, "lease UPDATE") || !slices.Contains(before, "EXECUTE pgleader._epoch_bump()") {
		t.Fatalf("before grant_usage the role has, or lacks, %v; the test needs it to update pgleader.lease and execute _epoch_bump", before)
	}
	mustExec(t, db.Pool, `SELECT pgleader.grant_usage($1)`, role)
	if after := wrong(); len(after) > 0 {
		t.Fatalf("after grant_usage the role has, or lacks, %v", after)
	}
	var apps int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader._app_functions() AS f WHERE has_function_privilege($1, f, 'EXECUTE')`, role).Scan(&apps); err != nil || apps < 30 {
		t.Fatalf("the role may execute %d application functions (%v); want all of them (30 or more)", apps, err)
	}
}

// TestGroupRole: replicas that log in with roles of their own and SET ROLE
// to a group role they are members of act as the group: a key one of them
// acquired is the group's, and another member takes it over after it. A
// member that did not SET ROLE still acts on the group's keys (it could
// SET ROLE to the group anyway); a role outside the group may not.
func TestGroupRole(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	group, _ := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	outsider, outsiderURL := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	m1, url1 := db.NewRole(t, "")
	m2, url2 := db.NewRole(t, "")
	for _, m := range []string{m1, m2} {
		mustExec(t, db.Pool, "GRANT "+pgx.Identifier{group}.Sanitize()+" TO "+pgx.Identifier{m}.Sanitize())
	}
	asGroup := func(u string) *pgx.Conn {
		c := connect(t, u)
		mustExec(t, c, "SET ROLE "+pgx.Identifier{group}.Sanitize())
		return c
	}
	r1, r2 := asGroup(url1), asGroup(url2)
	if r := acquire(t, r1, "k", "r1", "1 minute"); !r.acquired {
		t.Fatalf("acquire by member %s as the group = %+v", m1, r)
	}
	var role string
	if err := db.Pool.QueryRow(ctx, `SELECT role FROM pgleader.lease WHERE key = 'k'`).Scan(&role); err != nil || role != group {
		t.Fatalf("the key belongs to %q (%v); want the group %s", role, err, group)
	}
	mustExec(t, r1, `SELECT pgleader.release('k', 'r1', 1)`)
	if r := acquire(t, r2, "k", "r2", "1 minute"); !r.acquired || r.token != 2 {
		t.Fatalf("acquire by member %s as the group after r1's release = %+v; want token 2", m2, r)
	}
	// A member without SET ROLE: the group's key is its group's.
	plain := connect(t, url1)
	var exp *time.Time
	if err := plain.QueryRow(ctx, `SELECT pgleader.renew('k', 'r2', 2, '1 minute')`).Scan(&exp); err != nil || exp == nil {
		t.Fatalf("renewal by member %s without SET ROLE: %v, %v; want the group's term renewed", m1, exp, err)
	}
	// A role outside the group may not.
	_, err := connect(t, outsiderURL).Exec(ctx, `SELECT pgleader.release('k', 'r2', 2)`)
	wantCode(t, "release of the group's key by "+outsider, err, "42501", "belongs to role")
}

// TestSetStatusPerRole: two roles run sets of the same name with replicas
// of the same name. Each role's set_status lists its own member only; the
// schema's owner, naming one role's keys, sees that role's member with its
// own count (not the two merged), and naming none, every role's.
func TestSetStatusPerRole(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, urlA := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	_, urlB := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	a, b := connect(t, urlA), connect(t, urlB)
	join := func(c *pgx.Conn, keys []string) {
		t.Helper()
		var got []string
		if err := c.QueryRow(ctx, `SELECT keys FROM pgleader.set_acquire('s', 'replica-0', $1, '1 minute', 0)`, keys).Scan(&got); err != nil || len(got) != len(keys) {
			t.Fatalf("set_acquire %v = %v, %v", keys, got, err)
		}
		tokens := make([]int64, len(keys))
		for i := range tokens {
			tokens[i] = 1
		}
		mustExec(t, c, `SELECT pgleader.set_renew('s', 'replica-0', $1, $2, '1 minute', $3)`, keys, tokens, len(keys))
	}
	join(a, []string{"a1", "a2"})
	join(b, []string{"b1", "b2", "b3"})
	status := func(c interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, keys []string) string {
		t.Helper()
		var s string
		if err := c.QueryRow(ctx, `SELECT string_agg(owner || ' member=' || member || ' reported=' || coalesce(member_held::text, '-') || ' holds=' || leases, '; ' ORDER BY owner)
			FROM pgleader.set_status('s', $1)`, keys).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, c := range []struct {
		what string
		got  string
		want string
	}{
		{"A's view of its keys", status(a, []string{"a1", "a2"}), "replica-0 member=true reported=2 holds=2"},
		{"B's view of its keys", status(b, []string{"b1", "b2", "b3"}), "replica-0 member=true reported=3 holds=3"},
		{"the owner's view of A's keys", status(db.Pool, []string{"a1", "a2"}), "replica-0 member=true reported=2 holds=2"},
		{"the owner's view of B's keys", status(db.Pool, []string{"b1", "b2", "b3"}), "replica-0 member=true reported=3 holds=3"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q; want %q", c.what, c.got, c.want)
		}
	}
}

// TestSetterDoesNotStallLeaseOperations: a lease operation that read the
// settings row FOR SHARE (because another session held the settings'
// advisory lock at that moment) and whose transaction stays open must not
// let a setter stall every other lease operation. The setter holds the
// advisory lock exclusively while it tries for the row; were it to queue
// for the row lock, every later lease operation would fall back to the row
// and queue behind it, for as long as that transaction stays open. It must
// give up instead (55P03, as when lease operations hold the advisory lock)
// while the others go on.
func TestSetterDoesNotStallLeaseOperations(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, hostileURL := db.NewRole(t, "")
	_, appURL := db.NewRole(t, "SELECT pgleader.grant_usage($1)")

	hostile := connect(t, hostileURL)
	mustExec(t, hostile, `SELECT pg_advisory_lock(1885826148, 1)`)
	long := connect(t, appURL)
	mustExec(t, long, `BEGIN`)
	if r := acquire(t, long, "long", "a", "1 minute"); !r.acquired {
		t.Fatalf("acquire in the long transaction = %+v", r)
	}
	mustExec(t, hostile, `SELECT pg_advisory_unlock(1885826148, 1)`)
	defer mustExec(t, long, `ROLLBACK`)

	setter := db.Conn(t)
	done := make(chan error, 1)
	go func() {
		_, err := setter.Exec(ctx, `SELECT pgleader.set_max_ttl('2 minutes')`)
		done <- err
	}()
	// While the setter tries, other lease operations go on.
	app := connect(t, appURL)
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		actx, cancel := context.WithTimeout(ctx, waitTimeout)
		var acquired bool
		err := app.QueryRow(actx, `SELECT acquired FROM pgleader.acquire('other', 'b', '1 minute')`).Scan(&acquired)
		cancel()
		if err != nil {
			t.Fatalf("acquire %d of another key while the setter tries: %v", i, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case err := <-done:
		wantCode(t, "set_max_ttl beside an open lease operation that read the settings row", err, "55P03", "settings are in use")
	case <-time.After(waitTimeout):
		t.Fatal("set_max_ttl did not return")
	}
	if m := maxTTL(t, db.Pool); m != 10*time.Minute {
		t.Fatalf("max_ttl = %v; want 10m unchanged", m)
	}
}

// waitAdvisoryHeld waits until backend pid holds the settings' advisory lock
// exclusively: a setter that has it tries for the settings row next.
func waitAdvisoryHeld(t *testing.T, db *pgxpool.Pool, pid int32) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var held bool
		if err := db.QueryRow(context.Background(), `
			SELECT EXISTS (SELECT 1 FROM pg_locks
			                WHERE pid = $1 AND locktype = 'advisory' AND classid = 1885826148 AND objid = 1
			                  AND mode = 'ExclusiveLock' AND granted)`, pid).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held {
			return
		}
	}
	t.Fatalf("backend %d did not take the settings' advisory lock within %v", pid, waitTimeout)
}
