package sqlfence_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/sqlfence"
)

// A fence trigger catches a write path that forgot the fence condition.
func ExampleInstallTrigger() {
	pool, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE digests (name text PRIMARY KEY, body text, fence bigint)`)
	must(err)
	_, err = pool.Exec(ctx, `INSERT INTO digests VALUES ('daily', 'pod-b #1', 2)`)
	must(err)

	trigger, err := sqlfence.InstallTrigger(ctx, pool, pgx.Identifier{"public", "digests"}, "fence")
	must(err)
	fmt.Println("installed", trigger)

	_, err = pool.Exec(ctx, `UPDATE digests SET body = 'pod-a #2', fence = 1 WHERE name = 'daily'`)
	fmt.Println(sqlfence.FromError(err))
	// Output:
	// installed pgleader_fence_fence
	// sqlfence: resource "public.digests" fenced: token 1 is stale, stored fence is 2
}
