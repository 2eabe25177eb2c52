package sqlfence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/sqlfence"
)

// The recipe's digests table, fenced row by row.
func ExampleColumn() {
	pool, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE digests (name text PRIMARY KEY, body text, fence bigint)`)
	must(err)
	_, err = pool.Exec(ctx, `INSERT INTO digests (name, body, fence) VALUES ('daily', '', 0)`)
	must(err)

	digests := sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence"}

	// Term 1 claims the row before its first write, then writes.
	must(digests.Claim(ctx, pool, "daily", 1))
	must(digests.Write(ctx, pool, "daily", 1, sqlfence.Assign("body", "pod-a #1")))

	// Term 2 begins; term 1, paused past its lease, tries one more write.
	must(digests.Claim(ctx, pool, "daily", 2))
	err = digests.Write(ctx, pool, "daily", 1, sqlfence.Assign("body", "pod-a #2"))
	fmt.Println(err)
	var stale *sqlfence.StaleError
	if errors.As(err, &stale) {
		fmt.Println("term", stale.Token, "must stop; the row is at", stale.Stored)
	}

	must(digests.Write(ctx, pool, "daily", 2, sqlfence.Assign("body", "pod-b #1")))
	var body string
	must(pool.QueryRow(ctx, `SELECT body FROM digests WHERE name = 'daily'`).Scan(&body))
	floor, err := digests.Floor(ctx, pool, "daily")
	must(err)
	fmt.Println(body, "at fence", floor)
	// Output:
	// sqlfence: resource "digests/daily" fenced: token 1 is stale, stored fence is 2
	// term 1 must stop; the row is at 2
	// pod-b #1 at fence 2
}

// With Create, a term's first write creates the row: no row has to be
// inserted before the first election, and Floor reads a missing row as 0.
func ExampleColumn_create() {
	pool, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE digests (name text PRIMARY KEY, body text NOT NULL, fence bigint)`)
	must(err)

	digests := sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence", Create: true}

	floor, err := digests.Floor(ctx, pool, "daily")
	must(err)
	fmt.Println("floor before the first term:", floor)

	must(digests.Write(ctx, pool, "daily", 1, sqlfence.Assign("body", "pod-a #1"))) // inserts the row
	must(digests.Write(ctx, pool, "daily", 2, sqlfence.Assign("body", "pod-b #1"))) // updates it
	fmt.Println(digests.Write(ctx, pool, "daily", 1, sqlfence.Assign("body", "pod-a #2")))

	var body string
	must(pool.QueryRow(ctx, `SELECT body FROM digests WHERE name = 'daily'`).Scan(&body))
	fmt.Println(body)
	// Output:
	// floor before the first term: 0
	// sqlfence: resource "digests/daily" fenced: token 1 is stale, stored fence is 2
	// pod-b #1
}
