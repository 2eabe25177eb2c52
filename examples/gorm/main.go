// Command gorm publishes a digest through GORM once, under a pgleader lease,
// in a transaction fenced by the term's token: a replica whose lease has
// passed to a newer term cannot overwrite that term's digest, however late
// its write arrives.
//
//	DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' go run .
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

// Digest is the application's GORM model.
type Digest struct {
	Name string `gorm:"primaryKey"`
	Body string
}

// digests is the fence of the digests table: a guard row in pgleader.fence
// that remembers the highest token that wrote.
var digests = sqlfence.Guard{Resource: "digests"}

// Publish saves d through GORM in a transaction that first takes the guard
// under token. If a newer term has written, it returns an error matching
// sqlfence.ErrFenced and saves nothing.
func Publish(ctx context.Context, db *gorm.DB, token int64, d Digest) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// GORM runs its transaction in a *sql.Tx (not with PrepareStmt).
		sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
		if !ok {
			return fmt.Errorf("GORM's transaction is a %T, not a *sql.Tx", tx.Statement.ConnPool)
		}
		if err := digests.WriteSQLTx(ctx, sqlTx, token); err != nil {
			return err
		}
		return tx.Save(&d).Error
	})
}

// Open connects to the database at dsn twice, pgleader on a pgx pool and
// GORM on its own *sql.DB, and applies pgleader's migrations and GORM's for
// Digest. closeAll closes both.
func Open(ctx context.Context, dsn string) (backend *pgleader.Postgres, db *gorm.DB, closeAll func(), err error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, nil, nil, err
	}
	if db, err = gorm.Open(postgres.Open(dsn), &gorm.Config{}); err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	closeAll = func() { _ = sqlDB.Close(); pool.Close() }
	if err := migrations.Up(ctx, pool); err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	if err := db.AutoMigrate(&Digest{}); err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return pgleader.NewPostgres(pool), db, closeAll, nil
}

// run publishes the daily digest once, on whichever replica gets the lease
// (the others get an error matching pgleader.ErrHeld).
func run(ctx context.Context, dsn string) error {
	backend, db, closeAll, err := Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer closeAll()
	return pgleader.Do(ctx, backend, pgleader.Spec{Key: "daily-digest"}, func(ctx context.Context, t *pgleader.Term) error {
		body := fmt.Sprintf("published at %s by term %d", time.Now().Format(time.RFC3339), t.Token())
		return Publish(ctx, db, t.Token(), Digest{Name: "daily", Body: body})
	})
}

func main() {
	if err := run(context.Background(), os.Getenv("DATABASE_URL")); err != nil {
		fmt.Fprintln(os.Stderr, "gorm:", err)
		os.Exit(1)
	}
	fmt.Println("published")
}
