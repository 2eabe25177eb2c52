package pgleader

import (
	"bytes"
	"cmp"
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/check"
	"github.com/pgleader/pgleader/internal/speedup"
)

// DB is what [Postgres] needs from a connection: *pgxpool.Pool, *pgx.Conn
// and pgx.Tx all satisfy it.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Postgres is the [Backend] on PostgreSQL, with every ability (see
// [Postgres.Abilities]), and a [SetBackend]. Each operation is one call of an SQL function
// in the schema "pgleader" (see package migrations), decided by PostgreSQL on
// its own clock. It is safe for concurrent use if its DB is (a pool is; a
// single *pgx.Conn is not). Share one Postgres among the Electors of a
// process: they then share its LISTEN connection and its lease connection.
//
// Over a *pgxpool.Pool, while any Elector's or Set's Run is running, the lease
// operations of the backend go through one connection of their own, opened
// from the pool's configuration (application_name "pgleader lease") and
// closed 100 ms after the last Run returns: a body that holds every
// connection of the pool cannot starve its own renewals, and no pool health
// check sits on a renewal's or a handover's path. That connection runs one
// statement at a time; an operation that finds it busy runs on it once it
// is free or on a pool connection, whichever comes first, so a statement
// that waits for long on one key (a campaign behind an application's
// lease-guarded transaction on that key's row) does not hold up the other
// keys' renewals. Calls made outside a Run use the pool. The LISTEN connection, too, closes 100 ms after its last
// watcher stops watching. Ending a session costs the server a process exit;
// the delay keeps that off the path of the successor of a hand-off, which
// confirms its term in those milliseconds, and a Run that starts within it
// gets the same sessions.
type Postgres struct {
	log    *slog.Logger // nil unless WithLogger was given
	db     DB
	listen *listener  // nil when poll-only
	lease  *leaseConn // nil unless db is a pool
	// connect is the configuration of connections of the backend's own
	// (the pool's, or ListenWith's); nil if it has none.
	connect *pgx.ConnConfig

	off speedup.Mechanisms // switched off to measure them (internal/speedup)
}

// PostgresOption configures NewPostgres.
type PostgresOption func(*postgresConfig)

type postgresConfig struct {
	pollOnly bool
	connect  *pgx.ConnConfig
	logger   *slog.Logger
}

// PollOnly turns LISTEN/NOTIFY off: candidates poll every CampaignEvery.
// Use it behind a pooler that cannot LISTEN (pgbouncer in transaction
// mode), although NewPostgres also detects that case by itself.
func PollOnly() PostgresOption { return func(c *postgresConfig) { c.pollOnly = true } }

// ListenWith sets the connection configuration of the LISTEN connection.
// By default it is the pool's, when db is a *pgxpool.Pool; for any other DB,
// without ListenWith, the backend is poll-only.
func ListenWith(cfg *pgx.ConnConfig) PostgresOption {
	return func(c *postgresConfig) { c.connect = cfg }
}

// WithLogger sets where the backend logs, and the default logger of the
// Electors over it (Options.Logger overrides it). Default slog.Default().
func WithLogger(l *slog.Logger) PostgresOption { return func(c *postgresConfig) { c.logger = l } }

// NewPostgres returns the PostgreSQL backend over db, normally a
// *pgxpool.Pool. The schema must have been migrated; operations on a
// database without it fail with an error matching [ErrNotMigrated].
//
// Unless PollOnly is given, the backend opens one dedicated connection for
// LISTEN while any Elector watches it, and closes it when the last stops.
func NewPostgres(db DB, opts ...PostgresOption) *Postgres {
	var cfg postgresConfig
	for _, o := range opts {
		o(&cfg)
	}
	if pool, ok := db.(*pgxpool.Pool); ok && cfg.connect == nil {
		cfg.connect = pool.Config().ConnConfig
	}
	p := &Postgres{db: db, log: cfg.logger, connect: cfg.connect}
	if pool, ok := db.(*pgxpool.Pool); ok {
		p.lease = &leaseConn{cfg: pool.Config().ConnConfig}
	}
	if !cfg.pollOnly && cfg.connect != nil {
		if cfg.logger == nil {
			cfg.logger = slog.Default()
		}
		p.listen = newListener(db, cfg.connect, cfg.logger)
	}
	return p
}

// logger is where the backend itself logs: WithLogger's logger, else
// slog.Default().
func (p *Postgres) logger() *slog.Logger { return cmp.Or(p.log, slog.Default()) }

var (
	_ Backend    = (*Postgres)(nil)
	_ Steerer    = (*Postgres)(nil)
	_ Watcher    = (*Postgres)(nil)
	_ SetBackend = (*Postgres)(nil)
)

// Abilities implements [Backend]: a Postgres backend advances, keeps values
// and candidates, steers, and, unless built with [PollOnly] or over a DB
// that cannot open a connection of its own, pushes events.
func (p *Postgres) Abilities() Abilities {
	ab := Abilities{Advance: true, Values: true, Candidates: true, Steer: p, Logger: p.log, Hold: p.holdConnections,
		PrepareHandOff: p.prepareHandOff}
	if p.listen != nil {
		ab.Events = p
	}
	if p.connect != nil {
		ab.session = func(key string, ttl time.Duration, log *slog.Logger) *boundSession {
			return newBoundSession(p.connect, key, ttl, log)
		}
		ab.connect = p.connect
	}
	return ab
}

// Acquire takes the lease for owner if it is free or expired: Campaign for
// a candidate that is only an owner, with no floor.
func (p *Postgres) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (Lease, bool, error) {
	return p.Campaign(ctx, key, Candidate{Owner: owner}, ttl, 0)
}

// Renew extends the term's lease: RenewTerm without its resignation.
func (p *Postgres) Renew(ctx context.Context, key, owner string, token int64, ttl time.Duration) (time.Time, error) {
	expires, _, err := p.RenewTerm(ctx, key, owner, token, ttl, NoPreference)
	return expires, err
}

// RenewTerm implements [Backend]. It is pgleader.renew_term in SQL.
func (p *Postgres) RenewTerm(ctx context.Context, key, owner string, token int64, ttl, minTerm time.Duration) (time.Time, bool, error) {
	if err := checkTerm(key, owner, token); err != nil {
		return time.Time{}, false, err
	}
	if err := CheckTTL(ttl); err != nil {
		return time.Time{}, false, err
	}
	if minTerm < 0 && minTerm != NoPreference {
		return time.Time{}, false, invalidf("minTerm must not be negative (but NoPreference), got %v", minTerm)
	}
	var expires pgtype.Timestamptz
	var resign bool
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		return db.QueryRow(ctx, `SELECT expires_at, resign FROM pgleader.renew_term($1, $2, $3, $4, $5)`, exec,
			key, owner, token, interval(ttl), pgtype.Interval{Microseconds: minTerm.Microseconds(), Valid: minTerm >= 0}).Scan(&expires, &resign)
	})
	if err != nil {
		return time.Time{}, false, sqlError("renew", err)
	}
	if !expires.Valid {
		return time.Time{}, false, ErrLost
	}
	return expires.Time, resign, nil
}

// Announce implements [Watcher]: a notification "acquire" for key, in a
// transaction of its own.
func (p *Postgres) Announce(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	return p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		var ignored string
		return db.QueryRow(ctx, `SELECT pg_notify($1, $2)::text`, exec, channel, hintPayload("acquire", key)).Scan(&ignored)
	})
}

// Resign implements [Steerer]. It is pgleader.resign in SQL.
func (p *Postgres) Resign(ctx context.Context, key string, token int64) (Lease, bool, error) {
	if err := CheckKey(key); err != nil {
		return Lease{}, false, err
	}
	if token != 0 {
		if err := CheckToken(token); err != nil {
			return Lease{}, false, err
		}
	}
	l := Lease{Key: key}
	var asked bool
	var holder pgtype.Text
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		return db.QueryRow(ctx, `SELECT resigned, holder, token FROM pgleader.resign($1, $2)`, exec,
			key, pgtype.Int8{Int64: token, Valid: token != 0}).Scan(&asked, &holder, &l.Token)
	})
	if err != nil {
		return Lease{}, false, sqlError("resign", err)
	}
	l.Holder = holder.String
	return l, asked, nil
}

// Lease implements [Backend].
func (p *Postgres) Lease(ctx context.Context, key string) (Lease, error) {
	if err := CheckKey(key); err != nil {
		return Lease{}, err
	}
	l := Lease{Key: key}
	var holder, value pgtype.Text
	var acquired, renewed, expires pgtype.Timestamptz
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		return db.QueryRow(ctx,
			`SELECT holder, token, acquired_at, renewed_at, expires_at, db_now, value FROM pgleader.lease($1)`, exec, key,
		).Scan(&holder, &l.Token, &acquired, &renewed, &expires, &l.Now, &value)
	})
	l.Value = value.String
	if err != nil {
		return Lease{}, sqlError("lease", err)
	}
	l.Holder = holder.String
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt = acquired.Time, renewed.Time, expires.Time
	return l, nil
}

// Advance implements [Steerer].
func (p *Postgres) Advance(ctx context.Context, key string, floor int64) (bool, int64, error) {
	if err := CheckKey(key); err != nil {
		return false, 0, err
	}
	if err := CheckFloor(floor); err != nil {
		return false, 0, err
	}
	var advanced bool
	var counter int64
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		return db.QueryRow(ctx, `SELECT advanced, token FROM pgleader.advance($1, $2)`, exec, key, floor).
			Scan(&advanced, &counter)
	})
	if err != nil {
		return false, 0, sqlError("advance", err)
	}
	return advanced, counter, nil
}

func checkAcquire(key, owner string, ttl time.Duration) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := CheckOwner(owner); err != nil {
		return err
	}
	return CheckTTL(ttl)
}

// exec runs each lease statement unprepared in one round trip, so it works
// through a transaction-mode pooler with pgx's default settings (a cached
// prepared statement would name a server session the pooler may not give
// back).
const exec = pgx.QueryExecModeExec

func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// sqlError maps PostgreSQL's errors onto the package's sentinels.
var sqlError = check.Sentinels{Prefix: "pgleader", NotMigrated: ErrNotMigrated, Invalid: ErrInvalid, Forbidden: ErrForbidden}.SQLError

// Release implements [Backend]. A successful release is followed by a
// notification on the PostgreSQL channel "pgleader", waking candidates that
// watch the key. The notification is sent in a transaction of its own after
// the release committed, so it can neither fail the release (a full
// notification queue) nor make it wait for the lock every notifying commit
// takes; over a *pgxpool.Pool or a *pgx.Conn it follows the release's
// answer on the same connection.
// Inside a caller's transaction (a pgx.Tx as DB) nothing is notified, and
// candidates find the lease free at the latest when they would have seen it
// expire.
func (p *Postgres) Release(ctx context.Context, key, owner string, token int64) (bool, error) {
	if err := checkTerm(key, owner, token); err != nil {
		return false, err
	}
	var released bool
	err := p.with(ctx, func(db DB, pg *pgconn.PgConn) (err error) {
		if pg == nil {
			return db.QueryRow(ctx, `SELECT pgleader.release($1, $2, $3)`, exec, key, owner, token).Scan(&released)
		}
		released, err = p.releaseAndHint(ctx, pg, key, owner, token)
		return err
	})
	if err != nil {
		return false, sqlError("release", err)
	}
	return released, nil
}

// releaseAndHint releases, then sends the release hint (see
// statementThenHint).
func (p *Postgres) releaseAndHint(ctx context.Context, c *pgconn.PgConn, key, owner string, token int64) (bool, error) {
	row, err := p.statementThenHint(ctx, c, `SELECT pgleader.release($1, $2, $3)`,
		[][]byte{[]byte(key), []byte(owner), strconv.AppendInt(nil, token, 10)},
		`SELECT pg_notify($1, $2)`, [][]byte{[]byte(channel), []byte(hintPayload("release", key))})
	return len(row) == 1 && string(row[0]) == "t", err
}

// hintPayload is the notification payload for event on key, in the format
// parseEvent reads.
func hintPayload(event, key string) string { return event + " " + key }

// statementThenHint runs sql with args and, once its answer is back, the
// hint statement in an implicit transaction of its own: no notification
// can fail or serialize the lease operation. A hint that fails (a full
// notification queue, a connection lost after the commit) is logged at
// Warn: waiting candidates then find the lease at its expiry. It
// returns the last row of sql's result (nil if it had none). (Pipelining
// the two saved nothing measurable: docs/benchmarks.md, "Hand-off
// speed-ups".)
func (p *Postgres) statementThenHint(ctx context.Context, c *pgconn.PgConn, sql string, args [][]byte, hint string, hintArgs [][]byte) ([][]byte, error) {
	rr := c.ExecParams(ctx, sql, args, nil, nil, nil)
	var row [][]byte
	for rr.NextRow() {
		row = row[:0]
		for _, v := range rr.Values() {
			row = append(row, bytes.Clone(v)) // Values is reused by the next read
		}
	}
	if _, err := rr.Close(); err != nil {
		return nil, err
	}
	if _, err := c.ExecParams(ctx, hint, hintArgs, nil, nil, nil).Close(); err != nil {
		p.logger().Warn("the hint after a committed release or hand-off failed; waiting candidates find the lease at its expiry",
			"err", err)
	}
	return row, nil
}
