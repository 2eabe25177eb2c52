package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgleader/pgleader/sqlfence"
)

// The fences through database/sql. Here the *sql.DB is pgx's stdlib on a
// pool; one of lib/pq, or the *sql.DB under GORM or sqlx, works the same.
func ExampleGuard_WriteSQL() {
	pool, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	_, err := db.ExecContext(ctx, `CREATE TABLE outbox (token bigint, message text)`)
	must(err)

	outbox := sqlfence.Guard{Resource: "outbox"}
	send := func(token int64, message string) func(*sql.Tx) error {
		return func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO outbox VALUES ($1, $2)`, token, message)
			return err
		}
	}

	must(outbox.ClaimSQL(ctx, db, 1, send(1, "a")))
	must(outbox.ClaimSQL(ctx, db, 2, send(2, "b"))) // term 2 claims and sends
	err = outbox.WriteSQL(ctx, db, 1, send(1, "c")) // term 1, too late
	fmt.Println(errors.Is(err, sqlfence.ErrFenced), err)

	floor, err := outbox.Floor(ctx, sqlfence.SQL(db))
	must(err)
	fmt.Println("floor", floor)
	// Output:
	// true sqlfence: resource "outbox" fenced: token 1 is stale, stored fence is 2
	// floor 2
}
