package pgleader_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// TestForgedHintsKeepTheCandidateRegistered: a hand-off hint naming a
// waiting candidate, forged every 100 ms for three TTLs, makes the
// candidate check with the database, and never costs it its place: it is
// a live candidate in every sample of pgleader.candidates, so a transfer or
// a hand-off can still pick it. (Each check reads the holder's renewed
// expiry; a candidate that waited for it instead of the one its campaign
// read would not campaign, and so not register again, while the hints
// last.)
func TestForgedHintsKeepTheCandidateRegistered(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	spec := pgleader.Spec{Key: "k", TTL: 2 * time.Second, RenewEvery: 500 * time.Millisecond, CampaignEvery: 100 * time.Millisecond,
		Margin: 200 * time.Millisecond, YieldGrace: 200 * time.Millisecond, ReleaseTimeout: 200 * time.Millisecond}
	a := startCandidate(t, db, spec, "a", pgleader.Options{})
	waitFor(t, "a to lead", func() bool { return a.el.Status().Leading })
	b := startCandidate(t, db, spec, "b", pgleader.Options{})
	registered(t, a.backend, "k", "b")
	waitFor(t, "b to listen", b.backend.Listening)

	ctx := context.Background()
	isCandidate := func() bool {
		rows, err := db.Pool.Query(ctx, `SELECT owner FROM pgleader.candidates('k')`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		found := false
		for rows.Next() {
			var o string
			if err := rows.Scan(&o); err != nil {
				t.Fatal(err)
			}
			found = found || o == "b"
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return found
	}
	samples, missing := 0, 0
	for end, next := time.Now().Add(3*spec.TTL), time.Now(); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if !time.Now().Before(next) {
			if _, err := db.Pool.Exec(ctx, `SELECT pg_notify('pgleader', 'handoff 1 b k')`); err != nil {
				t.Fatal(err)
			}
			next = next.Add(100 * time.Millisecond)
		}
		samples++
		if !isCandidate() {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("b was not a live candidate in %d of %d samples while hand-off hints naming it were forged", missing, samples)
	}
	if s := b.el.Status(); s.Leading || s.Terms != 0 || a.el.Status().Token != 1 || !a.el.Status().Leading {
		t.Fatalf("after the forged hints: b %+v, a %+v; want a still leading term 1", s, a.el.Status())
	}
}
