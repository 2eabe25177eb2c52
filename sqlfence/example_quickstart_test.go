package sqlfence_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

// quickStart is the README's quick start: the recipe's publisher, fenced, in
// 15 lines. The lines between the markers are the README's, word for word
// (TestReadmeQuickStart).
func quickStart(ctx context.Context, pool *pgxpool.Pool, render func() string) error {
	if err := migrations.Up(ctx, pool); err != nil { // once per start; safe from every replica at once
		return err
	}
	// quick start: begin
	// The row this leader writes, fenced by its term's token:
	daily := sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence"}.Bind(pool, "daily")
	el, err := pgleader.New(pgleader.NewPostgres(pool), pgleader.Spec{Key: "digest-publisher", RequireFenceAdvance: true},
		pgleader.Options{Claim: daily.Claim, FenceFloor: daily.Floor, Lead: func(ctx context.Context, t *pgleader.Term) error {
			for t.Live() {
				if err := daily.Write(ctx, t, sqlfence.Assign("body", render())); err != nil {
					return err // a newer term has written (sqlfence.ErrFenced): this one stops
				}
				t.Wait(time.Minute) // or until the term ends
			}
			return nil
		}})
	if err != nil {
		return err
	}
	return el.Run(ctx) // campaigns until ctx is cancelled; a stop hands the lease to another replica
	// quick start: end
}

// The README's quick start, run: one replica publishes the digest under
// token 1 until it is stopped.
func Example_quickStart() {
	pool, cleanup := exampleDB()
	defer cleanup()
	ctx, cancel := context.WithCancel(context.Background())
	_, err := pool.Exec(ctx, `CREATE TABLE digests (name text PRIMARY KEY, body text, fence bigint)`)
	must(err)
	_, err = pool.Exec(ctx, `INSERT INTO digests (name, body, fence) VALUES ('daily', '', 0)`)
	must(err)

	published := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- quickStart(ctx, pool, func() string {
			defer func() {
				select {
				case published <- struct{}{}:
				default:
				}
			}()
			return "today's digest"
		})
	}()
	<-published
	time.Sleep(100 * time.Millisecond) // the write commits
	cancel()
	must(<-done)
	var body string
	var fence int64
	must(pool.QueryRow(context.Background(), `SELECT body, fence FROM digests WHERE name = 'daily'`).Scan(&body, &fence))
	fmt.Println(body, "at fence", fence)
	// Output:
	// today's digest at fence 1
}
