package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgleader/pgleader/sqlfence"
)

// schema is the run's fenced store and its instrumentation:
//
//   - chaos_digest, the recipe's table: one row whose fence column is the
//     highest token that claimed or wrote it;
//   - chaos_log, one row per accepted unit, inserted by the same statement
//     as the fenced write, so only accepted units are logged;
//   - chaos_lease_audit, every change to pgleader.lease, recorded by a
//     trigger in the changing transaction: the lease's own history on the
//     database clock, including renewals whose answer the replica never got.
//
// Both record in server the server that committed the row: the setting
// chaos.server, which the run's own servers are started with (pg1, pg2, …),
// so that after a failover the checker knows which rows the surviving
// servers inherited from the one that was lost.
const schema = `
CREATE TABLE IF NOT EXISTS chaos_digest (name text PRIMARY KEY, body text, fence bigint);
CREATE TABLE IF NOT EXISTS chaos_log (
    id         bigserial   PRIMARY KEY,
    key        text        NOT NULL DEFAULT '',
    owner      text        NOT NULL,
    token      bigint      NOT NULL,
    term_start timestamptz NOT NULL,
    seq        int         NOT NULL,
    logged_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    server     text        DEFAULT current_setting('chaos.server', true)
);
ALTER TABLE chaos_log ADD COLUMN IF NOT EXISTS key text NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS chaos_lease_audit (
    id           bigserial   PRIMARY KEY,
    op           text        NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    key          text        NOT NULL,
    old_holder   text, old_token bigint, old_acquired timestamptz, old_expires timestamptz,
    new_holder   text, new_token bigint, new_acquired timestamptz, new_expires timestamptz,
    server       text        DEFAULT current_setting('chaos.server', true)
);
ALTER TABLE chaos_lease_audit ADD COLUMN IF NOT EXISTS handed_off boolean NOT NULL DEFAULT false;
ALTER TABLE chaos_lease_audit ADD COLUMN IF NOT EXISTS new_renewed timestamptz;
ALTER TABLE chaos_lease_audit ADD COLUMN IF NOT EXISTS old_renewed timestamptz;
CREATE OR REPLACE FUNCTION chaos_lease_audit() RETURNS trigger LANGUAGE plpgsql
    SET search_path = public AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO chaos_lease_audit (op, key, new_holder, new_token, new_acquired, new_expires)
        VALUES (TG_OP, NEW.key, NEW.holder, NEW.token, NEW.acquired_at, NEW.expires_at);
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO chaos_lease_audit (op, key, old_holder, old_token, old_acquired, old_expires)
        VALUES (TG_OP, OLD.key, OLD.holder, OLD.token, OLD.acquired_at, OLD.expires_at);
    ELSE
        INSERT INTO chaos_lease_audit (op, key, old_holder, old_token, old_acquired, old_expires,
                                       new_holder, new_token, new_acquired, new_expires, handed_off, new_renewed, old_renewed)
        VALUES (TG_OP, NEW.key, OLD.holder, OLD.token, OLD.acquired_at, OLD.expires_at,
                NEW.holder, NEW.token, NEW.acquired_at, NEW.expires_at,
                coalesce((to_jsonb(NEW) ->> 'handed_off')::boolean, false), NEW.renewed_at, OLD.renewed_at);
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS chaos_lease_audit ON pgleader.lease;
CREATE TRIGGER chaos_lease_audit AFTER INSERT OR UPDATE OR DELETE ON pgleader.lease
    FOR EACH ROW EXECUTE FUNCTION chaos_lease_audit();`

// digest is the column fence of the store, used for Claim and Floor.
var digest = sqlfence.Column{Table: pgx.Identifier{"chaos_digest"}, KeyColumn: "name", FenceColumn: "fence"}

// The unit's write: sqlfence's column-fence write (fence <= token) and the
// log insert in one statement, so the log row commits with the write or not
// at all. brokenWrite drops the fence condition, for the checker's
// self-test only.
const (
	fencedWrite = `
WITH w AS (UPDATE chaos_digest SET body = $3::text || ' #' || $5::int, fence = $2
            WHERE name = $1 AND (fence IS NULL OR fence <= $2) RETURNING 1)
INSERT INTO chaos_log (key, owner, token, term_start, seq) SELECT $1, $3, $2, $4, $5 FROM w
RETURNING id, logged_at, coalesce(current_setting('chaos.server', true), '')`
	brokenWrite = `
WITH w AS (UPDATE chaos_digest SET body = $3::text || ' #' || $5::int, fence = $2
            WHERE name = $1 RETURNING 1)
INSERT INTO chaos_log (key, owner, token, term_start, seq) SELECT $1, $3, $2, $4, $5 FROM w
RETURNING id, logged_at, coalesce(current_setting('chaos.server', true), '')`
)

// Setup creates the store's tables, its row for each key, and the lease
// audit trigger, in a database that has pgleader's migrations.
func Setup(ctx context.Context, db sqlfence.Querier, keys ...string) error {
	if _, err := db.Exec(ctx, schema); err != nil {
		return fmt.Errorf("chaos: create the store: %w", err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO chaos_digest (name, fence) SELECT k, 0 FROM unnest($1::text[]) AS k ON CONFLICT DO NOTHING`, keys); err != nil {
		return fmt.Errorf("chaos: create the digest rows: %w", err)
	}
	return nil
}

// store is one replica's view of the fenced store, over its store path:
// one digest row per key.
type store struct {
	db     sqlfence.Querier
	broken bool
}

// claim is the recipe's claim through sqlfence: it reports whether key's
// stored fence was lower than token.
func (s store) claim(ctx context.Context, key string, token int64) (bool, error) {
	err := digest.Claim(ctx, s.db, key, token)
	if errors.Is(err, sqlfence.ErrFenced) {
		return false, nil
	}
	return err == nil, err
}

func (s store) floor(ctx context.Context, key string) (int64, error) {
	return digest.Floor(ctx, s.db, key)
}

// floors reads the fence of each key in one statement (0 for a key without
// a row or fence), for a Set's FenceFloors hook.
func (s store) floors(ctx context.Context, keys []string) ([]int64, error) {
	var out []int64
	err := s.db.QueryRow(ctx, `SELECT coalesce(array_agg(coalesce(d.fence, 0) ORDER BY k.i), '{}')
		FROM unnest($1::text[]) WITH ORDINALITY AS k(name, i) LEFT JOIN chaos_digest AS d ON d.name = k.name`, keys).Scan(&out)
	if err == nil && len(out) != len(keys) {
		err = fmt.Errorf("chaos: %d fences for %d keys", len(out), len(keys))
	}
	return out, err
}

// write publishes one unit of key. It returns the log row's id, database
// time and server if the store accepted it, ok = false if the fence
// refused it.
func (s store) write(ctx context.Context, key, owner string, token int64, term time.Time, seq int) (id int64, at time.Time, server string, ok bool, err error) {
	sql := fencedWrite
	if s.broken {
		sql = brokenWrite
	}
	err = s.db.QueryRow(ctx, sql, key, token, owner, term, seq).Scan(&id, &at, &server)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, time.Time{}, "", false, nil
	}
	return id, at, server, err == nil, err
}

// Unit is one row of chaos_log: a unit the store accepted.
type Unit struct {
	ID int64
	// Key is the digest row it wrote: the lease key of its term.
	Key       string
	Owner     string
	Token     int64
	TermStart time.Time
	Seq       int
	// Server is the server that accepted it ("" if not named).
	Server string
	// LoggedAt is clock_timestamp() when the row was inserted, within the
	// accepting statement; Committed is its transaction's commit time when
	// the server tracks commit timestamps, else zero.
	LoggedAt, Committed time.Time
}

func (u Unit) termID() TermID { return TermID{u.Owner, u.Token, instant(u.TermStart)} }

// at is the unit's best known commit time on the database clock.
func (u Unit) at() time.Time {
	if !u.Committed.IsZero() {
		return u.Committed
	}
	return u.LoggedAt
}

// LeaseChange is one row of chaos_lease_audit: one change to a lease row,
// with the row before (Old…) and after (New…); an INSERT has no Old, a
// DELETE no New.
type LeaseChange struct {
	ID int64
	// Key is the lease row that changed.
	Key                     string
	Op                      string
	At                      time.Time
	OldHolder               string
	OldToken                int64
	OldAcquired, OldExpires time.Time
	NewHolder               string
	NewToken                int64
	NewAcquired, NewExpires time.Time
	// NewRenewed is the row's renewed_at after the change: for a renewal,
	// the instant on the database clock the server judged the term
	// unexpired at, with the row locked from then on. At, the audit
	// trigger's clock, is later: row triggers fire once the statement has
	// written every row, a millisecond or more after for a set's tick.
	// OldRenewed is renewed_at before it: a change that left it as it was
	// (a lapse) decided nothing at NewRenewed.
	NewRenewed, OldRenewed time.Time
	// Server is the server that committed the change ("" if not named).
	Server string
	// HandedOff: the write handed the lease from the old term to the new
	// one (pgleader.hand_off), ending the old term.
	HandedOff bool
}

// Tables is what the checker reads from the database after a run.
type Tables struct {
	Units   []Unit
	Changes []LeaseChange
	// Fence is the digest row's fence at the end; with more than one key,
	// Fences holds each key's, and the checker uses it for that key.
	Fence  int64
	Fences map[string]int64
	// CommitTimes is whether Units carry commit timestamps.
	CommitTimes bool
}

// ReadTables reads the log, the lease audit of keys and their fences.
func ReadTables(ctx context.Context, db sqlfence.Querier, keys ...string) (Tables, error) {
	q, ok := db.(interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
	})
	if !ok {
		return Tables{}, errors.New("chaos: ReadTables needs a DB that can Query")
	}
	var t Tables
	var track string
	if err := db.QueryRow(ctx, `SELECT current_setting('track_commit_timestamp')`).Scan(&track); err != nil {
		return t, err
	}
	t.CommitTimes = track == "on"
	committed := "NULL::timestamptz"
	if t.CommitTimes {
		committed = "pg_xact_commit_timestamp(xmin)"
	}
	rows, err := q.Query(ctx, `SELECT id, key, owner, token, term_start, seq, logged_at, `+committed+`, coalesce(server, '') FROM chaos_log ORDER BY id`)
	if err != nil {
		return t, err
	}
	t.Units, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Unit, error) {
		var u Unit
		var c pgtype.Timestamptz
		err := r.Scan(&u.ID, &u.Key, &u.Owner, &u.Token, &u.TermStart, &u.Seq, &u.LoggedAt, &c, &u.Server)
		u.Committed = c.Time
		return u, err
	})
	if err != nil {
		return t, err
	}
	rows, err = q.Query(ctx, `SELECT id, key, op, at, old_holder, old_token, old_acquired, old_expires,
	        new_holder, new_token, new_acquired, new_expires, coalesce(server, ''), handed_off, new_renewed, old_renewed
	   FROM chaos_lease_audit WHERE key = ANY($1) ORDER BY id`, keys)
	if err != nil {
		return t, err
	}
	t.Changes, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (LeaseChange, error) {
		var c LeaseChange
		var oh, nh pgtype.Text
		var ot, nt pgtype.Int8
		var oa, oe, na, ne, nr, or pgtype.Timestamptz
		err := r.Scan(&c.ID, &c.Key, &c.Op, &c.At, &oh, &ot, &oa, &oe, &nh, &nt, &na, &ne, &c.Server, &c.HandedOff, &nr, &or)
		c.NewRenewed, c.OldRenewed = nr.Time, or.Time
		c.OldHolder, c.OldToken, c.OldAcquired, c.OldExpires = oh.String, ot.Int64, oa.Time, oe.Time
		c.NewHolder, c.NewToken, c.NewAcquired, c.NewExpires = nh.String, nt.Int64, na.Time, ne.Time
		return c, err
	})
	if err != nil {
		return t, err
	}
	if len(keys) == 1 {
		t.Fence, err = digest.Floor(ctx, db, keys[0])
		return t, err
	}
	fences, err := store{db: db}.floors(ctx, keys)
	if err != nil {
		return t, err
	}
	t.Fences = make(map[string]int64, len(keys))
	for i, k := range keys {
		t.Fences[k] = fences[i]
	}
	return t, nil
}
