package sqlfence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/sqlfence"
)

// claimRace is the recipe's race after the lease data was lost: the store
// has seen token 50, and in each round two holders that drew the same token
// claim it at once on their own connections. Exactly one must win, and the
// loser must see the winner's fence.
func claimRace(t *testing.T, pools [2]*pgxpool.Pool, claim func(db *pgxpool.Pool, token int64) error) {
	t.Helper()
	const rounds = 200
	for round := range rounds {
		token := int64(51 + round)
		var errs [2]error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, pool := range pools {
			wg.Go(func() {
				<-start
				errs[i] = claim(pool, token)
			})
		}
		close(start)
		wg.Wait()

		var won int
		for _, err := range errs {
			var se *sqlfence.StaleError
			switch {
			case err == nil:
				won++
			case errors.As(err, &se) && se.Claim && se.Token == token && se.Stored == token:
			default:
				t.Fatalf("round %d: %v; want nil or a refused claim of %d at stored %d", round, err, token, token)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d holders of token %d claimed; want exactly 1", round, won, token)
		}
	}
}

// racePools returns two pools of one connection each, opened before racing.
func racePools(t *testing.T, open func(*testing.T) *pgxpool.Pool) [2]*pgxpool.Pool {
	t.Helper()
	var pools [2]*pgxpool.Pool
	for i := range pools {
		pools[i] = open(t)
		if err := pools[i].Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return pools
}

func TestColumnClaimRace(t *testing.T) {
	t.Parallel()
	db := newDigests(t, 50)
	ctx := context.Background()
	pools := racePools(t, func(t *testing.T) *pgxpool.Pool {
		return db.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	})
	claimRace(t, pools, func(pool *pgxpool.Pool, token int64) error {
		return digests.Claim(ctx, pool, "daily", token)
	})
	if floor, err := digests.Floor(ctx, db.Pool, "daily"); err != nil || floor != 250 {
		t.Fatalf("floor after the race = %d, %v; want 250", floor, err)
	}
}

func TestGuardClaimRace(t *testing.T) {
	t.Parallel()
	db := newDigests(t, 50)
	ctx := context.Background()
	g := sqlfence.Guard{Resource: "digests/daily"}
	if err := g.Write(ctx, db.Pool, 50, nil); err != nil {
		t.Fatal(err)
	}
	pools := racePools(t, func(t *testing.T) *pgxpool.Pool {
		return db.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	})
	// Each winner also writes in its transaction; a loser's write must not commit.
	claimRace(t, pools, func(pool *pgxpool.Pool, token int64) error {
		return g.Claim(ctx, pool, token, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE digests SET body = body || $1 WHERE name = 'daily'`, fmt.Sprintf("%d,", token))
			return err
		})
	})
	if floor, err := g.Floor(ctx, db.Pool); err != nil || floor != 250 {
		t.Fatalf("floor after the race = %d, %v; want 250", floor, err)
	}
	var want string
	for token := 51; token <= 250; token++ {
		want += fmt.Sprintf("%d,", token)
	}
	if body, _ := readDigest(t, db.Pool, "daily"); body != want {
		t.Fatalf("body = %q; want each token once, in order", body)
	}
}
