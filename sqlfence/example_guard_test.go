package sqlfence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/sqlfence"
)

// A fenced transaction: several statements that commit only together with
// the guard.
func ExampleGuard() {
	pool, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE outbox (token bigint, message text)`)
	must(err)

	outbox := sqlfence.Guard{Resource: "outbox"}
	send := func(token int64, messages ...string) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			for _, m := range messages {
				if _, err := tx.Exec(ctx, `INSERT INTO outbox VALUES ($1, $2)`, token, m); err != nil {
					return err
				}
			}
			return nil
		}
	}

	must(outbox.Claim(ctx, pool, 1, nil)) // term 1's claim
	must(outbox.Write(ctx, pool, 1, send(1, "a", "b")))
	must(outbox.Claim(ctx, pool, 2, send(2, "c"))) // term 2 claims and sends

	err = outbox.Write(ctx, pool, 1, send(1, "d", "e")) // term 1, too late
	fmt.Println(errors.Is(err, sqlfence.ErrFenced), err)

	var n int
	must(pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n))
	floor, err := outbox.Floor(ctx, pool)
	must(err)
	fmt.Println(n, "messages; floor", floor)
	// Output:
	// true sqlfence: resource "outbox" fenced: token 1 is stale, stored fence is 2
	// 3 messages; floor 2
}
