package pgleader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Campaign implements [Backend]. It is pgleader.campaign in SQL.
func (p *Postgres) Campaign(ctx context.Context, key string, c Candidate, ttl time.Duration, floor int64) (Lease, bool, error) {
	if err := checkCandidate(key, c, ttl, floor); err != nil {
		return Lease{}, false, err
	}
	var l Lease
	var acquired bool
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) (err error) {
		l, acquired, err = scanLease(key, db.QueryRow(ctx,
			`SELECT acquired, holder, token, expires_at, db_now, value, acquired_at FROM pgleader.campaign($1, $2, $3, $4, $5, $6, $7)`, exec,
			key, c.Owner, interval(ttl), floor, pgtype.Text{String: c.Value, Valid: c.Value != ""}, c.Priority,
			pgtype.Interval{Microseconds: c.TTL.Microseconds(), Valid: c.TTL > 0}))
		return err
	})
	if err != nil {
		return Lease{}, false, sqlError("campaign", err)
	}
	return l, acquired, nil
}

func checkCandidate(key string, c Candidate, ttl time.Duration, floor int64) error {
	if err := checkAcquire(key, c.Owner, ttl); err != nil {
		return err
	}
	if err := CheckFloor(floor); err != nil {
		return err
	}
	if err := CheckValue(c.Value); err != nil {
		return err
	}
	if c.TTL != 0 && c.TTL < time.Microsecond {
		return invalidf("candidate TTL must be 0 (no registration) or at least 1µs, got %v", c.TTL)
	}
	return nil
}

// take checks for a term handed to owner (pgleader.take), on db: one with
// keep left is believed on a read; any other is confirmed by a write, as
// every one is when keep is 0.
func take(ctx context.Context, db DB, key, owner string, ttl, keep time.Duration) (Lease, bool, error) {
	sql, args := `SELECT acquired, holder, token, expires_at, db_now, value, acquired_at FROM pgleader.take($1, $2, $3)`, []any{key, owner, interval(ttl)}
	if keep > 0 {
		sql, args = `SELECT acquired, holder, token, expires_at, db_now, value, acquired_at FROM pgleader.take($1, $2, $3, $4)`, append(args, interval(keep))
	}
	l, acquired, err := scanLease(key, db.QueryRow(ctx, sql, append([]any{exec}, args...)...))
	if err != nil {
		return Lease{}, false, sqlError("take", err)
	}
	return l, acquired, nil
}

// scanLease reads the columns acquired, holder, token, expires_at, db_now,
// value, acquired_at.
func scanLease(key string, row pgx.Row) (Lease, bool, error) {
	l := Lease{Key: key}
	var acquired bool
	var holder, value pgtype.Text
	var expires, start pgtype.Timestamptz
	if err := row.Scan(&acquired, &holder, &l.Token, &expires, &l.Now, &value, &start); err != nil {
		return Lease{}, false, err
	}
	l.Holder, l.Value, l.ExpiresAt, l.AcquiredAt = holder.String, value.String, expires.Time, start.Time
	if acquired {
		l.RenewedAt = l.Now
	}
	return l, acquired, nil
}

// HandOff implements [Backend]. It is pgleader.hand_off in SQL, followed
// by a hint in a transaction of its own, as for Release: "handoff" naming
// the successor, or "release" when there is none.
func (p *Postgres) HandOff(ctx context.Context, key, owner string, token int64, to string) (bool, string, error) {
	if err := checkTerm(key, owner, token); err != nil {
		return false, "", err
	}
	if to != "" {
		if err := CheckOwner(to); err != nil {
			return false, "", err
		}
	}
	var released bool
	var successor string
	err := p.with(ctx, func(db DB, pg *pgconn.PgConn) (err error) {
		if pg == nil {
			var s pgtype.Text
			err = db.QueryRow(ctx, `SELECT released, successor FROM pgleader.hand_off($1, $2, $3, $4)`, exec,
				key, owner, token, pgtype.Text{String: to, Valid: to != ""}).Scan(&released, &s)
			successor = s.String
			return err
		}
		released, successor, err = p.handOffAndHint(ctx, pg, key, owner, token, to)
		return err
	})
	if err != nil {
		return false, "", sqlError("hand_off", err)
	}
	return released, successor, nil
}

// handOffHint builds the hint from the committed row, in its own implicit
// transaction: the successor's name is known only once hand_off ran, and
// both go out in one write. A row above the ended term's token, handed
// off or with a live holder, is the hand-off: its token is token + 1, or
// more when a move to a new token epoch raised the draw while the term
// held on; the successor's campaign may have taken it between the two
// statements (schema version 24 names it then too).
// hint_handoff reads the row as the schema's owner: the
// application role has no privilege on the table.
const handOffHint = `SELECT pgleader.hint_handoff($1, $2)`

func (p *Postgres) handOffAndHint(ctx context.Context, c *pgconn.PgConn, key, owner string, token int64, to string) (bool, string, error) {
	tok := strconv.AppendInt(nil, token, 10)
	var target []byte
	if to != "" {
		target = []byte(to)
	}
	row, err := p.statementThenHint(ctx, c, `SELECT released, successor FROM pgleader.hand_off($1, $2, $3, $4)`,
		[][]byte{[]byte(key), []byte(owner), tok, target}, handOffHint, [][]byte{[]byte(key), tok})
	if err != nil || len(row) != 2 {
		return false, "", err
	}
	return string(row[0]) == "t", string(row[1]), nil
}

// Transfer implements [Steerer]. It is pgleader.transfer in SQL.
func (p *Postgres) Transfer(ctx context.Context, key, to string) (Lease, bool, error) {
	if err := CheckKey(key); err != nil {
		return Lease{}, false, err
	}
	if err := CheckOwner(to); err != nil {
		return Lease{}, false, err
	}
	l := Lease{Key: key}
	var asked bool
	var holder pgtype.Text
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		return db.QueryRow(ctx, `SELECT transferring, holder, token FROM pgleader.transfer($1, $2)`, exec, key, to).
			Scan(&asked, &holder, &l.Token)
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "PF003" {
		return Lease{}, false, fmt.Errorf("%w: %q is not a live candidate of key %q", ErrNoCandidate, to, key)
	}
	if err != nil {
		return Lease{}, false, sqlError("transfer", err)
	}
	l.Holder = holder.String
	return l, asked, nil
}

// Candidates implements [Steerer]. It is pgleader.candidates in SQL.
func (p *Postgres) Candidates(ctx context.Context, key string) ([]Candidate, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	var out []Candidate
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		out = nil
		q, err := rowQuerier(db)
		if err != nil {
			return err
		}
		rows, err := q.Query(ctx, `SELECT owner, priority, registered_at, expires_at, value FROM pgleader.candidates($1)`, exec, key)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c Candidate
			var v pgtype.Text
			if err := rows.Scan(&c.Owner, &c.Priority, &c.RegisteredAt, &c.ExpiresAt, &v); err != nil {
				return err
			}
			c.Value = v.String
			out = append(out, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, sqlError("candidates", err)
	}
	return out, nil
}

// Withdraw implements [Steerer]. It is pgleader.withdraw in SQL.
func (p *Postgres) Withdraw(ctx context.Context, key, owner string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := CheckOwner(owner); err != nil {
		return err
	}
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		var ignored bool
		return db.QueryRow(ctx, `SELECT pgleader.withdraw($1, $2)`, exec, key, owner).Scan(&ignored)
	})
	if err != nil {
		return sqlError("withdraw", err)
	}
	return nil
}

// prepareHandOff rehearses a hand-off (see rehearse) with the term's ttl
// on the connection the term's hand-off will use, so that the hand-off does
// not pay for loading what it runs.
func (p *Postgres) prepareHandOff(ctx context.Context, ttl time.Duration) error {
	if p.off.Rehearsal {
		return nil
	}
	return p.with(ctx, func(_ DB, pg *pgconn.PgConn) error {
		if pg == nil {
			return nil
		}
		return rehearse(ctx, pg, ttl)
	})
}

// rehearse runs a whole hand-off in a transaction that it rolls back: a key
// made up for the purpose is won by one made-up owner, which hands it to
// another, registered as a candidate, which checks it (a read), takes it
// (a write) and renews it. Nothing commits and nothing is notified, but the
// session has then loaded every function, plan, table and trigger that a
// real campaign, hand_off, take and renewal use. A session's first real
// hand_off otherwise pays for that on the hand-off's path, and it almost
// always is the first: a replica hands off once, when it stops (on the
// bench machine the first hand_off of a session took 1.9 ms, a later one
// 1.1 ms; a first take 1.3 ms, a later one 1.0 ms).
//
// Every TTL in it is ttl, the one the real calls use: that is at most
// max_ttl, which a rehearsal must work under, whatever it is set to.
func rehearse(ctx context.Context, pg *pgconn.PgConn, ttl time.Duration) error {
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	key := "pgleader.rehearsal." + hex.EncodeToString(b) // hex: safe in a literal
	sql := fmt.Sprintf(`BEGIN;
SELECT acquired FROM pgleader.campaign('%[1]s', '%[2]s.a', '%[3]d microseconds', 0, NULL, 0, NULL);
SELECT acquired FROM pgleader.campaign('%[1]s', '%[2]s.b', '%[3]d microseconds', 0, NULL, 0, '%[3]d microseconds');
SELECT released FROM pgleader.hand_off('%[1]s', '%[2]s.a', (SELECT token FROM pgleader.lease('%[1]s')));
SELECT acquired FROM pgleader.take('%[1]s', '%[2]s.b', '%[3]d microseconds', '%[4]d microseconds');
SELECT acquired FROM pgleader.take('%[1]s', '%[2]s.b', '%[3]d microseconds');
SELECT resign FROM pgleader.renew_term('%[1]s', '%[2]s.b', (SELECT token FROM pgleader.lease('%[1]s')), '%[3]d microseconds', NULL);
ROLLBACK`, key, rehearsalOwner, ttl.Microseconds(), (ttl / 2).Microseconds())
	_, err := pg.Exec(ctx, sql).ReadAll()
	if s := pg.TxStatus(); s == 'T' || s == 'E' {
		// An error inside the block leaves it open (and aborted).
		if _, rerr := pg.Exec(ctx, "ROLLBACK").ReadAll(); err == nil {
			err = rerr
		}
	}
	return err
}

// rehearsalOwner starts the names of the owners of a rehearsal.
const rehearsalOwner = "pgleader.rehearsal"

// querier is a DB that can run a query returning rows: a pool, a
// connection, a transaction.
type querier interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

// rowQuerier returns db as a querier, or an error naming its type.
func rowQuerier(db DB) (querier, error) {
	q, ok := db.(querier)
	if !ok {
		return nil, fmt.Errorf("pgleader: %T cannot run a query that returns rows", db)
	}
	return q, nil
}
