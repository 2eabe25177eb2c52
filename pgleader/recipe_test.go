package pgleader_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// digests is the recipe's fenced store in PostgreSQL: one row whose fence
// is the highest token that wrote, and a log of what each write published.
type digests struct {
	pool *pgxpool.Pool
}

func newDigests(t *testing.T, pool *pgxpool.Pool, fence int64) digests {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		CREATE TABLE digests (name text PRIMARY KEY, body text, fence bigint NOT NULL);
		CREATE TABLE published (id bigserial PRIMARY KEY, token bigint NOT NULL, seq int NOT NULL, owner text NOT NULL);`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `INSERT INTO digests VALUES ('digest', '', $1)`, fence); err != nil {
		t.Fatal(err)
	}
	return digests{pool}
}

// claim is the recipe's claim: the stored fence must be strictly lower.
func (d digests) claim(ctx context.Context, token int64) (bool, error) {
	tag, err := d.pool.Exec(ctx, `UPDATE digests SET fence = $1 WHERE name = 'digest' AND fence < $1`, token)
	return tag.RowsAffected() == 1, err
}

// write is the recipe's write (fence lower or equal), logging the unit in
// the same statement so only accepted units are logged.
func (d digests) write(ctx context.Context, token int64, seq int, owner string) (bool, error) {
	tag, err := d.pool.Exec(ctx, `
		WITH w AS (UPDATE digests SET body = $3::text || ' #' || $2::int, fence = $1
		            WHERE name = 'digest' AND fence <= $1 RETURNING 1)
		INSERT INTO published (token, seq, owner) SELECT $1, $2, $3 FROM w`, token, seq, owner)
	return tag.RowsAffected() == 1, err
}

func (d digests) floor(ctx context.Context) (int64, error) {
	var f int64
	err := d.pool.QueryRow(ctx, `SELECT fence FROM digests WHERE name = 'digest'`).Scan(&f)
	return f, err
}

type unit struct {
	token int64
	seq   int
	owner string
}

func (d digests) published(t *testing.T) []unit {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), `SELECT token, seq, owner FROM published ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []unit
	for rows.Next() {
		var u unit
		if err := rows.Scan(&u.token, &u.seq, &u.owner); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

// publisher is the recipe's body: one unit at a time, Live checked between
// units, stopping at the first write the fence refuses.
func publisher(d digests, owner string, every time.Duration, ended chan<- pgleader.EndReason) func(context.Context, *pgleader.Term) error {
	return func(ctx context.Context, t *pgleader.Term) error {
		seq := 0
		for t.Live() {
			seq++
			ok, err := d.write(ctx, t.Token(), seq, owner)
			if err != nil || !ok {
				return err
			}
			select {
			case <-t.Ending():
			case <-time.After(every):
			}
		}
		ended <- t.Reason()
		return nil
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

type pgRun struct {
	el     *pgleader.Elector
	cancel context.CancelFunc
	done   chan error
}

func startPG(t *testing.T, db *pgtest.DB, spec pgleader.Spec, opts pgleader.Options) *pgRun {
	t.Helper()
	opts.Logger = quiet
	spec.RequireFenceAdvance = spec.RequireFenceAdvance && opts.FenceFloor != nil // the scenario without a floor
	el, err := pgleader.New(pgleader.NewPostgres(db.NewPool(t)), spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &pgRun{el: el, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- el.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// TestRecipeHandover is the recipe's first scenario: two replicas in one
// process; the leader is stopped as a deploy would stop it, finishes its
// unit and releases; the other leads with token 2.
func TestRecipeHandover(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	store := newDigests(t, db.Pool, 0)
	ctx := context.Background()
	spec := recipeSpec("digest-publisher")

	endedA, endedB := make(chan pgleader.EndReason, 4), make(chan pgleader.EndReason, 4)
	a := startPG(t, db, spec, pgleader.Options{Owner: "pod-a",
		Lead:  publisher(store, "pod-a", 50*time.Millisecond, endedA),
		Claim: func(ctx context.Context, t *pgleader.Term) (bool, error) { return store.claim(ctx, t.Token()) }, FenceFloor: store.floor})
	waitFor(t, "pod-a to lead", func() bool { return a.el.Status().Leading })
	if tok := a.el.Status().Token; tok != 1 {
		t.Fatalf("pod-a leads with token %d, want 1", tok)
	}
	b := startPG(t, db, spec, pgleader.Options{Owner: "pod-b",
		Lead:  publisher(store, "pod-b", 50*time.Millisecond, endedB),
		Claim: func(ctx context.Context, t *pgleader.Term) (bool, error) { return store.claim(ctx, t.Token()) }, FenceFloor: store.floor})
	waitFor(t, "pod-a to publish a few units", func() bool { return len(store.published(t)) >= 3 })
	if b.el.Status().Leading {
		t.Fatal("pod-b leads while pod-a does")
	}

	a.cancel()
	if err := <-a.done; err != nil {
		t.Fatalf("pod-a Run = %v", err)
	}
	a.done <- nil // for the cleanup
	if r := <-endedA; r != pgleader.ReasonStopped {
		t.Fatalf("pod-a's term ended %v, want stopped", r)
	}
	if l, err := pgleader.NewPostgres(db.Pool).Lease(ctx, spec.Key); err != nil || (l.Held() && l.Holder == "pod-a") {
		t.Fatalf("after pod-a stopped the lease is %+v, %v; want released", l, err)
	}

	waitFor(t, "pod-b to lead", func() bool { return b.el.Status().Leading })
	if tok := b.el.Status().Token; tok != 2 {
		t.Fatalf("pod-b leads with token %d, want 2", tok)
	}
	waitFor(t, "pod-b to publish", func() bool {
		u := store.published(t)
		return u[len(u)-1].token == 2
	})

	units := store.published(t)
	seen2 := false
	for i, u := range units {
		if u.token == 2 {
			seen2 = true
		}
		if seen2 && u.token == 1 {
			t.Fatalf("unit %d with token 1 after token 2's first unit: %+v", i, units)
		}
		if i > 0 && units[i-1].token == u.token && units[i-1].seq+1 != u.seq {
			t.Fatalf("gap within term %d: %+v", u.token, units)
		}
		if (u.token == 1) != (u.owner == "pod-a") {
			t.Fatalf("unit %+v published by the wrong owner", u)
		}
	}
	if f, _ := store.floor(ctx); f != 2 {
		t.Fatalf("store fence = %d, want 2", f)
	}
}

// TestRecipeLostLockData is the recipe's second scenario: the lease data is
// gone while the store has seen token 50. With FenceFloor the first term
// draws 51 and its claim goes through at once; without it the counter
// restarts at 1 and every claim is refused while it climbs.
func TestRecipeLostLockData(t *testing.T) {
	t.Parallel()
	spec := recipeSpec("digest-publisher")
	spec.CampaignEvery = 20 * time.Millisecond // so the refused climb is quick to watch

	type outcome struct {
		claims   []int64
		accepted []int64
		led      []int64
	}
	run := func(withFloor bool, until func(o outcome) bool) outcome {
		db := pgtest.New(t) // a fresh lease table: the lock data is lost
		store := newDigests(t, db.Pool, 50)
		var mu sync.Mutex
		var o outcome
		opts := pgleader.Options{Owner: "pod-a",
			Lead: func(ctx context.Context, term *pgleader.Term) error {
				mu.Lock()
				o.led = append(o.led, term.Token())
				mu.Unlock()
				<-ctx.Done()
				return nil
			},
			Claim: func(ctx context.Context, term *pgleader.Term) (bool, error) {
				ok, err := store.claim(ctx, term.Token())
				mu.Lock()
				defer mu.Unlock()
				o.claims = append(o.claims, term.Token())
				if ok {
					o.accepted = append(o.accepted, term.Token())
				}
				return ok, err
			}}
		if withFloor {
			opts.FenceFloor = store.floor
		}
		r := startPG(t, db, spec, opts)
		snapshot := func() outcome {
			mu.Lock()
			defer mu.Unlock()
			return outcome{append([]int64(nil), o.claims...), append([]int64(nil), o.accepted...), append([]int64(nil), o.led...)}
		}
		waitFor(t, "the scenario to play out", func() bool { return until(snapshot()) })
		r.cancel()
		return snapshot()
	}

	with := run(true, func(o outcome) bool { return len(o.led) > 0 })
	if len(with.claims) != 1 || with.claims[0] != 51 || len(with.accepted) != 1 || with.led[0] != 51 {
		t.Fatalf("with FenceFloor: claims %v, accepted %v, led %v; want one claim of 51, accepted, leading", with.claims, with.accepted, with.led)
	}

	without := run(false, func(o outcome) bool { return len(o.claims) >= 5 })
	for i, tok := range without.claims {
		if tok != int64(i+1) {
			t.Fatalf("without FenceFloor: claims %v; want the counter to climb 1, 2, 3, ...", without.claims)
		}
	}
	if len(without.accepted) != 0 || len(without.led) != 0 {
		t.Fatalf("without FenceFloor: accepted %v, led %v; want every claim up to 50 refused", without.accepted, without.led)
	}
	t.Logf("with FenceFloor: first claim %d accepted; without: claims %v refused", with.claims[0], without.claims)
}
