package sqlfence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/sqlfence"
)

// A lease-guarded transaction: it commits only while its term holds the
// lease, and no new term can begin until it ends.
func ExampleWithLease() {
	pool, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE published (token bigint, body text)`)
	must(err)

	// The lease, taken here with plain SQL; package pgleader does this for
	// a running election.
	acquire := func(owner string) (token int64) {
		must(pool.QueryRow(ctx, `SELECT token FROM pgleader.acquire('digest-publisher', $1, '30 seconds')`,
			owner).Scan(&token))
		return token
	}
	publish := func(token int64, body string) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO published VALUES ($1, $2)`, token, body)
			return err
		}
	}

	a := acquire("pod-a")
	must(sqlfence.WithLease(ctx, pool, "digest-publisher", a, publish(a, "pod-a #1")))

	// Term a ends and pod-b's term begins.
	_, err = pool.Exec(ctx, `SELECT pgleader.release('digest-publisher', 'pod-a', $1)`, a)
	must(err)
	b := acquire("pod-b")

	err = sqlfence.WithLease(ctx, pool, "digest-publisher", a, publish(a, "pod-a #2"))
	fmt.Println(errors.Is(err, sqlfence.ErrLeaseNotHeld), err)
	must(sqlfence.WithLease(ctx, pool, "digest-publisher", b, publish(b, "pod-b #1")))

	rows, _ := pool.Query(ctx, `SELECT body FROM published ORDER BY token`)
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	must(err)
	fmt.Println(bodies)
	// Output:
	// true sqlfence: lease "digest-publisher" is not held by token 1: the lease is at token 2
	// [pod-a #1 pod-b #1]
}
