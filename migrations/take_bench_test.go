package migrations_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
)

// BenchmarkSetAcquire times one set_acquire at schema version 26 and at
// Latest, in the same run, each in a database of its own, on two states
// of a set of 100,000 keys over three members (a, b, c), as at 100,000
// keys in pgleader-bench:
//
//   - cold: member a's first campaign at a cold start: no lease row yet,
//     the 33,333 keys of its part sent and every key of the set to
//     confirm (as a Set's first campaign sends them). It takes 10,000.
//   - crash: c died; a holds 33,334 keys, b 33,333, and a sends c's 33,333
//     keys, whose rows have expired. It takes 10,000.
//   - confirm: as a campaign that only confirms sends it (no key, the
//     66,666 keys a does not hold to confirm), with no term handed to a:
//     it takes nothing.
//
// The state is made again before each operation, outside the timer:
//
//	go test -run XXX -bench SetAcquire -benchtime 10x ./migrations
func BenchmarkSetAcquire(b *testing.B) {
	ctx := context.Background()
	key := func(i int) string { return fmt.Sprintf("k%06d", i) }
	keys := func(from, to int) []string {
		out := make([]string, 0, to-from)
		for i := from; i < to; i++ {
			out = append(out, key(i))
		}
		return out
	}
	all, part, dead, others := keys(0, 100000), keys(0, 33333), keys(66667, 100000), keys(33334, 100000)
	exec := func(b *testing.B, pool *pgxpool.Pool, sql string, args ...any) {
		b.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			b.Fatalf("%s: %v", sql, err)
		}
	}
	members := `INSERT INTO pgleader.set_member (set_name, role, owner, held, joined_at, expires_at)
		SELECT 's', current_user, o, 0, now(), now() + interval '1 hour' FROM unnest(ARRAY['a','b','c']) AS o`
	acquire := func(b *testing.B, pool *pgxpool.Pool, keys []string, held int, confirm []string, want int) {
		b.Helper()
		var won []string
		err := pool.QueryRow(ctx, `SELECT keys FROM pgleader.set_acquire('s', 'a', $1, '1 minute', $2, 0, NULL, 100000, $3)`,
			keys, held, confirm).Scan(&won)
		if err != nil || len(won) != want {
			b.Fatalf("set_acquire won %d keys, %v; want %d", len(won), err, want)
		}
	}
	for _, v := range []uint{26, migrations.Latest} {
		db := pgtest.New(b)
		if v != migrations.Latest {
			if err := migrations.To(ctx, db.Pool, v); err != nil {
				b.Fatal(err)
			}
		}
		exec(b, db.Pool, `SELECT pgleader.grace()`)
		exec(b, db.Pool, `UPDATE pgleader.server_epoch SET grace_until = clock_timestamp() - interval '1 second'`)
		exec(b, db.Pool, members)
		b.Run(fmt.Sprintf("cold/v%d", v), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				exec(b, db.Pool, `TRUNCATE pgleader.lease CASCADE`)
				b.StartTimer()
				acquire(b, db.Pool, part, 0, all, 10000)
			}
		})
		b.Run(fmt.Sprintf("crash/v%d", v), func(b *testing.B) {
			b.StopTimer()
			exec(b, db.Pool, `TRUNCATE pgleader.lease CASCADE`)
			exec(b, db.Pool, `INSERT INTO pgleader.lease (key, holder, token, acquired_at, renewed_at, expires_at, role)
				SELECT k, CASE WHEN k < 'k033334' THEN 'a' WHEN k < 'k066667' THEN 'b' ELSE 'c' END, 1, now(), now(),
				       now() + interval '1 hour', current_user
				  FROM unnest($1::text[]) AS k`, all)
			exec(b, db.Pool, `UPDATE pgleader.set_member SET expires_at = now() - interval '1 second' WHERE owner = 'c'`)
			exec(b, db.Pool, `VACUUM ANALYZE pgleader.lease`)
			b.StartTimer()
			for range b.N {
				b.StopTimer()
				exec(b, db.Pool, `UPDATE pgleader.lease SET holder = 'c', expires_at = now() - interval '1 second'
					WHERE key >= 'k066667' AND (holder <> 'c' OR expires_at > now())`)
				b.StartTimer()
				acquire(b, db.Pool, dead, 33334, nil, 10000)
			}
		})
		b.Run(fmt.Sprintf("confirm/v%d", v), func(b *testing.B) {
			for range b.N {
				acquire(b, db.Pool, []string{}, 33334, others, 0)
			}
		})
	}
}
