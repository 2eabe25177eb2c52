package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// The hostile-role suite. A role H, granted only what pgleader.grant_usage
// grants, attacks a victim role V that holds a lease, has a candidate
// registered, owns a fence resource and is a member of a set. H calls every
// function of the schema with hostile arguments, touches every table
// directly, tries DDL, and holds the settings' advisory lock. After each
// attempt, read by the schema's owner: no token and no fence went down, the
// epoch and the settings did not move, no lease, candidate or set
// membership expires beyond max_ttl, the catalog (owners, privileges,
// functions, triggers, constraints) is as it was, and V's rows are exactly
// as they were. H may change only its own rows (role H) and rows that belong
// to nobody yet.

// hostileTimeout bounds every statement of the suite. It detects a hang on a
// busy machine; it is not a timing assertion.
const hostileTimeout = 20 * time.Second

// The victim's and the hostile role's names for things.
const (
	victimKey       = "victim"     // V's lease, held
	victimHolder    = "v-1"        // the replica of V that holds it
	victimCandidate = "v-2"        // a second replica of V, a candidate on victimKey
	victimRes       = "victim-res" // V's fence resource, claimed at token 7
	victimSet       = "victim-set" // V's set
	victimSetKey    = "victim-s1"  // a key V holds through its set
	victimHanded    = "victim-s2"  // a key of V's set handed to victimCandidate, unconfirmed
	hostileKey      = "h-own"      // H's own lease
	hostileHolder   = "h-1"
	hostileRes      = "h-res"
	hostileSet      = "h-set"
	victimFence     = 7
)

// settingsLockClassID and settingsLockObjID are the settings' advisory lock
// (pgleader._settings_lock()).
const (
	settingsLockClassID = 1885826148
	settingsLockObjID   = 1
)

// hostileEnv is one database with a victim role V and a hostile role H, both
// granted with pgleader.grant_usage, and a connection as each.
type hostileEnv struct {
	db     *pgtest.DB
	schema string // "the schema", or the control's mutation of it
	v, h   string // role names
	hURL   string
	vc, hc *pgx.Conn

	// What H reads about the victim through pgleader.lease().
	token    int64 // victimKey's token
	setToken int64 // victimSetKey's token
	hToken   int64 // H's own token on hostileKey
}

func newHostileEnv(t *testing.T, db *pgtest.DB, schema string) *hostileEnv {
	t.Helper()
	e := &hostileEnv{db: db, schema: schema}
	var vURL string
	e.v, vURL = db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	e.h, e.hURL = db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	e.vc = hostileConnect(t, vURL)
	e.hc = hostileConnect(t, e.hURL)
	return e
}

func hostileConnect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// seed gives V a held lease with a candidate, a fence resource, a set
// membership and a key held through the set; and H a lease, a resource and
// a set membership of its own. H then reads the victim's token the way an
// attacker would, through pgleader.lease().
func (e *hostileEnv) seed(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, s := range []struct {
		c    *pgx.Conn
		sql  string
		args []any
	}{
		// Floor 6: the victim's token is 7.
		{e.vc, `SELECT pgleader.acquire($1, $2, '5 minutes', 6)`, []any{victimKey, victimHolder}},
		{e.vc, `SELECT pgleader.campaign($1, $2, '5 minutes', 0, 'second replica', 5, '5 minutes')`, []any{victimKey, victimCandidate}},
		{e.vc, `SELECT pgleader.fence_claim($1, $2)`, []any{victimRes, victimFence}},
		{e.vc, `SELECT pgleader.set_renew($1, $2, '{}', '{}', '5 minutes', 1)`, []any{victimSet, victimHolder}},
		{e.vc, `SELECT pgleader.set_acquire($1, $2, ARRAY[$3], '5 minutes', 0)`, []any{victimSet, victimHolder, victimSetKey}},
		// A second key of V's set, handed by V's member to its other
		// member, victimCandidate, and not yet confirmed.
		{e.vc, `SELECT pgleader.set_renew($1, $2, '{}', '{}', '5 minutes', 0)`, []any{victimSet, victimCandidate}},
		{e.vc, `SELECT pgleader.set_acquire($1, $2, ARRAY[$3], '5 minutes', 1, 1)`, []any{victimSet, victimHolder, victimHanded}},
		{e.vc, `SELECT pgleader.set_release($1, $2, ARRAY[$3], ARRAY[(SELECT token FROM pgleader.lease($3))], false, '{true}')`,
			[]any{victimSet, victimHolder, victimHanded}},
		// A scheduled job on V's key, with a run V's term claimed.
		{e.vc, `SELECT pgleader.job_schedule($1, 'every 1h', NULL)`, []any{victimKey}},
		{e.vc, `SELECT * FROM pgleader.job_claim($1, now() - interval '1 minute', $2, 7)`, []any{victimKey, victimHolder}},
		{e.hc, `SELECT pgleader.acquire($1, $2, '5 minutes')`, []any{hostileKey, hostileHolder}},
		{e.hc, `SELECT pgleader.fence_claim($1, 1)`, []any{hostileRes}},
		{e.hc, `SELECT pgleader.set_renew($1, $2, '{}', '{}', '5 minutes', 0)`, []any{hostileSet, hostileHolder}},
	} {
		if _, err := s.c.Exec(ctx, s.sql, s.args...); err != nil {
			t.Fatalf("seed: %s %v: %v", s.sql, s.args, err)
		}
	}
	var holder *string
	if err := e.hc.QueryRow(ctx, `SELECT holder, token FROM pgleader.lease($1)`, victimKey).Scan(&holder, &e.token); err != nil {
		t.Fatalf("lease(%s) as H: %v", victimKey, err)
	}
	if holder == nil || *holder != victimHolder || e.token != victimFence {
		t.Fatalf("lease(%s) as H = %v, %d; want %s, %d (the set-up did not give V its lease)", victimKey, holder, e.token, victimHolder, victimFence)
	}
	if err := e.hc.QueryRow(ctx, `SELECT holder, token FROM pgleader.lease($1)`, victimSetKey).Scan(&holder, &e.setToken); err != nil || holder == nil || *holder != victimHolder {
		t.Fatalf("lease(%s) as H = %v, %d, %v; want V's set to hold it", victimSetKey, holder, e.setToken, err)
	}
	if err := e.hc.QueryRow(ctx, `SELECT holder, token FROM pgleader.lease($1)`, hostileKey).Scan(&holder, &e.hToken); err != nil || holder == nil || *holder != hostileHolder {
		t.Fatalf("lease(%s) as H = %v, %d, %v; want H to hold it", hostileKey, holder, e.hToken, err)
	}
	var n int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pgleader.candidate WHERE key = $1 AND owner = $2`, victimKey, victimCandidate).Scan(&n); err != nil || n != 1 {
		t.Fatalf("V's candidate on %s: %d rows, %v; want 1", victimKey, n, err)
	}
}

// hostileRow is one row of a table, as the owner reads it.
type hostileRow struct {
	role     string // the row's role; for a candidate, its key's; "" when nobody's
	token    int64  // lease and fence: token
	tokenMin int64  // lease: token_min (0 when NULL)
	row      string // every column, as JSON
}

// hostileState is what check compares: the tables' rows, the settings, what
// expires beyond max_ttl, and catalog facts.
type hostileState struct {
	leases, fences, candidates, members map[string]hostileRow
	jobs, runs                          map[string]hostileRow
	epoch                               int64
	settings                            string // settings, server_epoch and steerer rows
	overTTL                             []string
	catalog                             []string
}

const hostileCatalogSQL = `
SELECT format('schema %s owner=%s acl=%s', n.nspname, pg_get_userbyid(n.nspowner), n.nspacl)
  FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pgleader'
UNION ALL
SELECT format('relation %s kind=%s owner=%s acl=%s rls=%s/%s options=%s columns=%s', c.oid::regclass, c.relkind,
              pg_get_userbyid(c.relowner), c.relacl, c.relrowsecurity, c.relforcerowsecurity, c.reloptions,
              (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                                 || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
                                 || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), ''), ', ' ORDER BY a.attnum)
                 FROM pg_catalog.pg_attribute AS a
                 LEFT JOIN pg_catalog.pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped))
  FROM pg_catalog.pg_class AS c WHERE c.relnamespace = 'pgleader'::regnamespace
UNION ALL
SELECT format('function %s owner=%s acl=%s security_definer=%s config=%s source=%s', p.oid::regprocedure,
              pg_get_userbyid(p.proowner), p.proacl, p.prosecdef, p.proconfig, md5(p.prosrc))
  FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'pgleader'::regnamespace
UNION ALL
SELECT format('trigger %s on %s enabled=%s %s', tg.tgname, tg.tgrelid::regclass, tg.tgenabled, pg_get_triggerdef(tg.oid))
  FROM pg_catalog.pg_trigger AS tg JOIN pg_catalog.pg_class AS c ON c.oid = tg.tgrelid
 WHERE c.relnamespace = 'pgleader'::regnamespace
UNION ALL
SELECT format('constraint %s on %s %s', co.conname, co.conrelid::regclass, pg_get_constraintdef(co.oid))
  FROM pg_catalog.pg_constraint AS co WHERE co.connamespace = 'pgleader'::regnamespace
UNION ALL
SELECT format('rule %s on %s', r.rulename, r.ev_class::regclass)
  FROM pg_catalog.pg_rewrite AS r JOIN pg_catalog.pg_class AS c ON c.oid = r.ev_class
 WHERE c.relnamespace = 'pgleader'::regnamespace
UNION ALL
SELECT format('policy %s on %s', po.polname, po.polrelid::regclass)
  FROM pg_catalog.pg_policy AS po JOIN pg_catalog.pg_class AS c ON c.oid = po.polrelid
 WHERE c.relnamespace = 'pgleader'::regnamespace
UNION ALL
SELECT format('comment on %s %s: %s', d.classoid::regclass, d.objoid, d.description)
  FROM pg_catalog.pg_description AS d
 WHERE (d.classoid = 'pg_catalog.pg_class'::regclass
        AND d.objoid IN (SELECT c.oid FROM pg_catalog.pg_class AS c WHERE c.relnamespace = 'pgleader'::regnamespace))
    OR (d.classoid = 'pg_catalog.pg_proc'::regclass
        AND d.objoid IN (SELECT p.oid FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'pgleader'::regnamespace))
    OR (d.classoid = 'pg_catalog.pg_namespace'::regclass AND d.objoid = 'pgleader'::regnamespace)
UNION ALL
SELECT format('role %s super=%s createrole=%s createdb=%s bypassrls=%s member_of=%s', r.rolname, r.rolsuper,
              r.rolcreaterole, r.rolcreatedb, r.rolbypassrls,
              ARRAY(SELECT b.rolname::text FROM pg_catalog.pg_auth_members AS m JOIN pg_catalog.pg_roles AS b ON b.oid = m.roleid
                     WHERE m.member = r.oid ORDER BY 1))
  FROM pg_catalog.pg_roles AS r WHERE r.rolname IN ($1, $2)
UNION ALL
SELECT format('role %s config=%s', r.rolname, r.rolconfig) FROM pg_catalog.pg_roles AS r WHERE r.rolname = $1
ORDER BY 1`

// overTTLSQL lists every lease, candidate and set membership that expires
// beyond max_ttl: a lease beyond its renewal plus max_ttl or now plus
// max_ttl, a candidate or a membership beyond now plus max_ttl.
const overTTLSQL = `
SELECT format('lease %s expires at %s, renewed at %s: beyond max_ttl %s', to_json(l.key), l.expires_at, l.renewed_at, l.m)
  FROM (SELECT x.*, (SELECT s.max_ttl FROM pgleader.settings AS s LIMIT 1) AS m FROM pgleader.lease AS x) AS l
 WHERE l.expires_at IS NOT NULL
   AND (l.renewed_at IS NULL OR l.expires_at > l.renewed_at + l.m OR l.expires_at > clock_timestamp() + l.m)
UNION ALL
SELECT format('candidate %s of key %s expires at %s: beyond max_ttl %s from now', to_json(c.owner), to_json(c.key), c.expires_at, c.m)
  FROM (SELECT x.*, (SELECT s.max_ttl FROM pgleader.settings AS s LIMIT 1) AS m FROM pgleader.candidate AS x) AS c
 WHERE c.expires_at > clock_timestamp() + c.m
UNION ALL
SELECT format('set member %s of set %s (role %s) expires at %s: beyond max_ttl %s from now', to_json(m.owner), to_json(m.set_name), m.role, m.expires_at, m.m)
  FROM (SELECT x.*, (SELECT s.max_ttl FROM pgleader.settings AS s LIMIT 1) AS m FROM pgleader.set_member AS x) AS m
 WHERE m.expires_at > clock_timestamp() + m.m
ORDER BY 1`

// snapshot reads the state as the schema's owner, in one round trip.
func (e *hostileEnv) snapshot(t *testing.T) *hostileState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
	defer cancel()
	s := &hostileState{
		leases: map[string]hostileRow{}, fences: map[string]hostileRow{},
		candidates: map[string]hostileRow{}, members: map[string]hostileRow{},
		jobs: map[string]hostileRow{}, runs: map[string]hostileRow{},
	}
	rowsInto := func(m map[string]hostileRow) func(pgx.Rows) error {
		return func(rows pgx.Rows) error {
			for rows.Next() {
				var id string
				var r hostileRow
				if err := rows.Scan(&id, &r.role, &r.token, &r.tokenMin, &r.row); err != nil {
					return err
				}
				m[id] = r
			}
			return rows.Err()
		}
	}
	linesInto := func(dst *[]string) func(pgx.Rows) error {
		return func(rows pgx.Rows) error {
			for rows.Next() {
				var l string
				if err := rows.Scan(&l); err != nil {
					return err
				}
				*dst = append(*dst, l)
			}
			return rows.Err()
		}
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT l.key, coalesce(l.role, ''), l.token, coalesce(l.token_min, 0), to_jsonb(l)::text FROM pgleader.lease AS l`).
		Query(rowsInto(s.leases))
	b.Queue(`SELECT f.resource, coalesce(f.role, ''), f.token, 0::bigint, to_jsonb(f)::text FROM pgleader.fence AS f`).
		Query(rowsInto(s.fences))
	b.Queue(`SELECT json_build_array(c.key, c.owner)::text, coalesce(l.role, ''), 0::bigint, 0::bigint, to_jsonb(c)::text
	           FROM pgleader.candidate AS c LEFT JOIN pgleader.lease AS l ON l.key = c.key`).
		Query(rowsInto(s.candidates))
	b.Queue(`SELECT json_build_array(m.set_name, m.role, m.owner)::text, m.role, 0::bigint, 0::bigint, to_jsonb(m)::text
	           FROM pgleader.set_member AS m`).
		Query(rowsInto(s.members))
	b.Queue(`SELECT j.name, j.role, 0::bigint, 0::bigint, to_jsonb(j)::text FROM pgleader.job AS j`).
		Query(rowsInto(s.jobs))
	// A run is its job's key's role's.
	b.Queue(`SELECT json_build_array(r.job, r.instant)::text, coalesce(l.role, ''), r.token, 0::bigint, to_jsonb(r)::text
	           FROM pgleader.job_run AS r LEFT JOIN pgleader.lease AS l ON l.key = r.job`).
		Query(rowsInto(s.runs))
	b.Queue(`SELECT coalesce((SELECT s.epoch FROM pgleader.settings AS s), -1),
	                (SELECT coalesce(json_agg(s), '[]') FROM pgleader.settings AS s)::text
	                || (SELECT coalesce(json_agg(x), '[]') FROM pgleader.server_epoch AS x)::text
	                || (SELECT coalesce(json_agg(r ORDER BY r.role), '[]') FROM pgleader.steerer AS r)::text`).
		QueryRow(func(r pgx.Row) error { return r.Scan(&s.epoch, &s.settings) })
	b.Queue(overTTLSQL).Query(linesInto(&s.overTTL))
	b.Queue(hostileCatalogSQL, e.h, e.v).Query(linesInto(&s.catalog))
	if err := e.db.Pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return s
}

// check asserts the invariants between two snapshots around what. With
// vActed, V itself acted in between, and V's rows are not compared.
func (e *hostileEnv) check(t *testing.T, what string, before, after *hostileState, vActed bool) {
	t.Helper()
	if after.epoch != before.epoch {
		t.Errorf("%s: the epoch moved from %d to %d", what, before.epoch, after.epoch)
	}
	if after.settings != before.settings {
		t.Errorf("%s: the settings changed:\nbefore %s\nafter  %s", what, before.settings, after.settings)
	}
	// New violations only: one that stays is reported once, by the attempt
	// that made it.
	seen := map[string]bool{}
	for _, o := range before.overTTL {
		seen[o] = true
	}
	for _, o := range after.overTTL {
		if !seen[o] {
			t.Errorf("%s: %s", what, o)
		}
	}
	if d := lineDiff(before.catalog, after.catalog); d != "" {
		t.Errorf("%s: the catalog changed:\n%s", what, d)
	}
	for _, id := range sortedKeys(before.leases) {
		b := before.leases[id]
		a, ok := after.leases[id]
		switch {
		case !ok:
			t.Errorf("%s: the lease row of key %s (role %q, token %d) was deleted", what, id, b.role, b.token)
		case a.token < b.token || max(a.token, a.tokenMin) < max(b.token, b.tokenMin):
			t.Errorf("%s: the token of key %s went down: token %d, token_min %d before; %d, %d after", what, id, b.token, b.tokenMin, a.token, a.tokenMin)
		}
	}
	for _, id := range sortedKeys(before.fences) {
		b := before.fences[id]
		a, ok := after.fences[id]
		switch {
		case !ok:
			t.Errorf("%s: the fence of resource %s (role %q, token %d) was deleted", what, id, b.role, b.token)
		case a.token < b.token:
			t.Errorf("%s: the fence of resource %s went down from %d to %d", what, id, b.token, a.token)
		}
	}
	if vActed {
		return
	}
	e.othersUnchanged(t, what, "lease", before.leases, after.leases)
	e.othersUnchanged(t, what, "fence", before.fences, after.fences)
	e.othersUnchanged(t, what, "candidate", before.candidates, after.candidates)
	e.othersUnchanged(t, what, "set member", before.members, after.members)
	e.othersUnchanged(t, what, "job", before.jobs, after.jobs)
	e.othersUnchanged(t, what, "job run", before.runs, after.runs)
}

// othersUnchanged: every row of a role other than H (and not nobody's) is
// exactly as it was; every new row is H's or nobody's.
func (e *hostileEnv) othersUnchanged(t *testing.T, what, kind string, before, after map[string]hostileRow) {
	t.Helper()
	for _, id := range sortedKeys(before) {
		b := before[id]
		if b.role == e.h || b.role == "" {
			continue
		}
		a, ok := after[id]
		if !ok {
			t.Errorf("%s: %s %s of role %s was deleted; it was %s", what, kind, id, roleName(e, b.role), b.row)
		} else if a.row != b.row {
			t.Errorf("%s: %s %s of role %s changed:\nbefore %s\nafter  %s", what, kind, id, roleName(e, b.role), b.row, a.row)
		}
	}
	for _, id := range sortedKeys(after) {
		if _, ok := before[id]; ok {
			continue
		}
		if a := after[id]; a.role != e.h && a.role != "" {
			t.Errorf("%s: a new %s %s belongs to role %s, not to H: %s", what, kind, id, roleName(e, a.role), a.row)
		}
	}
}

func roleName(e *hostileEnv, r string) string {
	switch r {
	case e.v:
		return "V (" + r + ")"
	case e.h:
		return "H (" + r + ")"
	}
	return r
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// lineDiff lists the lines only in a ("-") and only in b ("+"); "" when
// both hold the same lines.
func lineDiff(a, b []string) string {
	in := func(s []string) map[string]int {
		m := map[string]int{}
		for _, l := range s {
			m[l]++
		}
		return m
	}
	ma, mb := in(a), in(b)
	var d strings.Builder
	for _, l := range a {
		if mb[l] == 0 {
			fmt.Fprintf(&d, "- %s\n", l)
		}
	}
	for _, l := range b {
		if ma[l] == 0 {
			fmt.Fprintf(&d, "+ %s\n", l)
		}
	}
	return d.String()
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// hostileSweep runs H's attempts one after another, with nothing else
// acting in between: the snapshot after one attempt is the snapshot before
// the next.
type hostileSweep struct {
	e    *hostileEnv
	prev *hostileState
}

func (e *hostileEnv) sweep() *hostileSweep { return &hostileSweep{e: e} }

// attempt runs one attempt of H's and checks the invariants between the
// snapshots around it; it returns the attempt's error.
func (s *hostileSweep) attempt(t *testing.T, what string, run func(ctx context.Context) error) error {
	t.Helper()
	if s.prev == nil {
		s.prev = s.e.snapshot(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
	err := run(ctx)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		t.Fatalf("%s: no answer within %v: %v", what, hostileTimeout, err)
	}
	after := s.e.snapshot(t)
	s.e.check(t, what, s.prev, after, false)
	s.prev = after
	return err
}

// attempt is one attempt of H's between fresh snapshots.
func (e *hostileEnv) attempt(t *testing.T, what string, run func(ctx context.Context) error) error {
	t.Helper()
	return e.sweep().attempt(t, what, run)
}

// drain runs sql on c and reads every row without decoding it.
func drain(ctx context.Context, c *pgx.Conn, sql string, args ...any) (int, error) {
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	return n, rows.Err()
}

// TestHostileRole: a role with only grant_usage cannot lower a token or a
// fence, move the epoch, stretch an expiry past max_ttl, change a setting or
// the catalog, or change another role's lease, candidate, fence or set
// membership, whatever it calls, touches or declares. The six
// reproductions of the privilege boundary's issue are refused here and, as
// controls, succeed on a copy of the schema with the one defence that
// stops each taken out.
func TestHostileRole(t *testing.T) {
	t.Parallel()
	e := newHostileEnv(t, pgtest.New(t), "the schema")
	e.seed(t)

	controls := map[string]*hostileEnv{}
	for _, c := range hostileControls {
		controls[c.name] = newHostileEnv(t, pgtest.New(t), "control "+c.name)
		c.apply(t, controls[c.name])
	}

	t.Run("reproduction", func(t *testing.T) {
		for _, r := range hostileReproductions() {
			t.Run(r.name, func(t *testing.T) {
				t.Run("schema", func(t *testing.T) {
					n := r.setup(t, e)
					err := e.attempt(t, r.name, func(ctx context.Context) error { return r.attack(ctx, e) })
					wantCode(t, r.name, err, "42501", r.refusal)
					if r.harmed(t, e, n) {
						t.Errorf("%s: after the refused attack, %s", r.name, r.harm)
					}
				})
				t.Run("control_"+r.control.name, func(t *testing.T) {
					c := controls[r.control.name]
					n := r.setup(t, c)
					ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
					defer cancel()
					if err := r.attack(ctx, c); err != nil {
						t.Fatalf("%s on %s: %v; want the attack to succeed there", r.name, c.schema, err)
					}
					if !r.harmed(t, c, n) {
						t.Errorf("%s on %s: the attack succeeded but did not do its harm (%s)", r.name, c.schema, r.harm)
					}
				})
			})
		}
	})

	t.Run("function", func(t *testing.T) { e.testFunctions(t) })
	t.Run("table", func(t *testing.T) { e.testTables(t) })
	t.Run("ddl", func(t *testing.T) { e.testDDL(t) })
	t.Run("session", func(t *testing.T) { e.testSession(t) })
	t.Run("advisory_lock", func(t *testing.T) {
		t.Run("schema", func(t *testing.T) { e.testAdvisoryLock(t) })
		t.Run("control_"+blockingAdvisoryLock.name, func(t *testing.T) {
			controls[blockingAdvisoryLock.name].testAdvisoryLockBlocks(t)
		})
	})
}

// hostileControl takes one defence out of a database's schema, so that a
// test that passes on the real schema is shown to fail without it.
type hostileControl struct {
	name  string
	apply func(t *testing.T, e *hostileEnv)
}

var (
	// tableGrants gives H table privileges, as grant_usage did before the
	// functions became the only door: SELECT, INSERT and UPDATE on the
	// lease and fence tables, and DELETE too on candidates and set members;
	// and EXECUTE on _epoch, which the trigger lease_draw calls as the role
	// that updates a counter.
	tableGrants = hostileControl{"table_grants", func(t *testing.T, e *hostileEnv) {
		h := pgx.Identifier{e.h}.Sanitize()
		mustExec(t, e.db.Pool, `GRANT SELECT, INSERT, UPDATE ON TABLE pgleader.lease, pgleader.fence TO `+h)
		mustExec(t, e.db.Pool, `GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE pgleader.candidate, pgleader.set_member TO `+h)
		mustExec(t, e.db.Pool, `GRANT EXECUTE ON FUNCTION pgleader._epoch() TO `+h)
	}}
	// epochBumpGrant lets H execute _epoch_bump, as EXECUTE on every
	// function in the schema did.
	epochBumpGrant = hostileControl{"epoch_bump_grant", func(t *testing.T, e *hostileEnv) {
		mustExec(t, e.db.Pool, `GRANT EXECUTE ON FUNCTION pgleader._epoch_bump() TO `+pgx.Identifier{e.h}.Sanitize())
	}}
	// releaseWithoutRoleCheck: release ends any term whose holder and token
	// it is given, whoever calls.
	releaseWithoutRoleCheck = hostileControl{"release_without_role_check", func(t *testing.T, e *hostileEnv) {
		pgtest.Mutate(t, e.db.Pool, "pgleader.release(text, text, bigint)",
			"\n       AND (l.role = c OR pgleader._own(l.role, false));", ";")
	}}
	// blockingAdvisoryLock: a lease operation waits for the settings'
	// advisory lock, shared, instead of reading the settings row FOR SHARE
	// when another session holds the lock.
	blockingAdvisoryLock = hostileControl{"blocking_advisory_lock", func(t *testing.T, e *hostileEnv) {
		pgtest.Mutate(t, e.db.Pool, "pgleader._grace()",
			"IF pg_try_advisory_xact_lock_shared(k.classid, k.objid)\n       AND current_setting",
			"PERFORM pg_advisory_xact_lock_shared(k.classid, k.objid);\n    IF current_setting")
	}}
	hostileControls = []hostileControl{tableGrants, epochBumpGrant, releaseWithoutRoleCheck, blockingAdvisoryLock}
)

// hostileRepro is one of the six reproductions: an attack by H that the
// schema refuses and its control lets through.
type hostileRepro struct {
	name    string
	control hostileControl // the schema without the defence that refuses the attack
	refusal string         // the message of the schema's refusal
	// setup, as V, prepares the victim; its number is passed to harmed.
	setup  func(t *testing.T, e *hostileEnv) int64
	attack func(ctx context.Context, e *hostileEnv) error
	// harmed reports whether the attack did its harm, described by harm.
	harmed func(t *testing.T, e *hostileEnv, n int64) bool
	harm   string
}

// vAcquire acquires key for V's holder with a floor and returns the token.
func vAcquire(t *testing.T, e *hostileEnv, key string, floor int64) int64 {
	t.Helper()
	var ok bool
	var token int64
	err := e.vc.QueryRow(context.Background(), `SELECT acquired, token FROM pgleader.acquire($1, $2, '5 minutes', $3)`,
		key, victimHolder, floor).Scan(&ok, &token)
	if err != nil || !ok {
		t.Fatalf("V's acquire of %s on %s: %v, %v", key, e.schema, ok, err)
	}
	return token
}

func vRelease(t *testing.T, e *hostileEnv, key string, token int64) {
	t.Helper()
	var ok bool
	if err := e.vc.QueryRow(context.Background(), `SELECT pgleader.release($1, $2, $3)`, key, victimHolder, token).Scan(&ok); err != nil || !ok {
		t.Fatalf("V's release of %s on %s: %v, %v", key, e.schema, ok, err)
	}
}

func hostileReproductions() []hostileRepro {
	return []hostileRepro{{
		// 1. H lowers V's fence from 7 to 1; a stale writer of V's with
		// token 3 is then let through.
		name: "1_fence_lowered", control: tableGrants, refusal: "permission denied for table fence",
		setup: func(t *testing.T, e *hostileEnv) int64 {
			mustExec(t, e.vc, `SELECT pgleader.fence_claim('r1-res', 7)`)
			return 7
		},
		attack: func(ctx context.Context, e *hostileEnv) error {
			_, err := e.hc.Exec(ctx, `UPDATE pgleader.fence SET token = 1 WHERE resource = 'r1-res'`)
			return err
		},
		harmed: func(t *testing.T, e *hostileEnv, _ int64) bool {
			_, err := e.vc.Exec(context.Background(), `SELECT pgleader.fence_write('r1-res', 3)`)
			if err != nil && sqlState(err) != "PF001" {
				t.Errorf("fence_write('r1-res', 3) by a stale writer: %v; want it fenced (PF001)", err)
			}
			return err == nil
		},
		harm: "fence_write('r1-res', 3) was accepted below the fence 7",
	}, {
		// 2. H sets a free key's counter to 0: the next acquire draws token
		// 1 again, a token an earlier term already wrote with.
		name: "2_token_zero", control: tableGrants, refusal: "permission denied for table lease",
		setup: func(t *testing.T, e *hostileEnv) int64 {
			tok := vAcquire(t, e, "r2", 4)
			vRelease(t, e, "r2", tok)
			return tok
		},
		attack: func(ctx context.Context, e *hostileEnv) error {
			_, err := e.hc.Exec(ctx, `UPDATE pgleader.lease SET token = 0 WHERE key = 'r2'`)
			return err
		},
		harmed: func(t *testing.T, e *hostileEnv, last int64) bool {
			tok := vAcquire(t, e, "r2", 0)
			t.Logf("%s: the acquire after the attack drew token %d; the last term had %d", e.schema, tok, last)
			return tok <= last
		},
		harm: "the next acquire drew a token at or below the last term's",
	}, {
		// 3. H sets a key's counter to the largest bigint: every later
		// acquire of the key fails with 22003.
		name: "3_token_max", control: tableGrants, refusal: "permission denied for table lease",
		setup: func(t *testing.T, e *hostileEnv) int64 {
			tok := vAcquire(t, e, "r3", 0)
			vRelease(t, e, "r3", tok)
			return tok
		},
		attack: func(ctx context.Context, e *hostileEnv) error {
			_, err := e.hc.Exec(ctx, `UPDATE pgleader.lease SET token = 9223372036854775807 WHERE key = 'r3'`)
			return err
		},
		harmed: func(t *testing.T, e *hostileEnv, last int64) bool {
			var ok bool
			var tok int64
			err := e.vc.QueryRow(context.Background(), `SELECT acquired, token FROM pgleader.acquire('r3', $1, '5 minutes')`, victimHolder).Scan(&ok, &tok)
			if err != nil && sqlState(err) != "22003" {
				t.Errorf("V's acquire of r3 after the attack: %v", err)
			}
			if err == nil && (!ok || tok <= last) {
				t.Errorf("V's acquire of r3 after the attack = %v, token %d; want a win above %d", ok, tok, last)
			}
			return sqlState(err) == "22003"
		},
		harm: "V's acquire of the key failed with 22003",
	}, {
		// 4. H stretches V's term to 100 years, far beyond max_ttl: if V's
		// holder dies, nobody takes over for a century.
		name: "4_expiry_100_years", control: tableGrants, refusal: "permission denied for table lease",
		setup: func(t *testing.T, e *hostileEnv) int64 {
			return vAcquire(t, e, "r4", 0)
		},
		attack: func(ctx context.Context, e *hostileEnv) error {
			_, err := e.hc.Exec(ctx, `UPDATE pgleader.lease SET expires_at = clock_timestamp() + interval '100 years' WHERE key = 'r4'`)
			return err
		},
		harmed: func(t *testing.T, e *hostileEnv, _ int64) bool {
			var beyond bool
			if err := e.db.Pool.QueryRow(context.Background(),
				`SELECT expires_at > clock_timestamp() + (SELECT max_ttl FROM pgleader.settings) FROM pgleader.lease WHERE key = 'r4'`).Scan(&beyond); err != nil {
				t.Fatal(err)
			}
			return beyond
		},
		harm: "the lease of r4 expires beyond max_ttl from now",
	}, {
		// 5. H moves the token epoch.
		name: "5_epoch_bump", control: epochBumpGrant, refusal: "permission denied for function _epoch_bump",
		setup: func(t *testing.T, e *hostileEnv) int64 {
			var n int64
			if err := e.db.Pool.QueryRow(context.Background(), `SELECT epoch FROM pgleader.settings`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
		attack: func(ctx context.Context, e *hostileEnv) error {
			_, err := e.hc.Exec(ctx, `SELECT pgleader._epoch_bump()`)
			return err
		},
		harmed: func(t *testing.T, e *hostileEnv, epoch int64) bool {
			var n int64
			if err := e.db.Pool.QueryRow(context.Background(), `SELECT epoch FROM pgleader.settings`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n != epoch
		},
		harm: "the epoch moved",
	}, {
		// 6. H reads V's holder and token from lease() and releases V's
		// live term with them.
		name: "6_release_with_lease_values", control: releaseWithoutRoleCheck, refusal: "may not release it",
		setup: func(t *testing.T, e *hostileEnv) int64 {
			return vAcquire(t, e, "r6", 0)
		},
		attack: func(ctx context.Context, e *hostileEnv) error {
			var holder *string
			var token int64
			if err := e.hc.QueryRow(ctx, `SELECT holder, token FROM pgleader.lease('r6')`).Scan(&holder, &token); err != nil {
				return fmt.Errorf("lease('r6') as H: %w", err)
			}
			if holder == nil {
				return errors.New("lease('r6') shows no holder to H")
			}
			var released bool
			if err := e.hc.QueryRow(ctx, `SELECT pgleader.release('r6', $1, $2)`, *holder, token).Scan(&released); err != nil {
				return err
			}
			if !released {
				return errors.New("release('r6') with lease()'s values returned false")
			}
			return nil
		},
		harmed: func(t *testing.T, e *hostileEnv, token int64) bool {
			var exp *time.Time
			if err := e.vc.QueryRow(context.Background(), `SELECT pgleader.renew('r6', $1, $2, '5 minutes')`, victimHolder, token).Scan(&exp); err != nil {
				t.Fatalf("V's renewal of r6: %v", err)
			}
			return exp == nil
		},
		harm: "V's renewal of its term on r6 failed: the term was ended",
	}}
}

// testAdvisoryLock: H holds the settings' advisory lock exclusively in one
// session, and in another keeps a transaction open after grace() (holding
// the settings row FOR SHARE); V's lease operations still complete.
func (e *hostileEnv) testAdvisoryLock(t *testing.T) {
	ctx := context.Background()
	locker := hostileConnect(t, e.hURL)
	if _, err := locker.Exec(ctx, `SELECT pg_advisory_lock($1, $2)`, settingsLockClassID, settingsLockObjID); err != nil {
		t.Fatalf("H's pg_advisory_lock: %v", err)
	}
	defer func() {
		if _, err := locker.Exec(ctx, `SELECT pg_advisory_unlock($1, $2)`, settingsLockClassID, settingsLockObjID); err != nil {
			t.Errorf("H's pg_advisory_unlock: %v", err)
		}
	}()
	reader := hostileConnect(t, e.hURL)
	tx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT * FROM pgleader.grace()`); err != nil {
		t.Fatalf("H's grace() in an open transaction: %v", err)
	}

	before := e.snapshot(t)
	opCtx, cancel := context.WithTimeout(ctx, hostileTimeout)
	defer cancel()
	var token int64
	var ok bool
	steps := []struct {
		what string
		run  func() error
	}{
		{"acquire", func() error {
			return e.vc.QueryRow(opCtx, `SELECT acquired, token FROM pgleader.acquire('adv', $1, '1 minute')`, victimHolder).Scan(&ok, &token)
		}},
		{"renew", func() error {
			var exp *time.Time
			if err := e.vc.QueryRow(opCtx, `SELECT pgleader.renew('adv', $1, $2, '1 minute')`, victimHolder, token).Scan(&exp); err != nil {
				return err
			}
			if exp == nil {
				return errors.New("renew lost the term")
			}
			return nil
		}},
		{"campaign", func() error {
			_, err := e.vc.Exec(opCtx, `SELECT pgleader.campaign('adv', $1, '1 minute', 0, NULL, 1, '1 minute')`, victimCandidate)
			return err
		}},
		{"renew_many", func() error {
			n, err := drain(opCtx, e.vc, `SELECT * FROM pgleader.renew_many($1, '{adv}', ARRAY[$2::bigint], '1 minute')`, victimHolder, token)
			if err == nil && n != 1 {
				return fmt.Errorf("renew_many renewed %d keys, want 1", n)
			}
			return err
		}},
		{"set_renew", func() error {
			_, err := e.vc.Exec(opCtx, `SELECT pgleader.set_renew('adv-set', $1, '{}', '{}', '1 minute', 0)`, victimHolder)
			return err
		}},
		{"hand_off", func() error {
			var released bool
			var succ *string
			if err := e.vc.QueryRow(opCtx, `SELECT released, successor, token FROM pgleader.hand_off('adv', $1, $2)`, victimHolder, token).Scan(&released, &succ, &token); err != nil {
				return err
			}
			if !released || succ == nil || *succ != victimCandidate {
				return fmt.Errorf("hand_off = %v, %v; want a hand-off to %s", released, succ, victimCandidate)
			}
			return nil
		}},
		{"release", func() error {
			var released bool
			if err := e.vc.QueryRow(opCtx, `SELECT pgleader.release('adv', $1, $2)`, victimCandidate, token).Scan(&released); err != nil {
				return err
			}
			if !released {
				return errors.New("release returned false")
			}
			return nil
		}},
	}
	for _, s := range steps {
		if err := s.run(); err != nil {
			t.Fatalf("V's %s while H holds the settings' advisory lock: %v", s.what, err)
		}
		if s.what == "acquire" && !ok {
			t.Fatalf("V's acquire of a new key while H holds the settings' advisory lock won nothing")
		}
	}
	e.check(t, "V's lease operations while H holds the settings' advisory lock", before, e.snapshot(t), true)
}

// testAdvisoryLockBlocks: on a schema whose lease operations wait for the
// settings' advisory lock (shared), H's exclusive hold stops them.
func (e *hostileEnv) testAdvisoryLockBlocks(t *testing.T) {
	ctx := context.Background()
	locker := hostileConnect(t, e.hURL)
	if _, err := locker.Exec(ctx, `SELECT pg_advisory_lock($1, $2)`, settingsLockClassID, settingsLockObjID); err != nil {
		t.Fatalf("H's pg_advisory_lock: %v", err)
	}
	unlocked := false
	unlock := func() {
		if unlocked {
			return
		}
		unlocked = true
		if _, err := locker.Exec(ctx, `SELECT pg_advisory_unlock($1, $2)`, settingsLockClassID, settingsLockObjID); err != nil {
			t.Errorf("H's pg_advisory_unlock: %v", err)
		}
	}
	defer unlock()
	pid := backendPID(t, e.vc)
	done := make(chan error, 1)
	opCtx, cancel := context.WithTimeout(ctx, hostileTimeout)
	defer cancel()
	go func() {
		_, err := e.vc.Exec(opCtx, `SELECT pgleader.acquire('adv', $1, '1 minute')`, victimHolder)
		done <- err
	}()
	waitLockWait(t, e.db.Pool, pid)
	var locktype string
	if err := e.db.Pool.QueryRow(ctx, `SELECT locktype FROM pg_locks WHERE pid = $1 AND NOT granted`, pid).Scan(&locktype); err != nil {
		t.Errorf("V's waiting lock: %v", err)
	} else if locktype != "advisory" {
		t.Errorf("V waits for a %s lock; want the advisory lock", locktype)
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatalf("V's acquire after H let go: %v", err)
	}
}

// hostileValues are the hostile values of each argument type, as text
// (nil is NULL). Each argument is cast from text to its type in the call.
func (e *hostileEnv) hostileValues() map[string][]*string {
	s := func(v string) *string { return &v }
	long := strings.Repeat("k", 201)
	tok := strconv.FormatInt(e.token, 10)
	stok := strconv.FormatInt(e.setToken, 10)
	return map[string][]*string{
		"text": {nil, s(""), s(long), s("a\x00b"), s(victimKey), s(victimHolder), s(victimCandidate), s(victimRes),
			s(victimSet), s(victimSetKey), s(hostileKey), s(hostileHolder), s("release"), s("acquire")},
		"bigint": {nil, s("0"), s("-1"), s("1"), s(strconv.FormatInt(math.MinInt64, 10)), s(strconv.FormatInt(math.MaxInt64, 10)),
			s("4611686018427387903"), s("4611686018427387904"), s(tok), s(strconv.FormatInt(e.token+1, 10))},
		"integer": {nil, s("0"), s("-1"), s("1"), s(strconv.FormatInt(math.MinInt32, 10)), s(strconv.FormatInt(math.MaxInt32, 10))},
		"interval": {nil, s("0"), s("-1 second"), s("1 microsecond"), s("10 minutes 1 microsecond"), s("100 years"),
			s("-100 years"), s("178000000 years"), s(calendarTTL)},
		"boolean":   {nil, s("true"), s("false")},
		"boolean[]": {nil, s("{}"), s("{NULL}"), s("{true}"), s("{true,true}"), s("{{true}}")},
		"text[]": {nil, s("{}"), s("{NULL}"), s(`{""}`), s("{" + victimKey + "}"), s("{" + victimSetKey + "}"),
			s("{" + victimKey + "," + victimKey + "}"), s("{{" + victimKey + "}}"), s("{" + long + "}"),
			s("{" + hostileKey + "," + victimKey + "}"), s("{" + hostileKey + "}"), s("{\"a\x00b\"}")},
		"bigint[]": {nil, s("{}"), s("{NULL}"), s("{0}"), s("{-1}"), s("{9223372036854775807}"), s("{4611686018427387903}"),
			s("{" + tok + "}"), s("{" + tok + "," + stok + "}"), s("{{" + tok + "}}")},
		"name":                     {nil, s(""), s(e.h), s(e.v), s("postgres"), s("pg_database_owner"), s(strings.Repeat("n", 64))},
		"regclass":                 {nil, s("pgleader.lease"), s("pgleader.fence"), s("pgleader.settings")},
		"timestamp with time zone": {nil, s("-infinity"), s("infinity"), s("2000-01-01 00:00:00+00")},
	}
}

// hostileBase is the base value of an argument by its name: the victim's
// key, holder, token, resource, set and candidate, as H read them.
func (e *hostileEnv) hostileBase(name, typ string) (*string, bool) {
	s := func(v string) *string { return &v }
	tok := strconv.FormatInt(e.token, 10)
	byName := map[string]*string{
		"p_key": s(victimKey), "p_owner": s(victimHolder), "p_token": s(tok), "p_ttl": s("1 minute"),
		"p_floor": s("0"), "p_value": s("h"), "p_priority": s("0"), "p_candidate": s("1 minute"),
		"p_to": s(victimCandidate), "p_keys": s("{" + victimKey + "," + victimSetKey + "}"),
		"p_tokens": s("{" + tok + "," + strconv.FormatInt(e.setToken, 10) + "}"), "p_limit": s("10"), "p_floors": nil,
		"p_set": s(victimSet), "p_held": s("1"), "p_extra": s("0"), "p_leave": s("true"), "p_resource": s(victimRes),
		"p_event": s("release"), "p_prefix": s(""), "p_ended": s(tok), "p_keep": s("0"), "p_min_term": nil,
		"p_table": s("pgleader.lease"), "p_column": s("token"), "p_role": s(e.h), "p_history": nil,
		"p_max_ttl": s("24 hours"), "p_offset": s("1 hour"), "p_claim": s("true"), "p_need_token": s("true"),
		"p_need_owner": s("true"), "p_need_ttl": s("true"), "p_need_tokens": s("true"), "p_steer": s("true"),
		"p_what": s("x"), "p_name": s("x"), "p_hand_off": s("{true,true}"),
	}
	if v, ok := byName[name]; ok {
		return v, true
	}
	byType := map[string]*string{
		"text": s(victimKey), "bigint": s(tok), "integer": s("0"), "interval": s("1 minute"), "boolean": s("true"),
		"text[]": s("{" + victimKey + "}"), "bigint[]": s("{" + tok + "}"), "name": s(e.h), "regclass": s("pgleader.lease"),
		"timestamp with time zone": s("2000-01-01 00:00:00+00"),
	}
	v, ok := byType[typ]
	return v, ok
}

// hostileFunc is a function of the schema, read from pg_proc at run time.
type hostileFunc struct {
	sig     string // e.g. pgleader.release(text,text,bigint)
	name    string
	types   []string // the input arguments' types
	names   []string // and names
	mayExec bool     // whether H has EXECUTE on it
}

func (e *hostileEnv) functions(t *testing.T) []hostileFunc {
	t.Helper()
	rows, err := e.db.Pool.Query(context.Background(), `
		SELECT p.oid::regprocedure::text, p.proname::text,
		       ARRAY(SELECT format_type(u.t, NULL) FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS u(t, i) ORDER BY u.i),
		       coalesce(p.proargnames, '{}'), coalesce(p.proargmodes::text[], '{}'),
		       has_function_privilege($1, p.oid, 'EXECUTE')
		  FROM pg_catalog.pg_proc AS p
		 WHERE p.pronamespace = 'pgleader'::regnamespace
		 ORDER BY 1`, e.h)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var fs []hostileFunc
	for rows.Next() {
		var f hostileFunc
		var names, modes []string
		if err := rows.Scan(&f.sig, &f.name, &f.types, &names, &modes, &f.mayExec); err != nil {
			t.Fatal(err)
		}
		// The input arguments' names: all of them when there are no modes,
		// else those of mode in, inout or variadic.
		for i := range names {
			if len(modes) == 0 || modes[i] == "i" || modes[i] == "b" || modes[i] == "v" {
				f.names = append(f.names, names[i])
			}
		}
		for len(f.names) < len(f.types) {
			f.names = append(f.names, "")
		}
		fs = append(fs, f)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(fs) < 50 {
		t.Fatalf("found %d functions in schema pgleader; the schema has more", len(fs))
	}
	return fs
}

// ownerOnly: the internal helpers, the setters and the grant functions.
func ownerOnly(name string) bool {
	switch name {
	case "set_max_ttl", "set_max_clock_offset", "grant_usage", "grant_steer":
		return true
	}
	return strings.HasPrefix(name, "_")
}

// hostileGenericCodes are the errors a generic call may end with: refusals
// and argument checks. Any other error names an unexpected path.
var hostileGenericCodes = map[string]bool{
	"42501": true, // a privilege, or another role's key
	"22023": true, // an argument check
	"22021": true, // a NUL in text: PostgreSQL refuses it before the call
	"22003": true, // a number out of range (e.g. notify's ttl in microseconds)
	"0A000": true, // fence_trigger called as a function
	"42P01": true, // install_fence_trigger on a table that is not there
	"42703": true, // install_fence_trigger on a column that is not there
	"42804": true, // install_fence_trigger on a column that is not an integer
	"PF001": true, // fenced
	"PF002": true, // lease_guard: not held
	"PF003": true, // transfer: not a candidate
	"2202E": true, // array subscript error
	"22008": true, // datetime field overflow
}

func (e *hostileEnv) testFunctions(t *testing.T) {
	fs := e.functions(t)
	cases := e.functionCases()
	sw := e.sweep()
	covered := map[string]bool{}
	for _, f := range fs {
		covered[f.sig] = true
		t.Run(f.sig, func(t *testing.T) {
			if ownerOnly(f.name) {
				if f.mayExec {
					t.Errorf("H may execute %s, which is the owner's", f.sig)
				}
				if len(cases[f.sig]) != 0 {
					t.Errorf("%s is the owner's but has cases of an application function", f.sig)
				}
			} else {
				if !f.mayExec {
					t.Errorf("H may not execute %s, an application function", f.sig)
				}
				if len(cases[f.sig]) == 0 {
					t.Errorf("application function %s has no hostile case: add its cases to functionCases", f.sig)
				}
			}
			for _, c := range cases[f.sig] {
				what := f.sig + ": " + c.what
				var res hostileResult
				err := sw.attempt(t, what, func(ctx context.Context) error {
					var err error
					res, err = c.run(ctx, e.hc)
					return err
				})
				switch {
				case c.code == "" && err != nil:
					t.Errorf("%s: %v; want it to succeed", what, err)
				case c.code != "" && c.code != anyOutcome:
					wantCode(t, what, err, c.code, c.msg)
				}
				if err == nil && c.verify != nil {
					if problem := c.verify(e, res); problem != "" {
						t.Errorf("%s: %s", what, problem)
					}
				}
			}
			e.callGeneric(t, sw, f)
		})
	}
	for sig := range cases {
		if !covered[sig] {
			t.Errorf("functionCases has cases for %s, which is not in schema pgleader", sig)
		}
	}
}

// callGeneric calls f with the victim's values and, one argument at a time,
// every hostile value of the argument's type; and with every argument NULL.
func (e *hostileEnv) callGeneric(t *testing.T, sw *hostileSweep, f hostileFunc) {
	t.Helper()
	values := e.hostileValues()
	base := make([]*string, len(f.types))
	for i, typ := range f.types {
		v, ok := e.hostileBase(f.names[i], typ)
		if !ok {
			t.Fatalf("%s: no base value for argument %s of type %s: add it to hostileBase", f.sig, f.names[i], typ)
		}
		if _, ok := values[typ]; !ok {
			t.Fatalf("%s: no hostile values for type %s: add them to hostileValues", f.sig, typ)
		}
		base[i] = v
	}
	vectors := [][]*string{base, make([]*string, len(f.types))}
	if !ownerOnly(f.name) {
		for i, typ := range f.types {
			for _, v := range values[typ] {
				vec := append([]*string(nil), base...)
				vec[i] = v
				vectors = append(vectors, vec)
			}
		}
	}
	casts := make([]string, len(f.types))
	for i, typ := range f.types {
		casts[i] = fmt.Sprintf("$%d::text::%s", i+1, typ)
	}
	// In the select list, not in FROM: PostgreSQL checks EXECUTE before a
	// trigger function's return type.
	sql := fmt.Sprintf("SELECT %s(%s)", pgx.Identifier{"pgleader", f.name}.Sanitize(), strings.Join(casts, ", "))
	seen := map[string]bool{}
	for _, vec := range vectors {
		what := describeCall(f.name, vec)
		if seen[what] {
			continue
		}
		seen[what] = true
		args := make([]any, len(vec))
		for i, v := range vec {
			args[i] = v
		}
		err := sw.attempt(t, what, func(ctx context.Context) error {
			_, err := drain(ctx, e.hc, sql, args...)
			return err
		})
		switch {
		case ownerOnly(f.name):
			wantCode(t, what, err, "42501", "permission denied for function")
		case err != nil && !hostileGenericCodes[sqlState(err)]:
			t.Errorf("%s: unexpected error %v", what, err)
		}

	}
}

func describeCall(name string, vec []*string) string {
	parts := make([]string, len(vec))
	for i, v := range vec {
		switch {
		case v == nil:
			parts[i] = "NULL"
		case len(*v) > 40:
			parts[i] = fmt.Sprintf("%q…(%d bytes)", (*v)[:12], len(*v))
		default:
			parts[i] = strconv.Quote(*v)
		}
	}
	return fmt.Sprintf("%s(%s)", name, strings.Join(parts, ", "))
}

// hostileResult is what a hand-written case read.
type hostileResult struct {
	rows  int
	texts []string
}

// hostileCall is a hand-written call of H's: code is the SQLSTATE it must
// end with ("" for success) and msg a part of the message.
type hostileCall struct {
	what      string
	code, msg string // anyOutcome: refused or not, the invariants decide
	run       func(ctx context.Context, c *pgx.Conn) (hostileResult, error)
	verify    func(e *hostileEnv, r hostileResult) string
}

// anyOutcome is the code of a call that may succeed or be refused.
const anyOutcome = "any"

// calendarTTL is an interval that PostgreSQL compares as 9 minutes (it
// counts a month as 30 days, so 1000 years as 360000 days) but adds to a
// timestamp as about 5242 days and 9 minutes: 1000 calendar years are
// 365242 or 365243 days.
const calendarTTL = "1000 years -360000 days 9 minutes"

// rowsOf is a call that counts the rows of sql.
func rowsOf(sql string, args ...any) func(ctx context.Context, c *pgx.Conn) (hostileResult, error) {
	return func(ctx context.Context, c *pgx.Conn) (hostileResult, error) {
		n, err := drain(ctx, c, sql, args...)
		return hostileResult{rows: n}, err
	}
}

// textsOf is a call that reads the first column of sql's rows as text.
func textsOf(sql string, args ...any) func(ctx context.Context, c *pgx.Conn) (hostileResult, error) {
	return func(ctx context.Context, c *pgx.Conn) (hostileResult, error) {
		var r hostileResult
		rows, err := c.Query(ctx, sql, args...)
		if err != nil {
			return r, err
		}
		defer rows.Close()
		for rows.Next() {
			var s *string
			if err := rows.Scan(&s); err != nil {
				return r, err
			}
			r.rows++
			if s != nil {
				r.texts = append(r.texts, *s)
			}
		}
		return r, rows.Err()
	}
}

func wantRows(n int) func(e *hostileEnv, r hostileResult) string {
	return func(e *hostileEnv, r hostileResult) string {
		if r.rows != n {
			return fmt.Sprintf("%d rows; want %d", r.rows, n)
		}
		return ""
	}
}

func wantTexts(want ...string) func(e *hostileEnv, r hostileResult) string {
	return func(e *hostileEnv, r hostileResult) string {
		if strings.Join(r.texts, "\n") != strings.Join(want, "\n") {
			return fmt.Sprintf("read %q; want %q", r.texts, want)
		}
		return ""
	}
}

// functionCases are the hand-written cases of every application function,
// by signature: the victim's key with the victim's real holder and token,
// the victim's resource with the highest token, the victim's set.
func (e *hostileEnv) functionCases() map[string][]hostileCall {
	const refused, other = "42501", "belongs to role"
	tok, stok := e.token, e.setToken
	maxFence := int64(4611686018427387903) // 2^62 - 1
	return map[string][]hostileCall{
		"pgleader.acquire(text,text,interval,bigint,text)": {
			{what: "acquire the victim's key", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.acquire($1, $2, '1 minute', 0, NULL)`, victimKey, hostileHolder)},
			{what: "acquire the victim's key as the victim's holder, at the highest floor", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.acquire($1, $2, '1 minute', $3, NULL)`, victimKey, victimHolder, maxFence)},
			{what: "acquire an own key for longer than max_ttl", code: "22023", msg: "exceeds max_ttl",
				run: rowsOf(`SELECT * FROM pgleader.acquire('h-long', $1, '10 minutes 1 microsecond', 0, NULL)`, hostileHolder)},
			{what: "acquire an own key for 100 years", code: "22023", msg: "not days, months or years",
				run: rowsOf(`SELECT * FROM pgleader.acquire('h-long', $1, '100 years', 0, NULL)`, hostileHolder)},
			// The TTL compares below max_ttl; the expiry must not be beyond it.
			{what: "acquire an own key for " + calendarTTL, code: anyOutcome,
				run: rowsOf(`SELECT * FROM pgleader.acquire('h-calendar', $1, $2::interval, 0, NULL)`, hostileHolder, calendarTTL)},
		},
		"pgleader.acquire_many(text[],text,interval,integer,bigint[])": {
			{what: "acquire an own new key and the victim's key", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.acquire_many(ARRAY['h-am', $1], $2, '1 minute', 10)`, victimKey, hostileHolder)},
			{what: "acquire the key of the victim's set", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.acquire_many(ARRAY[$1], $2, '1 minute', 10)`, victimSetKey, victimHolder)},
		},
		"pgleader.advance(text,bigint)": {
			{what: "advance the victim's key to 2^62-1", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.advance($1, $2)`, victimKey, maxFence)},
			{what: "advance the key of the victim's set", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.advance($1, 1)`, victimSetKey)},
		},
		"pgleader.campaign(text,text,interval,bigint,text,integer,interval)": {
			{what: "register a top-priority candidate on the victim's key", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.campaign($1, $2, '1 minute', 0, NULL, 2147483647, '1 minute')`, victimKey, hostileHolder)},
			{what: "re-register the victim's candidate with another priority", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.campaign($1, $2, '1 minute', 0, 'h', -2147483648, '1 minute')`, victimKey, victimCandidate)},
			// campaign bounds a candidate's registration by max_ttl.
			{what: "register a candidate on an own held key for " + calendarTTL, code: anyOutcome,
				run: rowsOf(`SELECT * FROM pgleader.campaign($1, 'h-2', '1 minute', 0, NULL, 0, $2::interval)`, hostileKey, calendarTTL)},
		},
		"pgleader.campaign_bound(text,text,interval,bigint,text,integer,interval)": {
			// Neither the lapse of a term whose session ended nor the
			// campaign is the hostile role's to make on another's key.
			{what: "campaign session-bound for the victim's key", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.campaign_bound($1, $2, '1 minute', 0, NULL, 0, '1 minute')`, victimKey, hostileHolder)},
			{what: "campaign session-bound as the victim's holder", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.campaign_bound($1, $2, '1 minute', 0, NULL, 0, NULL)`, victimKey, victimHolder)},
		},
		"pgleader.bind_refusal(interval)": {
			// A read of the caller's own session's settings.
			{what: "ask whether an own session can be bound for " + calendarTTL, code: anyOutcome,
				run: rowsOf(`SELECT pgleader.bind_refusal($1::interval)`, calendarTTL)},
		},
		"pgleader.wait_session(text,interval)": {
			// Holding another's key's session lock would keep its terms
			// from being bound.
			{what: "wait for the victim's holder's session", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.wait_session($1, '10 milliseconds')`, victimKey)},
		},
		"pgleader.unbind(text)": {
			{what: "unbind the victim's key", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.unbind($1)`, victimKey)},
		},
		"pgleader.candidates(text)": {
			// A read: the candidates are listed, nothing changes.
			{what: "list the victim's candidates", run: textsOf(`SELECT owner FROM pgleader.candidates($1)`, victimKey),
				verify: wantTexts(victimCandidate)},
		},
		"pgleader.fence_claim(text,bigint)": {
			{what: "claim the victim's resource at 2^62-1", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.fence_claim($1, $2)`, victimRes, maxFence)},
			{what: "claim the victim's resource at the next token", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.fence_claim($1, $2)`, victimRes, victimFence+1)},
			{what: "claim the victim's resource above 2^62-1", code: "22023", msg: "above the limit",
				run: rowsOf(`SELECT pgleader.fence_claim($1, $2)`, victimRes, maxFence+1)},
		},
		"pgleader.fence_write(text,bigint)": {
			{what: "write under the victim's resource at 2^62-1", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.fence_write($1, $2)`, victimRes, maxFence)},
			{what: "write under the victim's resource at its fence", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.fence_write($1, $2)`, victimRes, victimFence)},
		},
		"pgleader.fence_floor(text)": {
			{what: "read the victim's fence", run: textsOf(`SELECT pgleader.fence_floor($1)::text`, victimRes),
				verify: wantTexts(strconv.Itoa(victimFence))},
		},
		"pgleader.fence_trigger()": {
			{what: "call the fence trigger as a function", code: "0A000", msg: "trigger",
				run: rowsOf(`SELECT pgleader.fence_trigger()`)},
		},
		"pgleader.grace()": {
			{what: "read the grace", run: textsOf(`SELECT in_grace::text FROM pgleader.grace()`), verify: wantTexts("false")},
		},
		"pgleader.hand_off(text,text,bigint,text)": {
			{what: "hand the victim's term off to nobody", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.hand_off($1, $2, $3, NULL)`, victimKey, victimHolder, tok)},
			{what: "hand the victim's term off to its candidate", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.hand_off($1, $2, $3, $4)`, victimKey, victimHolder, tok, victimCandidate)},
			{what: "hand the victim's term off to H's holder", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.hand_off($1, $2, $3, $4)`, victimKey, victimHolder, tok, hostileHolder)},
		},
		"pgleader.hint_handoff(text,bigint)": {
			// A hint only (anyone may send one): it changes nothing.
			{what: "send a hand-off hint for the victim's key", run: rowsOf(`SELECT pgleader.hint_handoff($1, $2)`, victimKey, tok)},
		},
		"pgleader.holds(text,bigint)": {
			{what: "ask whether the victim's token holds", run: textsOf(`SELECT pgleader.holds($1, $2)::text`, victimKey, tok),
				verify: wantTexts("true")},
		},
		"pgleader.install_fence_trigger(regclass,name)": {
			{what: "install a fence trigger on pgleader.lease", code: refused, msg: "permission denied for table lease",
				run: rowsOf(`SELECT pgleader.install_fence_trigger('pgleader.lease', 'token')`)},
			{what: "install a fence trigger on pgleader.fence", code: refused, msg: "permission denied for table fence",
				run: rowsOf(`SELECT pgleader.install_fence_trigger('pgleader.fence', 'token')`)},
		},
		"pgleader.job_schedule(text,text,timestamp with time zone)": {
			{what: "reschedule the victim's job", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.job_schedule($1, 'every 1s', now())`, victimKey)},
		},
		"pgleader.job_claim(text,timestamp with time zone,text,bigint,timestamp with time zone,text)": {
			{what: "claim a run of the victim's job with its holder and token", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.job_claim($1, now() - interval '2 minutes', $2, $3)`, victimKey, victimHolder, tok)},
			{what: "take over the victim's run with its holder and a higher token", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.job_claim($1, (SELECT max(instant) FROM pgleader.job_runs($1)), $2, $3, now() + interval '1 hour')`,
					victimKey, victimHolder, tok+1)},
			{what: "claim a run of the victim's job with the victim's fence", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.job_claim($1, now() - interval '3 minutes', $2, $3, NULL, $4)`, victimKey, victimHolder, tok, victimRes)},
			{what: "claim a run of H's own job taking the victim's fence", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.job_claim($1, now() - interval '1 minute', $2, $3, NULL, $4)`, hostileKey, hostileHolder, e.hToken, victimRes)},
		},
		"pgleader.job_finish(text,timestamp with time zone,text,bigint,boolean,text,integer)": {
			{what: "record the victim's run failed with its holder and token", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.job_finish($1, (SELECT max(instant) FROM pgleader.job_runs($1)), $2, $3, false, 'h')`, victimKey, victimHolder, tok)},
			{what: "delete the victim's runs by keeping one", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.job_finish($1, now(), $2, $3, true, NULL, 1)`, victimKey, victimHolder, tok)},
		},
		"pgleader.job_status(text)": {
			{what: "read the victim's job", run: textsOf(`SELECT owner FROM pgleader.job_status($1)`, victimKey),
				verify: wantTexts(victimHolder)},
		},
		"pgleader.job_runs(text,integer)": {
			{what: "list the victim's runs", run: textsOf(`SELECT state FROM pgleader.job_runs($1)`, victimKey),
				verify: wantTexts("running")},
		},
		"pgleader.lease(text)": {
			{what: "read the victim's lease", run: textsOf(`SELECT holder FROM pgleader.lease($1)`, victimKey),
				verify: wantTexts(victimHolder)},
		},
		"pgleader.lease_guard(text,bigint)": {
			{what: "guard a transaction with the victim's term", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.lease_guard($1, $2)`, victimKey, tok)},
		},
		"pgleader.leases(text)": {
			{what: "list every lease", run: rowsOf(`SELECT * FROM pgleader.leases('')`)},
		},
		"pgleader.notify(text,text)": {
			{what: "send a release hint for the victim's key", run: rowsOf(`SELECT pgleader.notify('release', $1)`, victimKey)},
		},
		"pgleader.release(text,text,bigint)": {
			{what: "release the victim's term with its holder and token", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.release($1, $2, $3)`, victimKey, victimHolder, tok)},
		},
		"pgleader.release_many(text,text[],bigint[])": {
			// Others' keys are neither released nor returned.
			{what: "release the victim's keys with their holder and tokens",
				run:    rowsOf(`SELECT * FROM pgleader.release_many($1, ARRAY[$2, $3], ARRAY[$4, $5]::bigint[])`, victimHolder, victimKey, victimSetKey, tok, stok),
				verify: wantRows(0)},
		},
		"pgleader.renew(text,text,bigint,interval)": {
			{what: "renew the victim's term for max_ttl", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.renew($1, $2, $3, '10 minutes')`, victimKey, victimHolder, tok)},
			{what: "renew an own term for " + calendarTTL, code: anyOutcome,
				run: rowsOf(`SELECT pgleader.renew($1, $2, $3, $4::interval)`, hostileKey, hostileHolder, e.hToken, calendarTTL)},
		},
		"pgleader.renew_many(text,text[],bigint[],interval)": {
			{what: "renew the victim's keys for max_ttl",
				run:    rowsOf(`SELECT * FROM pgleader.renew_many($1, ARRAY[$2, $3], ARRAY[$4, $5]::bigint[], '10 minutes')`, victimHolder, victimKey, victimSetKey, tok, stok),
				verify: wantRows(0)},
			{what: "renew an own key for " + calendarTTL, code: anyOutcome,
				run: rowsOf(`SELECT * FROM pgleader.renew_many($1, ARRAY[$2], ARRAY[$3::bigint], $4::interval)`, hostileHolder, hostileKey, e.hToken, calendarTTL)},
		},
		"pgleader.renew_bound(text,text,bigint,interval,interval)": {
			{what: "renew the victim's term on a session of its own", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.renew_bound($1, $2, $3, '10 minutes', NULL)`, victimKey, victimHolder, tok)},
		},
		"pgleader.renew_term(text,text,bigint,interval)": {
			{what: "renew the victim's term", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.renew_term($1, $2, $3, '10 minutes')`, victimKey, victimHolder, tok)},
		},
		"pgleader.renew_term(text,text,bigint,interval,interval)": {
			{what: "renew the victim's term with a min_term", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.renew_term($1, $2, $3, '10 minutes', '0')`, victimKey, victimHolder, tok)},
		},
		"pgleader.resign(text,bigint)": {
			{what: "resign the victim's term by its token", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.resign($1, $2)`, victimKey, tok)},
			{what: "resign the victim's term, whatever its token", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.resign($1, NULL)`, victimKey)},
		},
		"pgleader.set_acquire(text,text,text[],interval,integer,integer,bigint[],integer,text[])": {
			{what: "confirm the term V's set handed to its member",
				run: textsOf(`SELECT keys::text FROM pgleader.set_acquire($1, $2, '{}', '1 minute', 0, 0, NULL, NULL, ARRAY[$3])`,
					victimSet, victimCandidate, victimHanded),
				verify: wantTexts("{}")},
			{what: "acquire the victim's set key through its set", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.set_acquire($1, $2, ARRAY[$3], '1 minute', 0, 0, NULL)`, victimSet, victimHolder, victimSetKey)},
			// A set's members are counted per role: H joins a set of the
			// victim's set's name as itself, and V's membership is untouched.
			{what: "join a set of the victim's set's name with an own key",
				run: rowsOf(`SELECT * FROM pgleader.set_acquire($1, $2, '{h-s1}', '1 minute', 0, 0, NULL)`, victimSet, hostileHolder)},
		},
		"pgleader.set_release(text,text,text[],bigint[],boolean,boolean[])": {
			{what: "leave the victim's set as its member, releasing its key",
				run:    rowsOf(`SELECT * FROM pgleader.set_release($1, $2, ARRAY[$3], ARRAY[$4::bigint], true)`, victimSet, victimHolder, victimSetKey, stok),
				verify: wantRows(0)},
			{what: "hand the victim's set key to a member of H's own",
				run: rowsOf(`SELECT * FROM pgleader.set_release($1, $2, ARRAY[$3], ARRAY[$4::bigint], false, '{true}')`,
					victimSet, victimHolder, victimSetKey, stok),
				verify: wantRows(0)},
		},
		"pgleader.set_renew(text,text,text[],bigint[],interval,integer)": {
			{what: "renew an own set membership for " + calendarTTL, code: anyOutcome,
				run: rowsOf(`SELECT * FROM pgleader.set_renew($1, $2, '{}', '{}', $3::interval, 0)`, hostileSet, hostileHolder, calendarTTL)},
			{what: "renew the victim's set key and membership",
				run: textsOf(`SELECT renewed::text FROM pgleader.set_renew($1, $2, ARRAY[$3], ARRAY[$4::bigint], '10 minutes', 5)`,
					victimSet, victimHolder, victimSetKey, stok),
				verify: wantTexts("{}")},
		},
		"pgleader.set_bind(text,text,interval,text[])": {
			// Members are per role: H binds a member of its own of that
			// name; V's row and lock are untouched, and V's keys sent
			// with it are not lapsed.
			{what: "bind as the victim's set member",
				run:    textsOf(`SELECT bound::text FROM pgleader.set_bind($1, $2, '1 minute')`, victimSet, victimHolder),
				verify: wantTexts("true")},
			{what: "bind as the victim's set member, sending the victim's set keys",
				run: textsOf(`SELECT lapsed::text FROM pgleader.set_bind($1, $2, '1 minute', ARRAY[$3, $4])`,
					victimSet, victimHolder, victimSetKey, victimHanded),
				verify: wantTexts("0")},
		},
		"pgleader.set_wake(text,text,text[])": {
			// H's own member of the victim's holder's name, bound to this
			// session, counts as ended to this session: the wake still
			// lapses none of V's keys.
			{what: "wake for the victim's set keys after binding a member of the victim's holder's name",
				run: func(ctx context.Context, c *pgx.Conn) (hostileResult, error) {
					if _, err := c.Exec(ctx, `SELECT * FROM pgleader.set_bind($1, $2, '1 minute')`, victimSet, victimHolder); err != nil {
						return hostileResult{}, err
					}
					return textsOf(`SELECT lapsed::text FROM pgleader.set_wake($1, 'h-other', ARRAY[$2, $3])`,
						victimSet, victimSetKey, victimHanded)(ctx, c)
				},
				verify: wantTexts("0")},
		},
		"pgleader.wait_member(text,text,interval)": {
			// The lock waited on is H's own member's, not V's.
			{what: "wait for the victim's set member's lock",
				run:    textsOf(`SELECT pgleader.wait_member($1, $2, '10 milliseconds')::text`, victimSet, victimHolder),
				verify: wantTexts("true")},
		},
		"pgleader.set_status(text,text[])": {
			// H sees the members of its own role only.
			{what: "list the members of the victim's set",
				run:    textsOf(`SELECT owner FROM pgleader.set_status($1) WHERE member`, victimSet),
				verify: (*hostileEnv).onlyOwnMembers},
		},
		"pgleader.set_tick(text,text,text[],bigint[],interval,integer)": {
			{what: "tick the victim's set with its key",
				run: textsOf(`SELECT lost::text FROM pgleader.set_tick($1, $2, ARRAY[$3], ARRAY[$4::bigint], '10 minutes', 1)`,
					victimSet, victimHolder, victimSetKey, stok),
				verify: wantTexts("{" + victimSetKey + "}")},
		},
		"pgleader.take(text,text,interval)": {
			{what: "take the victim's key as its holder", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.take($1, $2, '1 minute')`, victimKey, victimHolder)},
		},
		"pgleader.take(text,text,interval,interval)": {
			{what: "take the victim's key as its holder, with a keep", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.take($1, $2, '1 minute', '0')`, victimKey, victimHolder)},
		},
		"pgleader.transfer(text,text)": {
			{what: "transfer the victim's term to its candidate", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.transfer($1, $2)`, victimKey, victimCandidate)},
			{what: "transfer the victim's term to H's holder", code: refused, msg: other,
				run: rowsOf(`SELECT * FROM pgleader.transfer($1, $2)`, victimKey, hostileHolder)},
		},
		"pgleader.withdraw(text,text)": {
			{what: "withdraw the victim's candidate", code: refused, msg: other,
				run: rowsOf(`SELECT pgleader.withdraw($1, $2)`, victimKey, victimCandidate)},
		},
	}
}

// onlyOwnMembers: every member set_status listed to H is a member of H's
// role.
func (e *hostileEnv) onlyOwnMembers(r hostileResult) string {
	rows, err := e.db.Pool.Query(context.Background(),
		`SELECT owner FROM pgleader.set_member WHERE set_name = $1 AND role = $2 AND expires_at > clock_timestamp()`, victimSet, e.h)
	if err != nil {
		return err.Error()
	}
	own, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	for _, m := range r.texts {
		if !strings.Contains("\x00"+strings.Join(own, "\x00")+"\x00", "\x00"+m+"\x00") {
			return fmt.Sprintf("set_status lists member %q, not one of H's (%q)", m, own)
		}
	}
	return ""
}

// testTables: every direct read or write of every table of the schema is
// refused.
func (e *hostileEnv) testTables(t *testing.T) {
	rows, err := e.db.Pool.Query(context.Background(), `
		SELECT c.relname::text,
		       (SELECT a.attname::text FROM pg_catalog.pg_attribute AS a
		         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum LIMIT 1)
		  FROM pg_catalog.pg_class AS c
		 WHERE c.relnamespace = 'pgleader'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
		 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type table struct{ name, col string }
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var tb table
		err := r.Scan(&tb.name, &tb.col)
		return tb, err
	})
	if err != nil {
		t.Fatal(err)
	}
	sw := e.sweep()
	if len(tables) < 7 {
		t.Fatalf("found %d tables in schema pgleader; want lease, fence, candidate, set_member, settings, server_epoch, steerer at least", len(tables))
	}
	for _, tb := range tables {
		q := pgx.Identifier{"pgleader", tb.name}.Sanitize()
		col := pgx.Identifier{tb.col}.Sanitize()
		for _, op := range []struct{ name, sql string }{
			{"SELECT", "SELECT * FROM " + q + " LIMIT 1"},
			{"SELECT_FOR_UPDATE", "SELECT 1 FROM " + q + " FOR UPDATE"},
			{"INSERT", "INSERT INTO " + q + " DEFAULT VALUES"},
			{"UPDATE", "UPDATE " + q + " SET " + col + " = " + col},
			{"DELETE", "DELETE FROM " + q},
			{"TRUNCATE", "TRUNCATE " + q},
			{"COPY_TO", "COPY " + q + " TO STDOUT"},
			{"COPY_FROM", "COPY " + q + " FROM STDIN"},
		} {
			t.Run(tb.name+"/"+op.name, func(t *testing.T) {
				err := sw.attempt(t, op.sql, func(ctx context.Context) error {
					switch op.name {
					case "COPY_TO":
						_, err := e.hc.PgConn().CopyTo(ctx, io.Discard, op.sql)
						return err
					case "COPY_FROM":
						_, err := e.hc.PgConn().CopyFrom(ctx, strings.NewReader(""), op.sql)
						return err
					}
					_, err := e.hc.Exec(ctx, op.sql)
					return err
				})
				wantCode(t, op.sql, err, "42501", "permission denied for table "+tb.name)
			})
		}
	}
}

// testDDL: H declares, alters, drops, comments, grants and locks the
// schema's objects. Each statement is refused, or (a GRANT or REVOKE of a
// privilege H holds without the grant option, a VACUUM or ANALYZE of a
// table H does not own) is a no-op that PostgreSQL only warns about; the
// catalog check after each shows nothing changed.
func (e *hostileEnv) testDDL(t *testing.T) {
	h := pgx.Identifier{e.h}.Sanitize()
	v := pgx.Identifier{e.v}.Sanitize()
	const acquireSig = "pgleader.acquire(text, text, interval, bigint, text)"
	sw := e.sweep()
	for _, d := range []struct {
		sql  string
		noop bool // PostgreSQL may only warn
	}{
		{sql: `CREATE TABLE pgleader.h_table (x int)`},
		{sql: `CREATE TABLE pgleader.lease (x int)`},
		{sql: `CREATE VIEW pgleader.h_view AS SELECT 1 AS x`},
		{sql: `CREATE FUNCTION pgleader.h_fn() RETURNS int LANGUAGE sql AS 'SELECT 1'`},
		{sql: `CREATE OR REPLACE FUNCTION pgleader.acquire(p_key text, p_owner text, p_ttl interval, p_floor bigint DEFAULT 0, p_value text DEFAULT NULL)
		       RETURNS TABLE(acquired boolean, holder text, token bigint, expires_at timestamptz, db_now timestamptz, value text)
		       LANGUAGE sql AS $$ SELECT true, p_owner, 1::bigint, clock_timestamp() + interval '100 years', clock_timestamp(), p_value $$`},
		{sql: `CREATE OR REPLACE FUNCTION pgleader._caller() RETURNS name LANGUAGE sql AS $$ SELECT 'postgres'::name $$`},
		{sql: `CREATE OR REPLACE FUNCTION pgleader._lease_draw() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$`},
		{sql: `CREATE TYPE pgleader.h_type AS (x int)`},
		{sql: `CREATE OPERATOR pgleader.= (LEFTARG = text, RIGHTARG = text, FUNCTION = pg_catalog.texteq)`},
		{sql: `CREATE SEQUENCE pgleader.h_seq`},
		{sql: `CREATE INDEX ON pgleader.lease (holder)`},
		{sql: `ALTER TABLE pgleader.lease ADD COLUMN h int`},
		{sql: `ALTER TABLE pgleader.lease DROP CONSTRAINT lease_token_nonnegative`},
		{sql: `ALTER TABLE pgleader.lease DISABLE TRIGGER lease_draw`},
		{sql: `ALTER TABLE pgleader.lease ENABLE ROW LEVEL SECURITY`},
		{sql: `ALTER TABLE pgleader.lease OWNER TO ` + h},
		{sql: `ALTER TABLE pgleader.lease RENAME TO lease_old`},
		{sql: `ALTER TABLE pgleader.settings DROP CONSTRAINT settings_max_ttl_check`},
		{sql: `ALTER TABLE pgleader.settings ALTER COLUMN epoch SET DEFAULT 0`},
		{sql: `CREATE TRIGGER h_trigger BEFORE UPDATE ON pgleader.lease FOR EACH ROW EXECUTE FUNCTION pgleader.fence_trigger('token')`},
		{sql: `DROP TRIGGER lease_draw ON pgleader.lease`},
		{sql: `CREATE RULE h_rule AS ON UPDATE TO pgleader.lease DO INSTEAD NOTHING`},
		{sql: `CREATE POLICY h_policy ON pgleader.lease USING (true)`},
		{sql: `DROP TABLE pgleader.lease`},
		{sql: `DROP TABLE pgleader.settings CASCADE`},
		{sql: `DROP FUNCTION ` + acquireSig},
		{sql: `DROP FUNCTION pgleader._lease_draw() CASCADE`},
		{sql: `DROP SCHEMA pgleader CASCADE`},
		{sql: `ALTER SCHEMA pgleader RENAME TO h_schema`},
		{sql: `ALTER SCHEMA pgleader OWNER TO ` + h},
		{sql: `ALTER FUNCTION ` + acquireSig + ` OWNER TO ` + h},
		{sql: `ALTER FUNCTION ` + acquireSig + ` SECURITY INVOKER`},
		{sql: `ALTER FUNCTION pgleader._caller() RESET search_path`},
		{sql: `ALTER FUNCTION pgleader.release(text, text, bigint) RENAME TO release_old`},
		{sql: `COMMENT ON TABLE pgleader.lease IS 'h'`},
		{sql: `COMMENT ON FUNCTION ` + acquireSig + ` IS 'h'`},
		{sql: `COMMENT ON SCHEMA pgleader IS 'h'`},
		{sql: `GRANT ALL ON TABLE pgleader.lease TO ` + h},
		{sql: `GRANT ALL ON ALL TABLES IN SCHEMA pgleader TO ` + h},
		{sql: `GRANT EXECUTE ON FUNCTION pgleader._epoch_bump() TO ` + h},
		{sql: `GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgleader TO ` + h},
		{sql: `GRANT CREATE ON SCHEMA pgleader TO ` + h, noop: true},
		{sql: `GRANT EXECUTE ON FUNCTION ` + acquireSig + ` TO PUBLIC`, noop: true},
		{sql: `GRANT USAGE ON SCHEMA pgleader TO PUBLIC`, noop: true},
		{sql: `REVOKE EXECUTE ON FUNCTION ` + acquireSig + ` FROM ` + v, noop: true},
		{sql: `REVOKE USAGE ON SCHEMA pgleader FROM ` + v, noop: true},
		{sql: `REINDEX TABLE pgleader.lease`},
		{sql: `CLUSTER pgleader.lease USING lease_pkey`},
		{sql: `VACUUM FULL pgleader.lease`, noop: true},
		{sql: `ANALYZE pgleader.settings`, noop: true},
		// LOCK TABLE needs a transaction block: BEGIN; LOCK …; COMMIT.
		{sql: `BEGIN; LOCK TABLE pgleader.lease IN ACCESS EXCLUSIVE MODE; COMMIT`},
		{sql: `BEGIN; LOCK TABLE pgleader.settings IN ACCESS SHARE MODE; COMMIT`},
	} {
		t.Run(strings.Fields(d.sql)[0]+"/"+firstLine(d.sql), func(t *testing.T) {
			err := sw.attempt(t, d.sql, func(ctx context.Context) error {
				_, err := e.hc.Exec(ctx, d.sql)
				if err != nil && strings.HasPrefix(d.sql, "BEGIN") {
					_, _ = e.hc.Exec(ctx, "ROLLBACK")
				}
				return err
			})
			if !d.noop || err != nil {
				wantCode(t, d.sql, err, "42501", "")
			}
		})
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// testSession: H tries to act as V (SET ROLE, set_config, SET SESSION
// AUTHORIZATION, a login default of role V), to switch triggers off, and
// to shadow the schema's objects with temporary ones of its own; then
// releases the victim's term. Every refusal, and the release's, holds.
func (e *hostileEnv) testSession(t *testing.T) {
	ctx := context.Background()
	v := pgx.Identifier{e.v}.Sanitize()
	h := pgx.Identifier{e.h}.Sanitize()
	for _, s := range []struct{ what, sql, msg string }{
		{"SET ROLE to V", `SET ROLE ` + v, "permission denied to set role"},
		{"set_config of role to V", `SELECT set_config('role', '` + e.v + `', false)`, "permission denied to set role"},
		{"SET SESSION AUTHORIZATION V", `SET SESSION AUTHORIZATION ` + v, "permission denied to set session authorization"},
		// With triggers off (replica), lease_draw would not guard tokens.
		{"session_replication_role replica", `SET session_replication_role = replica`, "permission denied to set parameter"},
	} {
		t.Run(s.what, func(t *testing.T) {
			err := e.attempt(t, s.what, func(ctx context.Context) error {
				_, err := e.hc.Exec(ctx, s.sql)
				return err
			})
			wantCode(t, s.what, err, "42501", s.msg)
		})
	}

	releaseVictim := func(t *testing.T, c *pgx.Conn, what string) {
		t.Helper()
		err := e.attempt(t, what, func(ctx context.Context) error {
			_, err := c.Exec(ctx, `SELECT pgleader.release($1, $2, $3)`, victimKey, victimHolder, e.token)
			return err
		})
		wantCode(t, what, err, "42501", "belongs to role")
	}

	// PostgreSQL lets a role set its own login defaults, role included; at
	// login it refuses the role H is not a member of, and the session runs
	// as H.
	t.Run("login default role V", func(t *testing.T) {
		if _, err := e.hc.Exec(ctx, `ALTER ROLE `+h+` SET role = `+v); err != nil {
			// A server that refuses the default refuses the attack.
			wantCode(t, "ALTER ROLE H SET role = V", err, "42501", "")
			return
		}
		defer mustExec(t, e.db.Pool, `ALTER ROLE `+h+` RESET role`)
		c := hostileConnect(t, e.hURL)
		var cur, role string
		if err := c.QueryRow(ctx, `SELECT current_user::text, current_setting('role')`).Scan(&cur, &role); err != nil {
			t.Fatal(err)
		}
		if cur != e.h || role == e.v {
			t.Fatalf("a new session of H runs as %s with role %s", cur, role)
		}
		releaseVictim(t, c, "release of the victim's term from a session whose login default is role V")
	})

	// The functions pin search_path with pg_temp last and qualify every
	// name; H's temporary objects named as the schema's change nothing.
	t.Run("temporary shadows", func(t *testing.T) {
		c := hostileConnect(t, e.hURL)
		for _, sql := range []string{
			`CREATE TEMPORARY TABLE lease (key text, role name, holder text, token bigint)`,
			`CREATE TEMPORARY TABLE settings (max_ttl interval, epoch bigint)`,
			`CREATE FUNCTION pg_temp._caller() RETURNS name LANGUAGE sql AS $$ SELECT '` + e.v + `'::name $$`,
			`CREATE FUNCTION pg_temp._own(name, boolean) RETURNS boolean LANGUAGE sql AS 'SELECT true'`,
			`SET search_path = pg_temp, pgleader, pg_catalog`,
		} {
			if _, err := c.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		releaseVictim(t, c, "release of the victim's term under H's temporary shadows")
	})
}
