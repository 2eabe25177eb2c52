// Package migrations holds pgleader's SQL schema as golang-migrate migrations,
// embedded in the module, and applies them through the pgx v5 driver.
//
// The schema lives in the PostgreSQL schema "pgleader". Its history is kept in
// the table [HistoryTable] of the connection's current schema (normally
// public), not in golang-migrate's default "schema_migrations", so an
// application that runs its own golang-migrate migrations in the same
// database keeps its history untouched. Migrating is serialized by a
// PostgreSQL advisory lock derived from that table's name, so several
// replicas may apply the migrations at start-up at the same time.
//
// Apply them from Go:
//
//	if err := migrations.Up(ctx, pool); err != nil { ... }
//
// or from the command line with the golang-migrate CLI, naming the same
// history table:
//
//	migrate -source file://migrations -database 'pgx5://host/db?x-migrations-table=pgleader_schema_migrations' up
package migrations

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// HistoryTable is the table in which pgleader records which of its
// migrations are applied.
const HistoryTable = "pgleader_schema_migrations"

// Latest is the newest schema version this module ships and expects.
//
// The migrations are append-only: a change to the schema is a new
// migration (the next is 0018_…), never an edit of one that
// shipped, since a database migrated by a release never runs an edited
// file again. Each new migration also regenerates schema.sql, the catalog
// the migrations build (make schema); TestSchemaSnapshot fails until it
// does, and the file's diff is the change to review.
const Latest uint = 17

// Versions 2 to 13 were development versions, squashed into version 1
// before the first release. No release ships them, and the migrations after
// 1 are numbered from 14, so a database recorded at one of them is always told
// apart from a released version: [CheckVersion] refuses it.
const (
	firstUnreleased uint = 2
	lastUnreleased  uint = 13
)

// ErrUnreleasedSchema is matched (errors.Is) by the error of [Up], [Down]
// and [To], and of [CheckVersion], for a database whose history records a
// schema version that only an unreleased development build of pgleader
// wrote (2 to 13). No release can migrate it; the error says how to drop it
// and migrate again (docs/migrating.md, "A schema from a development
// build").
var ErrUnreleasedSchema = errors.New("the pgleader schema was written by an unreleased development version of pgleader")

// CheckVersion reports whether this module can migrate a database at
// version (as [Version] reports it; 0 for none): nil for 0 to [Latest], an
// error matching [ErrUnreleasedSchema] for a development version, and an
// error naming the version for one newer than [Latest].
func CheckVersion(version uint) error {
	switch {
	case version >= firstUnreleased && version <= lastUnreleased:
		return fmt.Errorf("%w (schema version %d: versions %d to %d were squashed into version 1 before the first release, and none can be migrated); "+
			"to recover, drop it and migrate again, which deletes every lease, token counter and fence in it: "+
			"DROP SCHEMA pgleader CASCADE; DROP TABLE %s; then migrate up, and run grant_usage for each application role and install each fence trigger again",
			ErrUnreleasedSchema, version, firstUnreleased, lastUnreleased, HistoryTable)
	case version > Latest:
		return fmt.Errorf("the pgleader schema is at version %d, newer than this pgleader ships (%d): migrate with a pgleader that ships version %d or later", version, Latest, version)
	}
	return nil
}

//go:embed *.up.sql *.down.sql
var files embed.FS

// FS returns the embedded migration files, named as golang-migrate expects
// (NNNN_name.up.sql, NNNN_name.down.sql).
func FS() embed.FS { return files }

// Versions returns the versions this module ships, in order: 1, then 14
// and up ([Latest] is the last).
func Versions() []uint {
	names, _ := fs.Glob(files, "*.up.sql") // a valid pattern: no error
	var vs []uint
	for _, n := range names {
		if v, err := strconv.ParseUint(n[:strings.IndexByte(n, '_')], 10, 32); err == nil {
			vs = append(vs, uint(v))
		}
	}
	slices.Sort(vs)
	return vs
}

// Up applies every migration not yet applied. A database already at
// [Latest] is left as it is and is not an error, even for a role that may
// only use the schema (see the grants in docs/migrating.md). On a database
// without pgleader's schema it refuses a schema "pgleader" that another role
// owns. A database at a version this module cannot migrate is refused as
// [CheckVersion] says.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	return run(ctx, pool, func(m *migrate.Migrate) error {
		if err := checkVersion(m); err != nil {
			return err
		}
		if err := checkSchemaOwner(ctx, pool, m); err != nil {
			return err
		}
		return m.Up()
	})
}

// Down reverts every pgleader migration, dropping the schema "pgleader" and
// every lease and fence in it. The history table stays, at no version. A
// database at a version this module cannot migrate is refused as
// [CheckVersion] says.
func Down(ctx context.Context, pool *pgxpool.Pool) error {
	return run(ctx, pool, func(m *migrate.Migrate) error {
		if err := checkVersion(m); err != nil {
			return err
		}
		return m.Down()
	})
}

// To migrates up or down to version, which must be a version this module
// ships, between 1 and [Latest]; use [Down] for none. A database at a
// version this module cannot migrate is refused as [CheckVersion] says.
func To(ctx context.Context, pool *pgxpool.Pool, version uint) error {
	if version < 1 || version > Latest {
		return fmt.Errorf("pgleader/migrations: version %d out of range 1..%d (use Down to revert all)", version, Latest)
	}
	if !slices.Contains(Versions(), version) {
		return fmt.Errorf("pgleader/migrations: no version %d: this module ships versions %v (2 to 13 were development versions, squashed into 1)",
			version, Versions())
	}
	return run(ctx, pool, func(m *migrate.Migrate) error {
		if err := checkVersion(m); err != nil {
			return err
		}
		if err := checkSchemaOwner(ctx, pool, m); err != nil {
			return err
		}
		return m.Migrate(version)
	})
}

// checkVersion is [CheckVersion] of m's database: without it golang-migrate
// fails on a version the embedded files lack with "no migration found for
// version N", which says neither why nor what to do.
func checkVersion(m *migrate.Migrate) error {
	v, _, err := m.Version()
	if err != nil {
		return nil // no version yet (or unreadable: m reports it)
	}
	return CheckVersion(v)
}

// checkSchemaOwner refuses, before the first migration is recorded, a schema
// "pgleader" owned by another role. Migration 1 refuses it too, for the
// golang-migrate CLI, but a failed migration leaves the history dirty.
func checkSchemaOwner(ctx context.Context, pool *pgxpool.Pool, m *migrate.Migrate) error {
	if _, _, err := m.Version(); !errors.Is(err, migrate.ErrNilVersion) {
		return nil // migrated before (or unreadable: m reports it)
	}
	var owner, user string
	err := pool.QueryRow(ctx, `SELECT pg_catalog.pg_get_userbyid(n.nspowner), current_user
		FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pgleader'`).Scan(&owner, &user)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if owner != user {
		return fmt.Errorf("the schema \"pgleader\" already exists and is owned by %s, not by %s; migrate as its owner, or drop or rename it first", owner, user)
	}
	return nil
}

// Version reports the applied version (0 if none) and whether the last
// migration failed half-way (dirty), which needs a person to look.
func Version(ctx context.Context, pool *pgxpool.Pool) (version uint, dirty bool, err error) {
	err = run(ctx, pool, func(m *migrate.Migrate) error {
		version, dirty, err = m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			version, dirty, err = 0, false, nil
		}
		return err
	})
	return version, dirty, err
}

// UpURL is [Up] for a connection string (postgres://… or a key=value DSN).
func UpURL(ctx context.Context, url string) error {
	return withURL(ctx, url, Up)
}

// DownURL is [Down] for a connection string.
func DownURL(ctx context.Context, url string) error {
	return withURL(ctx, url, Down)
}

// ToURL is [To] for a connection string.
func ToURL(ctx context.Context, url string, version uint) error {
	return withURL(ctx, url, func(ctx context.Context, p *pgxpool.Pool) error { return To(ctx, p, version) })
}

// VersionURL is [Version] for a connection string.
func VersionURL(ctx context.Context, url string) (version uint, dirty bool, err error) {
	err = withURL(ctx, url, func(ctx context.Context, p *pgxpool.Pool) error {
		version, dirty, err = Version(ctx, p)
		return err
	})
	return version, dirty, err
}

func withURL(ctx context.Context, url string, f func(context.Context, *pgxpool.Pool) error) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("pgleader/migrations: %w", err)
	}
	defer pool.Close()
	return f(ctx, pool)
}

func run(ctx context.Context, pool *pgxpool.Pool, f func(*migrate.Migrate) error) error {
	if pool == nil {
		return errors.New("pgleader/migrations: nil pool")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	src, err := iofs.New(files, ".")
	if err != nil {
		return fmt.Errorf("pgleader/migrations: %w", err)
	}
	// golang-migrate's driver keeps a connection checked out that it does
	// not give back when it fails to start; conns gives every one back.
	conns := &connector{ctx: ctx, pool: stdlib.GetPoolConnector(pool)}
	db := sql.OpenDB(conns)
	db.SetMaxIdleConns(0) // the pool keeps the idle connections
	defer func() {
		_ = db.Close()
		conns.closeLeft()
	}()
	drv, err := migratepgx.WithInstance(db, &migratepgx.Config{MigrationsTable: HistoryTable})
	if err != nil {
		return fmt.Errorf("pgleader/migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		_ = drv.Close()
		return fmt.Errorf("pgleader/migrations: %w", err)
	}
	defer m.Close()

	// golang-migrate takes no context; stop between migrations when ctx ends.
	m.GracefulStop = make(chan bool, 1)
	stop := context.AfterFunc(ctx, func() { m.GracefulStop <- true })
	defer stop()

	err = f(m)
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("pgleader/migrations: %w", err)
	}
	return ctx.Err()
}

// connector hands database/sql connections from the pool, bounded by ctx
// (golang-migrate's driver asks for them without a context), and remembers
// them, so that closeLeft can return the ones golang-migrate never closed.
type connector struct {
	ctx  context.Context
	pool driver.Connector

	mu    sync.Mutex
	conns []*conn
}

// conn is a pool connection lent to database/sql. Embedding *stdlib.Conn
// keeps every optional interface of the driver's connection.
type conn struct {
	*stdlib.Conn
	closed atomic.Bool
}

func (c *conn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	dc, err := c.pool.Connect(ctx)
	if err != nil {
		if cerr := c.ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("unexpected driver connection %T", dc)
	}
	cn := &conn{Conn: sc}
	c.mu.Lock()
	c.conns = append(c.conns, cn)
	c.mu.Unlock()
	return cn, nil
}

func (c *connector) Driver() driver.Driver { return c.pool.Driver() }

// closeLeft returns to the pool every connection not closed yet, after
// closing its PostgreSQL session: whoever left it may have left a session
// advisory lock or a transaction behind, and the pool discards a closed
// connection instead of reusing it.
func (c *connector) closeLeft() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cn := range c.conns {
		if cn.closed.Load() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = cn.Conn.Conn().Close(ctx)
		cancel()
		_ = cn.Close()
	}
	c.conns = nil
}
