package pgleader_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// runOnce runs r until it returns or until limit, and says what it
// returned; ok is false if it was still running at limit (then it is
// stopped).
func runOnce(t *testing.T, run func(context.Context) error, limit time.Duration) (err error, ok bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	select {
	case err := <-done:
		return err, true
	case <-time.After(limit):
		cancel()
		<-done
		return nil, false
	}
}

// TestRunReturnsPermanentErrors: what retrying cannot cure ends Run at the
// first campaign (or tick) with a typed error that says what to do, for an
// Elector and a Set: no schema, a TTL above the database's max_ttl, a role
// without a grant; for a Set also a schema too old for its campaign though
// not for its tick (version 15), and keys another role holds, each refused
// at the first campaign after an answered tick. CampaignEvery is a minute
// (2 s for those two, whose first campaign comes CampaignEvery after the
// tick), so a Run that retried once would still be running when the test
// gives up. Once Run has returned, Status says why: the elector stopped, the set
// not running, and LastError the error Run returned.
func TestRunReturnsPermanentErrors(t *testing.T) {
	t.Parallel()
	migrated := pgtest.New(t)
	empty := pgtest.NewEmpty(t)
	_, noGrantURL := migrated.NewRole(t, "")
	noGrant := rolePool(t, noGrantURL)
	old := pgtest.NewEmpty(t)
	if err := migrations.To(context.Background(), old.Pool, 15); err != nil {
		t.Fatal(err)
	}
	// Role A holds the keys x1 and x2 of the set "set-k-another-role's-keys"
	// and runs no set; role B's set campaigns for them.
	_, urlA := migrated.NewRole(t, "SELECT pgleader.grant_usage($1)")
	_, urlB := migrated.NewRole(t, "SELECT pgleader.grant_usage($1)")
	roleA := pgleader.NewPostgres(rolePool(t, urlA), pgleader.WithLogger(discard))
	for _, key := range []string{"x1", "x2"} {
		if _, won, err := roleA.Acquire(context.Background(), key, "role-a", time.Minute); err != nil || !won {
			t.Fatalf("role A's acquire of %s: won %t, %v", key, won, err)
		}
	}
	cases := []struct {
		name     string
		backend  *pgleader.Postgres
		ttl      time.Duration
		sentinel error
		says     []string
		setOnly  bool // an Elector is not refused (it needs no more than schema version 1; its key is free)
	}{
		{"no schema", pgleader.NewPostgres(empty.Pool, pgleader.WithLogger(discard)), time.Minute, pgleader.ErrNotMigrated,
			[]string{"pgleader migrate up"}, false},
		{"TTL above max_ttl", pgleader.NewPostgres(migrated.Pool, pgleader.WithLogger(discard)), 20 * time.Minute, pgleader.ErrInvalid,
			[]string{"exceeds max_ttl", "hint: Use a shorter TTL, or raise the limit with pgleader.set_max_ttl"}, false},
		{"no grant", pgleader.NewPostgres(noGrant, pgleader.WithLogger(discard)), time.Minute, pgleader.ErrForbidden,
			[]string{"permission denied", "pgleader grant"}, false},
		{"schema too old", pgleader.NewPostgres(old.Pool, pgleader.WithLogger(discard)), time.Minute, pgleader.ErrNotMigrated,
			[]string{"pgleader migrate up", "set_acquire"}, true},
		{"another role's keys", pgleader.NewPostgres(rolePool(t, urlB), pgleader.WithLogger(discard)), time.Minute, pgleader.ErrForbidden,
			[]string{"belongs to role"}, true},
	}
	for _, c := range cases {
		spec := pgleader.Spec{Key: "k-" + strings.ReplaceAll(c.name, " ", "-"), TTL: c.ttl, CampaignEvery: time.Minute}
		if c.setOnly {
			// A Set's first campaign waits CampaignEvery (its first tick
			// is at once); a retry would come 2 s after it, and again
			// until the test gives up.
			spec.CampaignEvery = 2 * time.Second
		}
		check := func(what string, err error, ok bool) {
			t.Helper()
			switch {
			case !ok:
				t.Errorf("%s, %s: Run still running after 20 s; want it to return the error at its first campaign", c.name, what)
			case !errors.Is(err, c.sentinel) || !pgleader.Permanent(err):
				t.Errorf("%s, %s: Run returned %v; want an error matching %v (Permanent)", c.name, what, err, c.sentinel)
			default:
				for _, s := range c.says {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%s, %s: Run's error %q does not say %q", c.name, what, err, s)
					}
				}
			}
		}
		if !c.setOnly {
			e, err := pgleader.New(c.backend, spec, pgleader.Options{Owner: "a", Logger: discard, Lead: func(ctx context.Context, _ *pgleader.Term) error {
				<-ctx.Done()
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			err, ok := runOnce(t, e.Run, 20*time.Second)
			check("Elector", err, ok)
			if st := e.Status(); ok && (st.State != pgleader.StateStopped || st.LastError != err) {
				t.Errorf("%s: Status() after Run = %s, LastError %v; want stopped, with the error Run returned", c.name, st.State, st.LastError)
			}
		}
		spec.Key = "set-" + spec.Key
		s, err := pgleader.NewSet(c.backend, spec, []string{"x1", "x2"}, pgleader.SetOptions{Owner: "a", Logger: discard,
			Lead: func(ctx context.Context, _ *pgleader.Term) error { <-ctx.Done(); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		err, ok := runOnce(t, s.Run, 20*time.Second)
		check("Set", err, ok)
		if st := s.Status(); ok && (st.Running || st.LastError != err) {
			t.Errorf("%s: Set's Status() after Run: running %t, LastError %v; want not running, with the error Run returned", c.name, st.Running, st.LastError)
		}
	}
}

// TestRunRetriesWhatMayPass: an error retrying may cure (an unreachable
// database) is retried until it passes, and so is a permanent one once the
// run has had an answer (a migration or a grant under way can cause it).
func TestRunRetriesWhatMayPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := pgleadertest.NewBackend()
		spec := pgleader.Spec{Key: "k", TTL: 6 * time.Second}
		led := make(chan int64, 10)
		e, err := pgleader.New(b, spec, pgleader.Options{Owner: "a", Logger: discard, Lead: func(ctx context.Context, t *pgleader.Term) error {
			led <- t.Token()
			<-t.Ending()
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		b.SetFailure(errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"))
		go func() { done <- e.Run(ctx) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Run returned %v during an outage; want it to retry", err)
		default:
		}
		b.SetFailure(nil)
		time.Sleep(spec.TTL)
		synctest.Wait()
		if len(led) != 1 {
			t.Fatalf("led %d terms after the outage; want 1", len(led))
		}
		// Answered before: now a permanent error is retried too.
		b.SetFailure(fmt.Errorf("%w (renew_term: function pgleader.renew_term does not exist)", pgleader.ErrNotMigrated))
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Run returned %v after it had been answered; want it to retry", err)
		default:
		}
		b.SetFailure(nil)
		time.Sleep(2 * spec.TTL)
		synctest.Wait()
		if len(led) != 2 {
			t.Fatalf("led %d terms in all; want 2 (one after the error passed)", len(led))
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run returned %v when stopped; want nil", err)
		}

		// A Set, the same way.
		b2 := pgleadertest.NewBackend()
		b2.SetFailure(errors.New("connection reset by peer"))
		s, err := pgleader.NewSet(b2, pgleader.Spec{Key: "s", TTL: 6 * time.Second}, []string{"x1", "x2"}, pgleader.SetOptions{Owner: "a", Logger: discard,
			Lead: func(ctx context.Context, _ *pgleader.Term) error { <-ctx.Done(); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		go func() { done <- s.Run(ctx) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		b2.SetFailure(nil)
		time.Sleep(spec.TTL)
		synctest.Wait()
		if h := s.Status().Held; h != 2 {
			t.Fatalf("the set holds %d keys after the outage; want 2", h)
		}
		b2.SetFailure(fmt.Errorf("%w: no grant", pgleader.ErrForbidden))
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Set.Run returned %v after it had been answered; want it to retry", err)
		default:
		}
		b2.SetFailure(nil)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Set.Run returned %v when stopped; want nil", err)
		}
	})
}
