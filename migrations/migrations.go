// Package migrations holds pgleader's SQL schema as golang-migrate migrations,
// embedded in the module, and applies them on a *pgxpool.Pool ([Up], [Down],
// [To], [Version]), on a *sql.DB of any PostgreSQL driver ([UpDB], [DownDB],
// [ToDB], [VersionDB]), or on a connection string ([UpURL], ...).
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
//
// (golang-migrate's CLI derives its lock from the URL's path, "/db", where
// its drivers given a connection use the database's name, so the CLI does
// not wait for this package's migrations, nor they for it.)
//
// Each call holds one connection of the pool (or *sql.DB) while it runs,
// and never asks for a second while it holds it, so a pool of one connection
// is enough, and calls sharing a small pool take turns. A call waits for its
// connection, and for the lock while another migration holds it, until its
// context ends; once the migrations run, it stops between two of them when
// the context ends. The migrations run through golang-migrate's
// database/postgres driver on that one connection, which links lib/pq and
// registers its database/sql driver "postgres".
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
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// HistoryTable is the table in which pgleader records which of its
// migrations are applied.
const HistoryTable = "pgleader_schema_migrations"

// Latest is the newest schema version this module ships and expects.
//
// The migrations are append-only: a change to the schema is a new
// migration (the next is 0028_…), never an edit of one that
// shipped, since a database migrated by a release never runs an edited
// file again. Each new migration also regenerates schema.sql, the catalog
// the migrations build (make schema); TestSchemaSnapshot fails until it
// does, and the file's diff is the change to review.
const Latest uint = 27

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
//
// Up holds one connection of pool while it runs, and no other, so a pool of
// one connection is enough. It waits for that connection, and for the
// migration lock while another migrator holds it, until ctx ends; once the
// migrations run, it stops between two of them when ctx ends.
func Up(ctx context.Context, pool *pgxpool.Pool) error { return onPool(ctx, pool, up) }

// UpDB is [Up] for a *sql.DB of any PostgreSQL driver (pgx's stdlib, lib/pq,
// or one that wraps them): it holds one connection of db while it runs, and
// leaves db open.
func UpDB(ctx context.Context, db *sql.DB) error { return onDB(ctx, db, up) }

func up(ctx context.Context, s *session) error {
	if err := s.checkVersion(); err != nil {
		return err
	}
	if err := s.checkSchemaOwner(ctx); err != nil {
		return err
	}
	return s.m.Up()
}

// Down reverts every pgleader migration, dropping the schema "pgleader" and
// every lease and fence in it. The history table stays, at no version. A
// database at a version this module cannot migrate is refused as
// [CheckVersion] says. It holds one connection of pool, as [Up] does.
func Down(ctx context.Context, pool *pgxpool.Pool) error { return onPool(ctx, pool, down) }

// DownDB is [Down] for a *sql.DB, as [UpDB] is [Up].
func DownDB(ctx context.Context, db *sql.DB) error { return onDB(ctx, db, down) }

func down(_ context.Context, s *session) error {
	if err := s.checkVersion(); err != nil {
		return err
	}
	return s.m.Down()
}

// To migrates up or down to version, which must be a version this module
// ships, between 1 and [Latest]; use [Down] for none. A database at a
// version this module cannot migrate is refused as [CheckVersion] says. It
// holds one connection of pool, as [Up] does.
func To(ctx context.Context, pool *pgxpool.Pool, version uint) error {
	if err := checkTarget(version); err != nil {
		return err
	}
	return onPool(ctx, pool, to(version))
}

// ToDB is [To] for a *sql.DB, as [UpDB] is [Up].
func ToDB(ctx context.Context, db *sql.DB, version uint) error {
	if err := checkTarget(version); err != nil {
		return err
	}
	return onDB(ctx, db, to(version))
}

// checkTarget refuses a version To cannot migrate to.
func checkTarget(version uint) error {
	if version < 1 || version > Latest {
		return fmt.Errorf("pgleader/migrations: version %d out of range 1..%d (use Down to revert all)", version, Latest)
	}
	if !slices.Contains(Versions(), version) {
		return fmt.Errorf("pgleader/migrations: no version %d: this module ships versions %v (2 to 13 were development versions, squashed into 1)",
			version, Versions())
	}
	return nil
}

func to(version uint) func(context.Context, *session) error {
	return func(ctx context.Context, s *session) error {
		if err := s.checkVersion(); err != nil {
			return err
		}
		if err := s.checkSchemaOwner(ctx); err != nil {
			return err
		}
		return s.m.Migrate(version)
	}
}

// Version reports the applied version (0 if none) and whether the last
// migration failed half-way (dirty), which needs a person to look. It
// holds one connection of pool, and waits for a migration in progress to
// end, until ctx ends.
func Version(ctx context.Context, pool *pgxpool.Pool) (version uint, dirty bool, err error) {
	return readVersion(func(f func(context.Context, *session) error) error { return onPool(ctx, pool, f) })
}

// VersionDB is [Version] for a *sql.DB, as [UpDB] is [Up].
func VersionDB(ctx context.Context, db *sql.DB) (version uint, dirty bool, err error) {
	return readVersion(func(f func(context.Context, *session) error) error { return onDB(ctx, db, f) })
}

func readVersion(run func(func(context.Context, *session) error) error) (version uint, dirty bool, err error) {
	err = run(func(_ context.Context, s *session) error {
		var err error
		version, dirty, err = s.m.Version()
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

// session is one call's migration: the one connection it holds, on which
// it holds the migration lock, and golang-migrate working on that
// connection. golang-migrate takes no context and runs in the caller's
// goroutine, so between its calls the connection is free for the checks.
type session struct {
	conn *sql.Conn
	m    *migrate.Migrate
}

// checkVersion is [CheckVersion] of the database: without it golang-migrate
// fails on a version the embedded files lack with "no migration found for
// version N", which says neither why nor what to do.
func (s *session) checkVersion() error {
	v, _, err := s.m.Version()
	if err != nil {
		return nil // no version yet (or unreadable: m reports it)
	}
	return CheckVersion(v)
}

// checkSchemaOwner refuses, before the first migration is recorded, a schema
// "pgleader" owned by another role. Migration 1 refuses it too, for the
// golang-migrate CLI, but a failed migration leaves the history dirty.
func (s *session) checkSchemaOwner(ctx context.Context) error {
	if _, _, err := s.m.Version(); !errors.Is(err, migrate.ErrNilVersion) {
		return nil // migrated before (or unreadable: m reports it)
	}
	var owner, user string
	err := s.conn.QueryRowContext(ctx, `SELECT pg_catalog.pg_get_userbyid(n.nspowner), current_user
		FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pgleader'`).Scan(&owner, &user)
	if errors.Is(err, sql.ErrNoRows) {
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

// onPool runs f on one connection of pool, through a database/sql view of
// the pool: the one connection run takes from it is one pool connection.
func onPool(ctx context.Context, pool *pgxpool.Pool, f func(context.Context, *session) error) error {
	if pool == nil {
		return errors.New("pgleader/migrations: nil *pgxpool.Pool")
	}
	db := stdlib.OpenDBFromPool(pool)
	defer func() { _ = db.Close() }()
	return run(ctx, db, f)
}

// onDB runs f on one connection of db.
func onDB(ctx context.Context, db *sql.DB, f func(context.Context, *session) error) error {
	if db == nil {
		return errors.New("pgleader/migrations: nil *sql.DB")
	}
	return run(ctx, db, f)
}

// run takes one connection of db, takes golang-migrate's advisory lock on
// it, and runs f with golang-migrate on that same connection; the owner
// check in f runs on it too. One connection at a time, never a second
// while holding the first: a call that held one and waited for another
// could wait forever on a small pool, or among concurrent calls sharing
// one.
func run(ctx context.Context, db *sql.DB, f func(context.Context, *session) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("pgleader/migrations: waited for a free connection until the context ended (a migration holds one connection while it runs; are the others all in use?): %w", err)
		}
		return fmt.Errorf("pgleader/migrations: %w", err)
	}
	var dbName string
	var schema sql.NullString
	if err := conn.QueryRowContext(ctx, `SELECT current_database(), current_schema()`).Scan(&dbName, &schema); err != nil {
		_ = conn.Close()
		return fmt.Errorf("pgleader/migrations: %w", err)
	}
	if !schema.Valid {
		_ = conn.Close()
		return fmt.Errorf("pgleader/migrations: the connection has no current schema to keep the history table %s in (no schema its search_path names exists); set search_path, for example to public", HistoryTable)
	}
	key, err := lockKey(dbName, schema.String)
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("pgleader/migrations: %w", err)
	}

	// The lock is golang-migrate's (its driver takes it again on this
	// session, which PostgreSQL grants at once), taken here first so that
	// the wait for another migrator ends with ctx, and so that the checks
	// run under it.
	if _, err := conn.ExecContext(ctx, `SELECT pg_catalog.pg_advisory_lock($1)`, key); err != nil {
		discard(conn) // the lock may have been granted as the wait was cut off
		if ctx.Err() != nil {
			return fmt.Errorf("pgleader/migrations: waited for the migration lock until the context ended: another session holds it, most likely a migration in progress: %w", ctx.Err())
		}
		return fmt.Errorf("pgleader/migrations: take the migration lock: %w", err)
	}
	defer release(conn, key)

	drv, err := postgres.WithConnection(ctx, conn, &postgres.Config{
		MigrationsTable: HistoryTable,
		DatabaseName:    dbName,
		SchemaName:      schema.String,
	})
	if err != nil {
		return fmt.Errorf("pgleader/migrations: %w", err)
	}
	src, err := iofs.New(files, ".")
	if err != nil {
		return fmt.Errorf("pgleader/migrations: %w", err)
	}
	// m is not closed: closing it closes conn, which release gives back.
	m, err := migrate.NewWithInstance("iofs", src, "postgres", drv)
	if err != nil {
		return fmt.Errorf("pgleader/migrations: %w", err)
	}

	// golang-migrate takes no context; stop between migrations when ctx ends.
	m.GracefulStop = make(chan bool, 1)
	stop := context.AfterFunc(ctx, func() { m.GracefulStop <- true })
	defer stop()

	err = f(ctx, &session{conn: conn, m: m})
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("pgleader/migrations: %w", err)
	}
	return ctx.Err()
}

// lockKey is the key of golang-migrate's advisory lock on the history
// table in schema of the database dbName: the key its PostgreSQL drivers
// take for a connection they are given, as earlier releases of this
// package took it, so that they and this one serialize on one lock.
func lockKey(dbName, schema string) (int64, error) {
	id, err := database.GenerateAdvisoryLockId(dbName, schema, HistoryTable)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(id, 10, 64)
}

// release unlocks the migration lock on conn and gives conn back to its
// pool; if the unlock fails (a query cut off by ctx may have closed the
// session, or left it in a failed transaction), it discards conn.
func release(conn *sql.Conn, key int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var unlocked bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_catalog.pg_advisory_unlock($1)`, key).Scan(&unlocked); err != nil || !unlocked {
		discard(conn)
		return
	}
	_ = conn.Close()
}

// discard closes conn's session instead of giving it back to its pool,
// which releases whatever the session held: no pooled connection keeps the
// migration lock or a transaction.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(dc any) error {
		// pgx's stdlib gives a pool connection back to its pgxpool when
		// database/sql closes it; the pool drops a closed one.
		if c, ok := dc.(*stdlib.Conn); ok {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.Conn().Close(ctx)
			cancel()
		}
		return driver.ErrBadConn // database/sql closes it, not to reuse it
	})
	_ = conn.Close() // ErrConnDone: Raw closed it
}
