package sqlfence_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
	"github.com/pgleader/pgleader/sqlfence"
)

// terms returns n terms of key, with tokens 1 to n, each run (and ended)
// by pgleader.Do on an in-memory backend.
func terms(t *testing.T, n int) []*pgleader.Term {
	t.Helper()
	b := pgleadertest.NewBackend()
	var out []*pgleader.Term
	for range n {
		err := pgleader.Do(context.Background(), b, pgleader.Spec{Key: "daily", TTL: 6 * time.Second}, func(_ context.Context, term *pgleader.Term) error {
			out = append(out, term)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestBoundColumnHooks: a bound row's Claim and Floor are an Elector's
// hooks: a claim by a token at or below the row's fence is refused with
// no error (the term ends as refused), Floor reads the fence, and Write
// refuses a stale term with ErrFenced; a failure is an error, not a
// refusal.
func TestBoundColumnHooks(t *testing.T) {
	t.Parallel()
	db := newDigests(t, 0)
	ctx := context.Background()
	ts := terms(t, 3)
	daily := digests.Bind(db.Pool, "daily")
	for i, want := range []bool{true, true} {
		if ok, err := daily.Claim(ctx, ts[i]); ok != want || err != nil {
			t.Fatalf("Claim by token %d = %v, %v; want %v, nil", ts[i].Token(), ok, err, want)
		}
	}
	if ok, err := daily.Claim(ctx, ts[0]); ok || err != nil {
		t.Fatalf("Claim by stale token 1 = %v, %v; want false, nil (refused)", ok, err)
	}
	if f, err := daily.Floor(ctx); f != 2 || err != nil {
		t.Fatalf("Floor = %d, %v; want 2", f, err)
	}
	if err := daily.Write(ctx, ts[1], sqlfence.Assign("body", "two")); err != nil {
		t.Fatal(err)
	}
	wantStale(t, daily.Write(ctx, ts[0], sqlfence.Assign("body", "one")), "digests/daily", 1, 2, false)
	if body, fence := readDigest(t, db.Pool, "daily"); body != "two" || fence != 2 {
		t.Fatalf("row = %q at %d; want \"two\" at 2", body, fence)
	}
	missing := sqlfence.Column{Table: pgx.Identifier{"no_such_table"}, KeyColumn: "name", FenceColumn: "fence"}.Bind(db.Pool, "daily")
	if ok, err := missing.Claim(ctx, ts[2]); ok || err == nil {
		t.Fatalf("Claim on a missing table = %v, %v; want false and the error", ok, err)
	}
}

// TestBoundGuardHooks: the same for a bound guard.
func TestBoundGuardHooks(t *testing.T) {
	t.Parallel()
	db := newDigests(t, 0)
	ctx := context.Background()
	ts := terms(t, 2)
	g := sqlfence.Guard{Resource: "digests/daily"}.Bind(db.Pool)
	if ok, err := g.Claim(ctx, ts[1]); !ok || err != nil {
		t.Fatalf("Claim by token 2 = %v, %v; want true", ok, err)
	}
	if ok, err := g.Claim(ctx, ts[0]); ok || err != nil {
		t.Fatalf("Claim by stale token 1 = %v, %v; want false, nil", ok, err)
	}
	if f, err := g.Floor(ctx); f != 2 || err != nil {
		t.Fatalf("Floor = %d, %v; want 2", f, err)
	}
	write := func(body string) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE digests SET body = $1 WHERE name = 'daily'`, body)
			return err
		}
	}
	if err := g.Write(ctx, ts[1], write("two")); err != nil {
		t.Fatal(err)
	}
	wantStale(t, g.Write(ctx, ts[0], write("one")), "digests/daily", 1, 2, false)
	if body, _ := readDigest(t, db.Pool, "daily"); body != "two" {
		t.Fatalf("body = %q; want \"two\"", body)
	}
}
