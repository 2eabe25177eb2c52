// Command gorm publishes a digest through GORM under a pgleader lease, in
// GORM transactions fenced by the term's token in each of sqlfence's three
// strengths: a replica whose lease has passed to a newer term cannot
// overwrite that term's digest, however late its write arrives. GORM runs
// on pgx's stdlib, and pgleader's migrations go through GORM's *sql.DB;
// only the lease itself runs on a pgx pool (it listens for notifications).
//
//	DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' go run .
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

// Digest is the application's GORM model. Fence is the row's column fence,
// the highest token that wrote it: sqlfence writes it, GORM only reads it.
type Digest struct {
	Name  string `gorm:"primaryKey"`
	Body  string
	Fence *int64 `gorm:"->"`
}

// key is the lease the publisher holds.
const key = "daily-digest"

var (
	// fenceColumn fences each digest by its own Fence column.
	fenceColumn = sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence", Create: true}
	// guard fences the whole table by a guard row in pgleader.fence.
	guard = sqlfence.Guard{Resource: "digests"}
)

// PublishColumn saves d fenced by its row: the transaction first raises the
// row's fence to token (creating the row), which a higher token refuses; the
// row then stays locked until the transaction ends, so the Save is fenced
// too.
func PublishColumn(ctx context.Context, db *gorm.DB, token int64, d Digest) error {
	return publish(ctx, db, d, func(tx *sql.Tx) error {
		return fenceColumn.Write(ctx, sqlfence.SQL(tx), d.Name, token)
	})
}

// PublishGuarded saves d in a transaction that first takes the guard of the
// digests table under token.
func PublishGuarded(ctx context.Context, db *gorm.DB, token int64, d Digest) error {
	return publish(ctx, db, d, func(tx *sql.Tx) error {
		return guard.WriteSQLTx(ctx, tx, token)
	})
}

// PublishUnderLease saves d in a transaction that first checks that the
// term (key, token) holds the lease, and keeps the next term from starting
// until it commits.
func PublishUnderLease(ctx context.Context, db *gorm.DB, token int64, d Digest) error {
	return publish(ctx, db, d, func(tx *sql.Tx) error {
		return sqlfence.LeaseGuardSQLTx(ctx, tx, key, token)
	})
}

// publish saves d in a GORM transaction whose first statement is fence, on
// the transaction's *sql.Tx. If fence refuses (sqlfence.ErrFenced,
// sqlfence.ErrLeaseNotHeld), GORM rolls back and nothing is saved.
func publish(ctx context.Context, db *gorm.DB, d Digest, fence func(*sql.Tx) error) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// GORM runs its transaction in a *sql.Tx (not with PrepareStmt).
		sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
		if !ok {
			return fmt.Errorf("GORM's transaction is a %T, not a *sql.Tx", tx.Statement.ConnPool)
		}
		if err := fence(sqlTx); err != nil {
			return err
		}
		return tx.Save(&d).Error
	})
}

// Open opens GORM on dsn (pgx's stdlib underneath) and applies pgleader's
// migrations through GORM's *sql.DB, then GORM's for Digest; the lease gets
// a pgx pool of its own on the same dsn. closeAll closes both.
func Open(ctx context.Context, dsn string) (backend *pgleader.Postgres, db *gorm.DB, closeAll func(), err error) {
	if db, err = gorm.Open(postgres.Open(dsn), &gorm.Config{}); err != nil {
		return nil, nil, nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, nil, nil, err
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		_ = sqlDB.Close()
		return nil, nil, nil, err
	}
	closeAll = func() { pool.Close(); _ = sqlDB.Close() }
	if err = migrations.UpDB(ctx, sqlDB); err == nil {
		err = db.WithContext(ctx).AutoMigrate(&Digest{})
	}
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return pgleader.NewPostgres(pool), db, closeAll, nil
}

// run publishes the daily digest on whichever replica gets the lease (the
// others get an error matching pgleader.ErrHeld), once in each strength to
// show them; an application picks the one its writes need.
func run(ctx context.Context, dsn string) error {
	backend, db, closeAll, err := Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer closeAll()
	return pgleader.Do(ctx, backend, pgleader.Spec{Key: key}, func(ctx context.Context, t *pgleader.Term) error {
		d := Digest{Name: "daily", Body: fmt.Sprintf("published at %s by term %d", time.Now().Format(time.RFC3339), t.Token())}
		for _, write := range []func(context.Context, *gorm.DB, int64, Digest) error{PublishColumn, PublishGuarded, PublishUnderLease} {
			if err := write(ctx, db, t.Token(), d); err != nil {
				return err
			}
		}
		return nil
	})
}

func main() {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		fmt.Fprintln(os.Stderr, "gorm: set DATABASE_URL")
		os.Exit(2)
	}
	if err := run(context.Background(), dsn); err != nil {
		fmt.Fprintln(os.Stderr, "gorm:", err)
		os.Exit(1)
	}
	fmt.Println("published")
}
