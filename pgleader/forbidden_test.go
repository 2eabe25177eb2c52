package pgleader_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// TestAnotherRolesKeyIsForbidden: a key belongs to the role that first
// acquired it. The Postgres backend of a service under
// another role gets an error matching ErrForbidden, naming the key's role,
// from every operation on it, and Do returns it without running the body.
func TestAnotherRolesKeyIsForbidden(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	roleA, urlA := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	_, urlB := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	pool := func(u string) *pgxpool.Pool {
		p, err := pgxpool.New(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	a := pgleader.NewPostgres(pool(urlA), pgleader.PollOnly(), pgleader.WithLogger(quiet))
	b := pgleader.NewPostgres(pool(urlB), pgleader.PollOnly(), pgleader.WithLogger(quiet))

	held, won, err := a.Acquire(ctx, "k", "a1", 10*time.Second)
	if err != nil || !won {
		t.Fatalf("A's acquire = %+v, %v, %v", held, won, err)
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, pgleader.ErrForbidden) || !strings.Contains(err.Error(), roleA) {
			t.Errorf("%s by B: err = %v; want ErrForbidden naming role %s", what, err, roleA)
		}
	}
	_, _, err = b.Acquire(ctx, "k", "b1", 10*time.Second)
	forbidden("Acquire", err)
	_, err = b.Renew(ctx, "k", held.Holder, held.Token, 10*time.Second)
	forbidden("Renew with A's holder and token", err)
	_, err = b.Release(ctx, "k", held.Holder, held.Token)
	forbidden("Release with A's holder and token", err)
	_, _, err = b.HandOff(ctx, "k", held.Holder, held.Token, "")
	forbidden("HandOff with A's holder and token", err)
	_, _, err = b.Resign(ctx, "k", held.Token)
	forbidden("Resign", err)
	_, _, err = b.Advance(ctx, "k", held.Token+100)
	forbidden("Advance", err)
	ran := false
	err = pgleader.Do(ctx, b, pgleader.Spec{Key: "k", TTL: 10 * time.Second}, func(context.Context, *pgleader.Term) error {
		ran = true
		return nil
	})
	forbidden("Do", err)
	if ran {
		t.Error("Do ran the body on another role's key")
	}

	// A's term is untouched: same token, still held by a1.
	if l, err := a.Lease(ctx, "k"); err != nil || l.Holder != "a1" || l.Token != held.Token || !l.ExpiresAt.Equal(held.ExpiresAt) {
		t.Fatalf("A's lease after B's attempts = %+v, %v; want a1's term %d expiring at %v unchanged", l, err, held.Token, held.ExpiresAt)
	}
}
