// Command libpq writes a digest in each of sqlfence's three strengths on
// database/sql with lib/pq, under a pgleader term: a column fence on the
// row, a guard row taken in the transaction, and the lease itself checked
// in the transaction. Only the lease runs on pgx (it listens for
// notifications); every write goes through lib/pq.
//
//	DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' go run .
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/lib/pq" // the database/sql driver "postgres"

	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

// The three fences of the digests table.
var (
	// fenceColumn fences each row by its fence column.
	fenceColumn = sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence", Create: true}
	// guard fences the whole table by a guard row in pgleader.fence.
	guard = sqlfence.Guard{Resource: "digests"}
)

// key is the lease the writer holds.
const key = "daily-digest"

// WriteColumn writes the digest's body under token, fenced by its row.
func WriteColumn(ctx context.Context, db *sql.DB, token int64, name, body string) error {
	return fenceColumn.Write(ctx, sqlfence.SQL(db), name, token, sqlfence.Assign("body", body))
}

// WriteGuarded writes the body in a transaction that first takes the guard
// under token.
func WriteGuarded(ctx context.Context, db *sql.DB, token int64, name, body string) error {
	return guard.WriteSQL(ctx, db, token, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE digests SET body = $1 WHERE name = $2`, body, name)
		return err
	})
}

// WriteUnderLease writes the body in a transaction that first checks that
// the term (key, token) holds the lease, and keeps the next term from
// starting until it commits.
func WriteUnderLease(ctx context.Context, db *sql.DB, token int64, name, body string) error {
	return sqlfence.WithLeaseSQL(ctx, db, key, token, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE digests SET body = $1 WHERE name = $2`, body, name)
		return err
	})
}

// Open connects to dsn twice, lib/pq for the writes and a pgx pool for the
// lease, and applies pgleader's migrations through lib/pq, then the table.
func Open(ctx context.Context, dsn string) (backend *pgleader.Postgres, db *sql.DB, closeAll func(), err error) {
	if db, err = sql.Open("postgres", dsn); err != nil {
		return nil, nil, nil, err
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		_ = db.Close()
		return nil, nil, nil, err
	}
	closeAll = func() { pool.Close(); _ = db.Close() }
	if err = migrations.UpDB(ctx, db); err == nil {
		_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS digests (name text PRIMARY KEY, body text, fence bigint)`)
	}
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return pgleader.NewPostgres(pool), db, closeAll, nil
}

func run(ctx context.Context, dsn string) error {
	backend, db, closeAll, err := Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer closeAll()
	return pgleader.Do(ctx, backend, pgleader.Spec{Key: key}, func(ctx context.Context, t *pgleader.Term) error {
		body := fmt.Sprintf("by term %d", t.Token())
		if err := WriteColumn(ctx, db, t.Token(), "daily", body); err != nil {
			return err
		}
		if err := WriteGuarded(ctx, db, t.Token(), "daily", body); err != nil {
			return err
		}
		return WriteUnderLease(ctx, db, t.Token(), "daily", body)
	})
}

func main() {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		fmt.Fprintln(os.Stderr, "libpq: set DATABASE_URL")
		os.Exit(2)
	}
	if err := run(context.Background(), dsn); err != nil {
		fmt.Fprintln(os.Stderr, "libpq:", err)
		os.Exit(1)
	}
	fmt.Println("published")
}
