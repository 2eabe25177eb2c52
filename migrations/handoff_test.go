package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
)

type campaignResult struct {
	acquired bool
	holder   *string
	token    int64
	expires  *time.Time
	value    *string
}

// campaign registers owner as a candidate (candidate TTL cand) unless it wins.
func campaign(t *testing.T, db *pgxpool.Pool, key, owner, value string, priority int, cand string) campaignResult {
	t.Helper()
	var r campaignResult
	err := db.QueryRow(context.Background(),
		`SELECT acquired, holder, token, expires_at, value FROM pgleader.campaign($1, $2, '10 seconds', 0, nullif($3, ''), $4, $5::interval)`,
		key, owner, value, priority, cand).Scan(&r.acquired, &r.holder, &r.token, &r.expires, &r.value)
	if err != nil {
		t.Fatalf("campaign(%s, %s): %v", key, owner, err)
	}
	return r
}

func take(t *testing.T, db *pgxpool.Pool, key, owner string) campaignResult {
	t.Helper()
	var r campaignResult
	err := db.QueryRow(context.Background(),
		`SELECT acquired, holder, token, expires_at, value FROM pgleader.take($1, $2, '10 seconds')`,
		key, owner).Scan(&r.acquired, &r.holder, &r.token, &r.expires, &r.value)
	if err != nil {
		t.Fatalf("take(%s, %s): %v", key, owner, err)
	}
	return r
}

func handOff(t *testing.T, db *pgxpool.Pool, key, owner string, token int64, to *string) (bool, *string, int64) {
	t.Helper()
	var released bool
	var successor *string
	var tok int64
	err := db.QueryRow(context.Background(), `SELECT released, successor, token FROM pgleader.hand_off($1, $2, $3, $4)`,
		key, owner, token, to).Scan(&released, &successor, &tok)
	if err != nil {
		t.Fatalf("hand_off(%s, %s, %d): %v", key, owner, token, err)
	}
	return released, successor, tok
}

type leaseRow struct {
	holder            *string
	token             int64
	expires           *time.Time
	value             *string
	handedOff         bool
	candidateExpiries map[string]time.Time
}

func readLease(t *testing.T, db *pgxpool.Pool, key string) leaseRow {
	t.Helper()
	var r leaseRow
	err := db.QueryRow(context.Background(), `SELECT holder, token, expires_at, value, handed_off FROM pgleader.lease WHERE key = $1`, key).
		Scan(&r.holder, &r.token, &r.expires, &r.value, &r.handedOff)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(context.Background(), `SELECT owner, expires_at FROM pgleader.candidate WHERE key = $1`, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	r.candidateExpiries = map[string]time.Time{}
	for rows.Next() {
		var o string
		var e time.Time
		if err := rows.Scan(&o, &e); err != nil {
			t.Fatal(err)
		}
		r.candidateExpiries[o] = e
	}
	return r
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// TestHandOffToBestCandidate: hand_off passes the lease to the live
// candidate of highest priority in one statement: token + 1, its value, its
// candidate expiry as the term's bound, marked handed off until take.
func TestHandOffToBestCandidate(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	if r := campaign(t, db.Pool, "k", "a", "addr-a", 0, "12 seconds"); !r.acquired || r.token != 1 {
		t.Fatalf("first campaign = %+v; want a win with token 1", r)
	}
	campaign(t, db.Pool, "k", "b", "addr-b", 0, "12 seconds")
	campaign(t, db.Pool, "k", "c", "addr-c", 5, "12 seconds")
	campaign(t, db.Pool, "k", "d", "addr-d", 9, "1 microsecond") // expired at once: passed over
	before := readLease(t, db.Pool, "k")

	released, successor, token := handOff(t, db.Pool, "k", "a", 1, nil)
	if !released || str(successor) != "c" || token != 2 {
		t.Fatalf("hand_off = %v, %s, %d; want true, c (priority 5), 2", released, str(successor), token)
	}
	after := readLease(t, db.Pool, "k")
	if str(after.holder) != "c" || after.token != 2 || str(after.value) != "addr-c" || !after.handedOff {
		t.Fatalf("lease after hand_off = holder %s token %d value %s handed_off %v; want c, 2, addr-c, true",
			str(after.holder), after.token, str(after.value), after.handedOff)
	}
	if want := before.candidateExpiries["c"]; after.expires == nil || !after.expires.Equal(want) {
		t.Fatalf("lease expires at %v; want c's candidate expiry %v", after.expires, want)
	}
	if _, ok := after.candidateExpiries["c"]; ok {
		t.Fatalf("c is still a candidate after it was handed the lease")
	}

	// A hint naming b (anyone can send one) makes b look, not lead.
	if r := take(t, db.Pool, "k", "b"); r.acquired || str(r.holder) != "c" {
		t.Fatalf("take by b = %+v; want not acquired, held by c", r)
	}
	// The stale term can neither hand off nor release any more.
	if released, _, _ := handOff(t, db.Pool, "k", "a", 1, nil); released {
		t.Fatal("the old term handed off a lease it no longer holds")
	}
	// c confirms; a second confirmation finds nothing to confirm.
	confirmed := take(t, db.Pool, "k", "c")
	if !confirmed.acquired || confirmed.token != 2 || str(confirmed.value) != "addr-c" {
		t.Fatalf("take by c = %+v; want acquired with token 2 and value addr-c", confirmed)
	}
	if r := take(t, db.Pool, "k", "c"); r.acquired {
		t.Fatalf("a second take by c = %+v; want nothing to confirm", r)
	}
	if l := readLease(t, db.Pool, "k"); l.handedOff || !l.expires.Equal(*confirmed.expires) {
		t.Fatalf("after take: handed_off %v, expires %v; want false and TTL from take, %v", l.handedOff, l.expires, confirmed.expires)
	}
}

// TestHandOffWithoutCandidateReleases: no live candidate, the grace, or a
// counter with no room left: hand_off is release.
func TestHandOffWithoutCandidateReleases(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	campaign(t, db.Pool, "k", "a", "", 0, "10 seconds")
	if released, successor, tok := handOff(t, db.Pool, "k", "a", 1, nil); !released || successor != nil || tok != 1 {
		t.Fatalf("hand_off without candidates = %v, %s, %d; want released, no successor, token 1", released, str(successor), tok)
	}
	if l := readLease(t, db.Pool, "k"); l.holder != nil {
		t.Fatalf("lease held by %s after a release", str(l.holder))
	}

	t.Run("grace", func(t *testing.T) {
		campaign(t, db.Pool, "g", "a", "", 0, "10 seconds")
		campaign(t, db.Pool, "g", "b", "", 0, "10 seconds")
		forgetEpoch(t, db)
		released, successor, _ := handOff(t, db.Pool, "g", "a", 1, nil)
		endGrace(t, db)
		if !released || successor != nil {
			t.Fatalf("hand_off during the grace = %v, %s; want a release without successor", released, str(successor))
		}
	})
	t.Run("token limit", func(t *testing.T) {
		campaign(t, db.Pool, "m", "a", "", 0, "10 seconds")
		campaign(t, db.Pool, "m", "b", "", 0, "10 seconds")
		mustExec(t, db.Pool, `UPDATE pgleader.lease SET token = 9223372036854775807 WHERE key = 'm'`)
		released, successor, tok := handOff(t, db.Pool, "m", "a", 9223372036854775807, nil)
		if !released || successor != nil || tok != 9223372036854775807 {
			t.Fatalf("hand_off at the largest token = %v, %s, %d; want a release without successor", released, str(successor), tok)
		}
	})
}

// TestDeadSuccessorCostsItsCandidateExpiry: a successor that never confirms
// holds the lease only until its candidate expiry; then the lease is free.
func TestDeadSuccessorCostsItsCandidateExpiry(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	campaign(t, db.Pool, "k", "a", "", 0, "10 seconds")
	campaign(t, db.Pool, "k", "dead", "", 0, "300 milliseconds")
	candidateExpiry := readLease(t, db.Pool, "k").candidateExpiries["dead"]
	if _, s, _ := handOff(t, db.Pool, "k", "a", 1, nil); str(s) != "dead" {
		t.Fatalf("successor %s; want dead", str(s))
	}
	l := readLease(t, db.Pool, "k")
	if l.expires == nil || l.expires.After(candidateExpiry) {
		t.Fatalf("handed term expires at %v; want at most the candidate expiry %v", l.expires, candidateExpiry)
	}
	// Once the database clock passes it, another candidate wins.
	var past bool
	for deadline := time.Now().Add(waitTimeout); !past; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the candidate expiry never passed")
		}
		mustQuery(t, db.Pool, `SELECT clock_timestamp() > $1`, &past, candidateExpiry)
	}
	if r := campaign(t, db.Pool, "k", "c", "", 0, "10 seconds"); !r.acquired || r.token != 3 {
		t.Fatalf("campaign after the dead successor's expiry = %+v; want a win with token 3", r)
	}
	if r := take(t, db.Pool, "k", "dead"); r.acquired {
		t.Fatal("the dead successor confirmed a term after its expiry")
	}
}

func mustQuery(t *testing.T, db *pgxpool.Pool, sql string, dst any, args ...any) {
	t.Helper()
	if err := db.QueryRow(context.Background(), sql, args...).Scan(dst); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestTransfer: transfer names a live candidate, and the holder learns at
// its renewal; hand_off then prefers that candidate over a better one. A
// missing owner is a clear error that changes nothing.
func TestTransfer(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	campaign(t, db.Pool, "k", "a", "", 0, "10 seconds")
	campaign(t, db.Pool, "k", "b", "", 0, "10 seconds")
	campaign(t, db.Pool, "k", "c", "", 9, "10 seconds")

	_, err := db.Pool.Exec(ctx, `SELECT * FROM pgleader.transfer('k', 'nobody')`)
	wantCode(t, "transfer to a missing owner", err, "PF003", `"nobody" is not a live candidate of key "k"`)
	var resign bool
	mustQuery(t, db.Pool, `SELECT resign FROM pgleader.renew_term('k', 'a', 1, '10 seconds')`, &resign)
	if resign {
		t.Fatal("a refused transfer asked the holder to resign")
	}

	var transferring bool
	mustQuery(t, db.Pool, `SELECT transferring FROM pgleader.transfer('k', 'b')`, &transferring)
	if !transferring {
		t.Fatal("transfer to a live candidate did not ask the holder")
	}
	mustQuery(t, db.Pool, `SELECT resign FROM pgleader.renew_term('k', 'a', 1, '10 seconds')`, &resign)
	if !resign {
		t.Fatal("the holder's renewal did not report the transfer")
	}
	if _, s, tok := handOff(t, db.Pool, "k", "a", 1, nil); str(s) != "b" || tok != 2 {
		t.Fatalf("hand_off after transfer to b: successor %s token %d; want b, 2", str(s), tok)
	}
	mustQuery(t, db.Pool, `SELECT transferring FROM pgleader.transfer('k', 'b')`, &transferring)
	if transferring {
		t.Fatal("transfer to the holder itself asked it to resign")
	}
}

// TestPreferredLeader: a renewal with a minimum term asks the holder to
// step down for a live candidate of higher priority, once the term is old
// enough, and never for one of equal priority.
func TestPreferredLeader(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	campaign(t, db.Pool, "k", "a", "", 1, "10 seconds")
	campaign(t, db.Pool, "k", "b", "", 1, "10 seconds")
	var resign bool
	mustQuery(t, db.Pool, `SELECT resign FROM pgleader.renew_term('k', 'a', 1, '10 seconds', '0')`, &resign)
	if resign {
		t.Fatal("asked to resign for a candidate of equal priority")
	}
	campaign(t, db.Pool, "k", "p", "", 2, "10 seconds")
	mustQuery(t, db.Pool, `SELECT resign FROM pgleader.renew_term('k', 'a', 1, '10 seconds', '1 hour')`, &resign)
	if resign {
		t.Fatal("asked to resign before the minimum term")
	}
	mustQuery(t, db.Pool, `SELECT resign FROM pgleader.renew_term('k', 'a', 1, '10 seconds', '0')`, &resign)
	if !resign {
		t.Fatal("not asked to resign for a candidate of higher priority")
	}
	if _, s, _ := handOff(t, db.Pool, "k", "a", 1, nil); str(s) != "p" {
		t.Fatalf("handed to %s; want the preferred p", str(s))
	}
}

// TestCandidatesList lists the live candidates, best first.
func TestCandidatesList(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	campaign(t, db.Pool, "k", "a", "", 0, "10 seconds")
	campaign(t, db.Pool, "k", "b", "", 0, "10 seconds")
	campaign(t, db.Pool, "k", "c", "", 3, "10 seconds")
	rows, err := db.Pool.Query(context.Background(), `SELECT owner FROM pgleader.candidates('k')`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			t.Fatal(err)
		}
		got = append(got, o)
	}
	if len(got) != 2 || got[0] != "c" || got[1] != "b" {
		t.Fatalf("candidates = %v; want [c b]", got)
	}
	var withdrawn bool
	mustQuery(t, db.Pool, `SELECT pgleader.withdraw('k', 'c')`, &withdrawn)
	if !withdrawn {
		t.Fatal("withdraw found no row")
	}
	if _, s, _ := handOff(t, db.Pool, "k", "a", 1, nil); str(s) != "b" {
		t.Fatalf("handed to %s after c withdrew; want b", str(s))
	}
}

// TestHandOffHintAfterTake: hint_handoff, run after hand_off committed,
// names the lease's holder whenever the row has moved past the ended term
// to a live holder: still handed off, already taken by the successor (the
// successor's campaign can run between the two statements), or won by a
// campaign after a hand-off that found no successor. With no live holder
// above the ended term it says "release". Before version 24 a taken row
// was announced as released.
func TestHandOffHintAfterTake(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	l := listen(t, db)
	hint := func(key string, ended int64) string {
		t.Helper()
		mustExec(t, db.Pool, `SELECT pgleader.hint_handoff($1, $2)`, key, ended)
		return nextNotification(t, l)
	}

	// Handed off to b, not yet taken; then taken.
	campaign(t, db.Pool, "k", "a", "", 0, "12 seconds")
	campaign(t, db.Pool, "k", "b", "", 0, "12 seconds")
	if released, successor, token := handOff(t, db.Pool, "k", "a", 1, nil); !released || str(successor) != "b" || token != 2 {
		t.Fatalf("hand_off = %v, %s, %d; want true, b, 2", released, str(successor), token)
	}
	if got, want := hint("k", 1), "handoff 1 b k"; got != want {
		t.Errorf("hint before the take = %q; want %q", got, want)
	}
	if r := take(t, db.Pool, "k", "b"); !r.acquired || r.token != 2 {
		t.Fatalf("take = %+v; want b's term 2", r)
	}
	if got, want := hint("k", 1), "handoff 1 b k"; got != want {
		t.Errorf("hint after the successor took the lease = %q; want %q", got, want)
	}
	// The hint of the holder's own term, or of a term above the row's, is
	// no hand-off.
	if got, want := hint("k", 2), "release k"; got != want {
		t.Errorf("hint for the holder's own token = %q; want %q", got, want)
	}
	// b releases: no live holder above term 1.
	mustExec(t, db.Pool, `SELECT pgleader.release('k', 'b', 2)`)
	if got, want := hint("k", 1), "release k"; got != want {
		t.Errorf("hint after the successor released = %q; want %q", got, want)
	}

	// A hand-off with no candidate releases; a campaign wins the key
	// before the hint is built: the hint names the winner, whose term is
	// live, so no candidate campaigns against it.
	campaign(t, db.Pool, "j", "a", "", 0, "12 seconds")
	if released, successor, _ := handOff(t, db.Pool, "j", "a", 1, nil); !released || successor != nil {
		t.Fatalf("hand_off with no candidate = %v, %s; want released, no successor", released, str(successor))
	}
	if got, want := hint("j", 1), "release j"; got != want {
		t.Errorf("hint after a release = %q; want %q", got, want)
	}
	if r := campaign(t, db.Pool, "j", "cc", "", 0, "12 seconds"); !r.acquired || r.token != 2 {
		t.Fatalf("campaign after the release = %+v; want cc's term 2", r)
	}
	if got, want := hint("j", 1), "handoff 2 cc j"; got != want {
		t.Errorf("hint after a campaign won the released key = %q; want %q", got, want)
	}
	// A key with no row at all.
	if got, want := hint("none", 1), "release none"; got != want {
		t.Errorf("hint for a key with no row = %q; want %q", got, want)
	}
}
