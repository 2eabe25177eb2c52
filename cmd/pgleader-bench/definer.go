package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgleader/pgleader/internal/scratch"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/sqlfence"
)

// The rows of the definer table, in the order printed.
const (
	rowAcquire     = "acquire (a free key)"
	rowRelease     = "release"
	rowRenew       = "renew_term (a held key)"
	rowCampaign    = "campaign, registering a candidate (key held by another owner)"
	rowHandOff     = "hand_off (to the registered candidate)"
	rowTake        = "take (the handed-off term)"
	rowAcqMany     = "acquire_many (100 keys)"
	rowRenewMany   = "renew_many (100 keys)"
	rowReleaseMany = "release_many (100 keys)"
	rowFence       = "fence_write (the statement, in a transaction)"
	rowFenceTx     = "fenced transaction: BEGIN, fence_write, UPDATE, COMMIT"
	rowGuard       = "lease_guard (the statement, in a transaction)"
	rowGuardTx     = "lease-guarded transaction: BEGIN, lease_guard, UPDATE, COMMIT"
	rowColumn      = "column fence: conditional UPDATE, no pgleader function (control)"
)

var definerRows = []string{rowAcquire, rowRelease, rowRenew, rowCampaign, rowHandOff, rowTake,
	rowAcqMany, rowRenewMany, rowReleaseMany, rowFence, rowFenceTx, rowGuard, rowGuardTx, rowColumn}

// definerWarm is how many rounds each side runs unmeasured first: plans,
// caches and the functions' first calls.
const definerWarm = 30

// definerKeys is the size of the set acquire_many and renew_many take.
const definerKeys = 100

// definerTTL is every lease's TTL: the longest the schema allows by
// default (max_ttl), far beyond the measurement.
const definerTTL = 10 * time.Minute

// definerSide is one schema version: its own scratch database and an
// application role, and one warm connection as that role.
type definerSide struct {
	label   string
	role    string
	about   string // what the role may do on this version
	conn    *pgx.Conn
	record  bool
	samples map[string][]time.Duration

	held     int64  // the token of "held", kept by bench-a
	hoHolder string // who holds "handoff"
	hoToken  int64
	setKeys  []string
	n        int64
}

// definerTable measures what schema version 13's privilege boundary costs:
// each application statement as an application role granted with
// pgleader.grant_usage, on a database at version 12 (functions run as the
// caller, the role has table privileges) and on one at version 13
// (SECURITY DEFINER functions, role checks, no table privileges),
// interleaved, on one warm connection per version.
func (b *bench) definerTable(ctx context.Context) error {
	if *definerSamples < 1 {
		return fmt.Errorf("-definer-samples %d: want at least 1", *definerSamples)
	}
	v12, done12, err := b.openDefiner(ctx, 12, "v12")
	if err != nil {
		return err
	}
	defer done12()
	v13, done13, err := b.openDefiner(ctx, migrations.Latest, fmt.Sprintf("v%d", migrations.Latest))
	if err != nil {
		return err
	}
	defer done13()
	sides := []*definerSide{v12, v13}

	cycles := []func(context.Context, *definerSide) error{
		definerAcquireRelease, definerRenew, definerCampaign, definerHandOff,
		definerMany, definerFence, definerGuard, definerColumn,
	}
	start := time.Now()
	for i := 0; i < definerWarm+*definerSamples; i++ {
		// Alternate which version goes first, so neither is always the one
		// that follows the other's statements.
		first, second := sides[i%2], sides[1-i%2]
		for _, s := range sides {
			s.record = i >= definerWarm
		}
		// And shuffle the statements' order, so that nothing periodic (a
		// checkpoint, another session's commits) falls on one statement
		// of one version more than on the other's.
		rand.Shuffle(len(cycles), func(a, b int) { cycles[a], cycles[b] = cycles[b], cycles[a] })
		for _, c := range cycles {
			if err := c(ctx, first); err != nil {
				return err
			}
			if err := c(ctx, second); err != nil {
				return err
			}
		}
	}
	took := time.Since(start)

	fmt.Printf("## SECURITY DEFINER cost (schema version 12 against %d, as an application role; %d interleaved samples per statement and version, %.0f s)\n\n",
		migrations.Latest, *definerSamples, took.Seconds())
	fmt.Printf("v12: invoker, table grants. v%d: definer, role checks. One warm pgx.Conn per version as its role, statements unprepared (as pgleader sends them); the versions alternate statement by statement, which goes first alternating by sample, the statements in a new random order each sample; %d rounds unmeasured first.\n", migrations.Latest, definerWarm)
	for _, s := range sides {
		fmt.Println("- " + s.about)
	}
	fmt.Println()
	fmt.Printf("| statement | %[1]s p50 | %[2]s p50 | ratio p50 (%[2]s/%[1]s) | %[1]s p90 | %[2]s p90 | ratio p90 | samples |\n", v12.label, v13.label)
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, row := range definerRows {
		a, c := v12.samples[row], v13.samples[row]
		a50, c50 := percentile(a, 50), percentile(c, 50)
		a90, c90 := percentile(a, 90), percentile(c, 90)
		fmt.Printf("| %s | %s | %s | %.2f× | %s | %s | %.2f× | %d |\n", row, ms3(a50), ms3(c50), ratio(c50, a50),
			ms3(a90), ms3(c90), ratio(c90, a90), min(len(a), len(c)))
	}
	fmt.Println()
	return nil
}

func ms3(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}

func ratio(x, y time.Duration) float64 {
	if y == 0 {
		return 0
	}
	return float64(x) / float64(y)
}

// openDefiner creates a scratch database at version, a LOGIN role granted
// with pgleader.grant_usage, the application's table, and a connection as
// the role; done closes and drops them, role included.
func (b *bench) openDefiner(ctx context.Context, version uint, label string) (s *definerSide, done func(), err error) {
	var undo []func()
	done = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			done()
			err = fmt.Errorf("%s: %w", label, err)
		}
	}()
	cleanupCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 30*time.Second)
	}

	dbURL, drop, err := scratch.Database(ctx, b.server, "pgleader_bench_")
	if err != nil {
		return nil, nil, err
	}
	undo = append(undo, drop)
	if err := migrations.ToURL(ctx, dbURL, version); err != nil {
		return nil, nil, err
	}
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, nil, err
	}
	undo = append(undo, func() {
		c, cancel := cleanupCtx()
		defer cancel()
		admin.Close(c)
	})

	suffix := make([]byte, 6)
	_, _ = crand.Read(suffix)
	password := make([]byte, 12)
	_, _ = crand.Read(password)
	role := "pgleader_bench_app_" + hex.EncodeToString(suffix)
	ident := pgx.Identifier{role}.Sanitize()
	// A password, for servers that ask for one; a trusting server ignores it.
	pw := hex.EncodeToString(password)
	if _, err := admin.Exec(ctx, "CREATE ROLE "+ident+" LOGIN PASSWORD '"+pw+"'"); err != nil {
		return nil, nil, err
	}
	undo = append(undo, func() {
		c, cancel := cleanupCtx()
		defer cancel()
		_, _ = admin.Exec(c, "DROP OWNED BY "+ident)
		if _, err := admin.Exec(c, "DROP ROLE "+ident); err != nil {
			fmt.Fprintf(os.Stderr, "pgleader-bench: drop role %s: %v\n", role, err)
		}
	})
	if _, err := admin.Exec(ctx, `SELECT pgleader.grant_usage($1)`, role); err != nil {
		return nil, nil, err
	}
	if _, err := admin.Exec(ctx, `CREATE TABLE rows (id int PRIMARY KEY, v bigint, fence bigint NOT NULL DEFAULT 0);
		INSERT INTO rows VALUES (1, 0, 0), (2, 0, 0);
		GRANT SELECT, UPDATE ON rows TO `+ident); err != nil {
		return nil, nil, err
	}

	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, nil, err
	}
	u.User = url.UserPassword(role, pw)
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, nil, err
	}
	// As pgleader sends its lease statements: unprepared, one round trip.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.RuntimeParams["application_name"] = "bench-definer-" + label
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	undo = append(undo, func() {
		c, cancel := cleanupCtx()
		defer cancel()
		conn.Close(c)
	})
	s = &definerSide{label: label, role: role, conn: conn, samples: make(map[string][]time.Duration)}

	// What the role is, and what it may do, on this version.
	var user string
	var tablePriv bool
	var definer, measured int
	if err := conn.QueryRow(ctx, `SELECT current_user, has_table_privilege('pgleader.lease', 'UPDATE'),
			count(*) FILTER (WHERE p.prosecdef), count(*)
		  FROM pg_catalog.pg_proc AS p
		 WHERE p.pronamespace = 'pgleader'::regnamespace
		   AND p.proname = ANY (ARRAY['acquire', 'release', 'renew_term', 'campaign', 'hand_off', 'take',
		                              'acquire_many', 'renew_many', 'release_many', 'fence_write', 'lease_guard'])
		 GROUP BY 1, 2`).Scan(&user, &tablePriv, &definer, &measured); err != nil {
		return nil, nil, err
	}
	if user != role {
		return nil, nil, fmt.Errorf("connected as %s, not %s", user, role)
	}
	s.about = fmt.Sprintf("%s: schema version %d, as role %s: UPDATE on pgleader.lease %v; SECURITY DEFINER: %d of the %d functions (overloads counted) of the measured names",
		label, version, role, tablePriv, definer, measured)

	// The keys the cycles use, taken by the role itself (from version 13 a
	// key belongs to the role that first acquired it).
	if s.held, err = s.acquire(ctx, "held", "bench-a"); err != nil {
		return nil, nil, err
	}
	if _, err = s.acquire(ctx, "campaign", "bench-a"); err != nil {
		return nil, nil, err
	}
	if s.hoToken, err = s.acquire(ctx, "handoff", "bench-a"); err != nil {
		return nil, nil, err
	}
	s.hoHolder = "bench-a"
	for i := 0; i < definerKeys; i++ {
		s.setKeys = append(s.setKeys, fmt.Sprintf("set-%03d", i))
	}
	return s, done, nil
}

func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

func (s *definerSide) acquire(ctx context.Context, key, owner string) (int64, error) {
	var ok bool
	var token int64
	if err := s.conn.QueryRow(ctx, `SELECT acquired, token FROM pgleader.acquire($1, $2, $3)`,
		key, owner, interval(definerTTL)).Scan(&ok, &token); err != nil {
		return 0, fmt.Errorf("acquire %s: %w", key, err)
	}
	if !ok {
		return 0, fmt.Errorf("acquire %s: not acquired", key)
	}
	return token, nil
}

// timed runs f, and records its duration under row once s records.
func (s *definerSide) timed(row string, f func() error) error {
	start := time.Now()
	err := f()
	d := time.Since(start)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", s.label, row, err)
	}
	if s.record {
		s.samples[row] = append(s.samples[row], d)
	}
	return nil
}

// definerAcquireRelease acquires a free key and releases it again.
func definerAcquireRelease(ctx context.Context, s *definerSide) error {
	var ok bool
	var token int64
	if err := s.timed(rowAcquire, func() error {
		if err := s.conn.QueryRow(ctx, `SELECT acquired, token FROM pgleader.acquire($1, $2, $3)`,
			"free", "bench-a", interval(definerTTL)).Scan(&ok, &token); err != nil {
			return err
		}
		if !ok {
			return errors.New("not acquired")
		}
		return nil
	}); err != nil {
		return err
	}
	return s.timed(rowRelease, func() error {
		if err := s.conn.QueryRow(ctx, `SELECT pgleader.release($1, $2, $3)`, "free", "bench-a", token).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return errors.New("not released")
		}
		return nil
	})
}

func definerRenew(ctx context.Context, s *definerSide) error {
	return s.timed(rowRenew, func() error {
		var expires *time.Time
		if err := s.conn.QueryRow(ctx, `SELECT expires_at FROM pgleader.renew_term($1, $2, $3, $4)`,
			"held", "bench-a", s.held, interval(definerTTL)).Scan(&expires); err != nil {
			return err
		}
		if expires == nil {
			return errors.New("not renewed")
		}
		return nil
	})
}

// campaign registers (or refreshes) bench-b as a candidate of a key
// bench-a holds.
func (s *definerSide) campaign(ctx context.Context, key, owner string) error {
	var ok bool
	if err := s.conn.QueryRow(ctx, `SELECT acquired FROM pgleader.campaign($1, $2, $3, 0, NULL, 0, $4)`,
		key, owner, interval(definerTTL), interval(time.Minute)).Scan(&ok); err != nil {
		return err
	}
	if ok {
		return fmt.Errorf("%s acquired %s, held by another owner", owner, key)
	}
	return nil
}

func definerCampaign(ctx context.Context, s *definerSide) error {
	return s.timed(rowCampaign, func() error { return s.campaign(ctx, "campaign", "bench-b") })
}

// definerHandOff registers the other owner as a candidate (not measured),
// hands the term off to it and takes it there.
func definerHandOff(ctx context.Context, s *definerSide) error {
	next := "bench-b"
	if s.hoHolder == next {
		next = "bench-a"
	}
	if err := s.campaign(ctx, "handoff", next); err != nil {
		return fmt.Errorf("%s: register %s: %w", s.label, next, err)
	}
	if err := s.timed(rowHandOff, func() error {
		var released bool
		var successor *string
		if err := s.conn.QueryRow(ctx, `SELECT released, successor FROM pgleader.hand_off($1, $2, $3)`,
			"handoff", s.hoHolder, s.hoToken).Scan(&released, &successor); err != nil {
			return err
		}
		if !released || successor == nil || *successor != next {
			return fmt.Errorf("released %v, successor %v, want %s", released, successor, next)
		}
		return nil
	}); err != nil {
		return err
	}
	return s.timed(rowTake, func() error {
		var ok bool
		if err := s.conn.QueryRow(ctx, `SELECT acquired, token FROM pgleader.take($1, $2, $3)`,
			"handoff", next, interval(definerTTL)).Scan(&ok, &s.hoToken); err != nil {
			return err
		}
		if !ok {
			return errors.New("not taken")
		}
		s.hoHolder = next
		return nil
	})
}

// definerMany acquires, renews and releases the set's keys.
func definerMany(ctx context.Context, s *definerSide) error {
	var keys []string
	var tokens []int64
	if err := s.timed(rowAcqMany, func() error {
		rows, err := s.conn.Query(ctx, `SELECT key, token FROM pgleader.acquire_many($1, $2, $3, $4)`,
			s.setKeys, "bench-a", interval(definerTTL), len(s.setKeys))
		if err != nil {
			return err
		}
		keys, tokens = keys[:0], tokens[:0]
		var k string
		var t int64
		if _, err := pgx.ForEachRow(rows, []any{&k, &t}, func() error {
			keys, tokens = append(keys, k), append(tokens, t)
			return nil
		}); err != nil {
			return err
		}
		if len(keys) != len(s.setKeys) {
			return fmt.Errorf("acquired %d of %d keys", len(keys), len(s.setKeys))
		}
		return nil
	}); err != nil {
		return err
	}
	count := func(sql string, args ...any) error {
		rows, err := s.conn.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if n != len(keys) {
			return fmt.Errorf("%d of %d keys", n, len(keys))
		}
		return nil
	}
	if err := s.timed(rowRenewMany, func() error {
		return count(`SELECT key, expires_at FROM pgleader.renew_many($1, $2, $3, $4)`, "bench-a", keys, tokens, interval(definerTTL))
	}); err != nil {
		return err
	}
	return s.timed(rowReleaseMany, func() error {
		return count(`SELECT key FROM pgleader.release_many($1, $2, $3)`, "bench-a", keys, tokens)
	})
}

// guardedTx times a transaction of BEGIN, the guard statement, one UPDATE of
// the application's table and COMMIT, and the guard statement alone.
func (s *definerSide) guardedTx(ctx context.Context, txRow, stmtRow, guard string, args ...any) error {
	s.n++
	return s.timed(txRow, func() error {
		tx, err := s.conn.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := s.timed(stmtRow, func() error { _, err := tx.Exec(ctx, guard, args...); return err }); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE rows SET v = $1 WHERE id = 1`, s.n); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
}

func definerFence(ctx context.Context, s *definerSide) error {
	return s.guardedTx(ctx, rowFenceTx, rowFence, `SELECT pgleader.fence_write($1, $2)`, "resource", s.held)
}

func definerGuard(ctx context.Context, s *definerSide) error {
	return s.guardedTx(ctx, rowGuardTx, rowGuard, `SELECT pgleader.lease_guard($1, $2)`, "held", s.held)
}

// definerColumn is the control: a fenced write that calls no pgleader
// function.
func definerColumn(ctx context.Context, s *definerSide) error {
	column := sqlfence.Column{Table: pgx.Identifier{"rows"}, KeyColumn: "id", FenceColumn: "fence"}
	s.n++
	return s.timed(rowColumn, func() error { return column.Write(ctx, s.conn, 2, s.held, sqlfence.Set("v", s.n)) })
}
