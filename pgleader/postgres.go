package pgleader

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/check"
)

// DB is what [Postgres] needs from a connection: *pgxpool.Pool, *pgx.Conn
// and pgx.Tx all satisfy it.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Postgres is the [Backend] on PostgreSQL, and also an [Advancer],
// [FloorAcquirer] and [Watcher]. Each operation is one call of an SQL function
// in the schema "pgleader" (see package migrations), decided by PostgreSQL on
// its own clock. It is safe for concurrent use if its DB is (a pool is; a
// single *pgx.Conn is not). Share one Postgres among the Electors of a
// process: they then share its one LISTEN connection.
type Postgres struct {
	db     DB
	listen *listener // nil when poll-only
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

// WithLogger sets where the LISTEN connection logs. Default slog.Default().
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
	p := &Postgres{db: db}
	if !cfg.pollOnly && cfg.connect != nil {
		if cfg.logger == nil {
			cfg.logger = slog.Default()
		}
		p.listen = newListener(db, cfg.connect, cfg.logger)
	}
	return p
}

var (
	_ Backend       = (*Postgres)(nil)
	_ Advancer      = (*Postgres)(nil)
	_ FloorAcquirer = (*Postgres)(nil)
	_ Watcher       = (*Postgres)(nil)
)

// Acquire implements [Backend].
func (p *Postgres) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (Lease, bool, error) {
	return p.AcquireWithFloor(ctx, key, owner, ttl, 0)
}

// AcquireWithFloor implements [FloorAcquirer].
func (p *Postgres) AcquireWithFloor(ctx context.Context, key, owner string, ttl time.Duration, floor int64) (Lease, bool, error) {
	if err := checkAcquire(key, owner, ttl); err != nil {
		return Lease{}, false, err
	}
	if err := CheckFloor(floor); err != nil {
		return Lease{}, false, err
	}
	l := Lease{Key: key}
	var acquired bool
	err := p.db.QueryRow(ctx,
		`SELECT acquired, holder, token, expires_at, db_now FROM pgleader.acquire($1, $2, $3, $4)`,
		key, owner, interval(ttl), floor,
	).Scan(&acquired, &l.Holder, &l.Token, &l.ExpiresAt, &l.Now)
	if err != nil {
		return Lease{}, false, sqlError("acquire", err)
	}
	if acquired {
		l.AcquiredAt, l.RenewedAt = l.Now, l.Now
	}
	return l, acquired, nil
}

// Renew implements [Backend].
func (p *Postgres) Renew(ctx context.Context, key, owner string, token int64, ttl time.Duration) (time.Time, error) {
	if err := checkTerm(key, owner, token); err != nil {
		return time.Time{}, err
	}
	if err := CheckTTL(ttl); err != nil {
		return time.Time{}, err
	}
	var expires pgtype.Timestamptz
	err := p.db.QueryRow(ctx, `SELECT pgleader.renew($1, $2, $3, $4)`,
		key, owner, token, interval(ttl)).Scan(&expires)
	if err != nil {
		return time.Time{}, sqlError("renew", err)
	}
	if !expires.Valid {
		return time.Time{}, ErrLost
	}
	return expires.Time, nil
}

// Release implements [Backend]. A successful release notifies the PostgreSQL
// channel "pgleader", waking candidates that watch the key.
func (p *Postgres) Release(ctx context.Context, key, owner string, token int64) (bool, error) {
	if err := checkTerm(key, owner, token); err != nil {
		return false, err
	}
	var released bool
	err := p.db.QueryRow(ctx, `SELECT pgleader.release($1, $2, $3)`, key, owner, token).Scan(&released)
	if err != nil {
		return false, sqlError("release", err)
	}
	return released, nil
}

// Lease implements [Backend].
func (p *Postgres) Lease(ctx context.Context, key string) (Lease, error) {
	if err := CheckKey(key); err != nil {
		return Lease{}, err
	}
	l := Lease{Key: key}
	var holder pgtype.Text
	var acquired, renewed, expires pgtype.Timestamptz
	err := p.db.QueryRow(ctx,
		`SELECT holder, token, acquired_at, renewed_at, expires_at, db_now FROM pgleader.lease($1)`, key,
	).Scan(&holder, &l.Token, &acquired, &renewed, &expires, &l.Now)
	if err != nil {
		return Lease{}, sqlError("lease", err)
	}
	l.Holder = holder.String
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt = acquired.Time, renewed.Time, expires.Time
	return l, nil
}

// Advance implements [Advancer].
func (p *Postgres) Advance(ctx context.Context, key string, floor int64) (bool, int64, error) {
	if err := CheckKey(key); err != nil {
		return false, 0, err
	}
	if err := CheckFloor(floor); err != nil {
		return false, 0, err
	}
	var advanced bool
	var counter int64
	err := p.db.QueryRow(ctx, `SELECT advanced, token FROM pgleader.advance($1, $2)`, key, floor).
		Scan(&advanced, &counter)
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

func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// sqlError maps PostgreSQL's errors onto the package's sentinels.
var sqlError = check.Sentinels{Prefix: "pgleader", NotMigrated: ErrNotMigrated, Invalid: ErrInvalid}.SQLError
