// Command partitions shares the partitions of an outbox among the running
// replicas with one pgleader.Set: each replica relays the partitions it
// leads, one body per partition, and the replicas spread them evenly as they
// come and go. Run it several times side by side:
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/partitions -owner a
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/partitions -owner b
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
)

func main() {
	owner := flag.String("owner", "", "this replica's name (default hostname:pid)")
	partitions := flag.Int("partitions", 12, "number of outbox partitions")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *owner, *partitions); err != nil {
		fmt.Fprintln(os.Stderr, "partitions:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, owner string, n int) error {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("outbox-%02d", i)
	}
	set, err := pgleader.NewSet(pgleader.NewPostgres(pool), pgleader.Spec{Key: "outbox"}, keys,
		pgleader.SetOptions{Owner: owner, Lead: relay})
	if err != nil {
		return err
	}
	go report(ctx, set)
	return set.Run(ctx)
}

// relay is the body for one partition: it works while its term is live,
// writing with the term's token so a fenced store refuses a stale relay.
func relay(ctx context.Context, t *pgleader.Term) error {
	slog.Info("relaying", "partition", t.Key(), "token", t.Token())
	for t.Live() {
		// One unit of work: read a batch of partition t.Key()'s outbox
		// and publish it, fenced with t.Token().
		select {
		case <-t.Ending():
		case <-time.After(time.Second):
		}
	}
	slog.Info("stopped relaying", "partition", t.Key(), "reason", t.Reason().String())
	return ctx.Err()
}

func report(ctx context.Context, set *pgleader.Set) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
		st := set.Status()
		slog.Info("set", "held", st.Held, "keys", st.Keys, "members", st.Members, "share", st.Share)
	}
}
