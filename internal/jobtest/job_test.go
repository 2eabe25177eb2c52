package jobtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/sqlfence"
)

// TestAtMostOnce runs a job every second on three replicas for at least 50
// instants: B's clock runs 2 s ahead; C is SIGKILLed in the middle of a run
// from instant 15 on and restarted (as C2) 5 instants later; A is stopped
// with SIGTERM in the middle of a run from instant 35 on and not restarted.
// No instant may run twice, and the only instants without a run are those
// the killed run's lease still covered; every run is recorded done but the
// killed one, which stays running: at most once loses it.
func TestAtMostOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	bin := build(t)
	const job = "at-most-once"
	every := time.Second
	common := []string{"-database", db.URL, "-job", job, "-every", every.String(), "-ttl", "3s", "-work", "300ms"}
	a := start(t, bin, "a", common...)
	b := start(t, bin, "b", append(common, "-clock-ahead", "2s")...)
	c := start(t, bin, "c", common...)

	// C dies right after the entry of its first run from instant 15, while
	// that run works; if it won none by instant 30, between runs.
	h := waitFor(t, db.Pool, job, every, "a run of C from instant 15", func(h history) bool {
		return h.instants() > 30 || firstEntry(h, "c", 15) != nil
	})
	c.kill(t)
	// Read at once: a lease the dead C left covers the instants until it
	// expires.
	var holder *string
	var expires *time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT holder, expires_at FROM pgleader.lease WHERE key = $1`,
		job).Scan(&holder, &expires); err != nil {
		t.Fatal(err)
	}
	var leftUntil time.Time
	if holder != nil && *holder == "c" {
		leftUntil = *expires
	}
	killedAt := h.instants()

	waitFor(t, db.Pool, job, every, "5 instants after C's death", func(h history) bool { return h.instants() >= killedAt+5 })
	c2 := start(t, bin, "c2", common...)

	waitFor(t, db.Pool, job, every, "a run of A from instant 35", func(h history) bool {
		return h.instants() > 45 || firstEntry(h, "a", 35) != nil
	})
	a.stop(t)

	waitFor(t, db.Pool, job, every, "55 instants", func(h history) bool { return h.instants() >= 55 })
	b.stop(t)
	c2.stop(t)

	h = readHistory(t, db.Pool, job, every)
	defer func() {
		if t.Failed() {
			t.Logf("history:\n%s", h)
		}
	}()
	if n := h.instants(); n < 50 {
		t.Errorf("%d instants from the first run to the last; want at least 50", n)
	}
	owners := map[string]int{}
	var lost []run
	for _, r := range h.runs {
		owners[r.Owner]++
		es := h.entriesAt(r.Instant)
		if len(es) != 1 {
			t.Errorf("instant %d has %d entries; want 1 (at most once)", h.index(r.Instant), len(es))
			continue
		}
		e := es[0]
		if r.Attempt != 1 || e.Attempt != 1 || e.Owner != r.Owner || e.Token != r.Token {
			t.Errorf("instant %d: run by %s token %d attempt %d, entry by %s token %d attempt %d; want one attempt, the same term",
				h.index(r.Instant), r.Owner, r.Token, r.Attempt, e.Owner, e.Token, e.Attempt)
		}
		switch {
		case r.State == "done" && e.Completed:
		case r.State == "running" && r.Owner == "c" && !e.Completed:
			lost = append(lost, r)
		default:
			t.Errorf("instant %d: run by %s is %s, its entry completed %v; want done and completed, unless C was killed in it",
				h.index(r.Instant), r.Owner, r.State, e.Completed)
		}
	}
	if len(h.entries) != len(h.runs) {
		t.Errorf("%d entries for %d runs; every entry belongs to a run", len(h.entries), len(h.runs))
	}
	// Instants passed over while the run of an earlier one still held
	// the job (a run late on a loaded machine) are the policy's, not lost.
	var lostAt time.Time
	if len(lost) == 1 {
		lostAt = lost[0].Instant
	}
	missing, busy := h.passedOver(h.missing(), lostAt)
	switch {
	case len(lost) > 1:
		t.Errorf("%d runs of C left running; C died once", len(lost))
	case len(lost) == 1 && leftUntil.IsZero():
		t.Errorf("C's run of instant %d is left running, but C held no lease when it died", h.index(lost[0].Instant))
	case len(lost) == 0 && len(missing) > 0:
		t.Errorf("instants %v have no run, and no run was lost", indexes(h, missing))
	case len(lost) == 1:
		// Until its lease expires (plus one period for a campaign that
		// the runner's estimate of the database clock sent a little
		// early), the others find the job held and skip the instant.
		for _, at := range missing {
			if !at.After(lost[0].Instant) || !at.Before(leftUntil.Add(every)) {
				t.Errorf("instant %d has no run; C died in instant %d, its lease lasted until %v",
					h.index(at), h.index(lost[0].Instant), leftUntil.Sub(lost[0].Instant))
			}
		}
	}
	if owners["b"] == 0 {
		t.Errorf("B, its clock 2 s ahead, ran no instant of %d", len(h.runs))
	}
	t.Logf("%d instants, %d runs (by owner %v), %d lost with C (left running), %d missed while its lease lasted, %d while an earlier run ran late",
		h.instants(), len(h.runs), owners, len(lost), len(missing), busy)
}

// TestAtLeastOnce runs a job every 2 s on three replicas with AtLeastOnce
// and Fence: C's first run hangs and C is SIGKILLed in it. The instant is
// then run once more, by another replica, as attempt 2 with a higher token,
// and a late write with the killed run's token is refused. Over at least 20
// instants every run is recorded done, and completed exactly once.
func TestAtLeastOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	bin := build(t)
	const job, fence = "at-least-once", "jobtest-fence"
	every := 2 * time.Second
	common := []string{"-database", db.URL, "-job", job, "-every", every.String(), "-ttl", "3s", "-work", "300ms",
		"-at-least-once", "-retry-within", "20s", "-fence", fence}
	a := start(t, bin, "a", common...)
	b := start(t, bin, "b", common...)
	c := start(t, bin, "c", append(common, "-hang-first")...)

	// C wins an instant about once in three (a loser at least once sleeps
	// until the winner's lease could lapse, and so also sits out the next
	// instant): the wait is long only in the rare case.
	h := waitWithin(t, 2*hang, db.Pool, job, every, "C's first run", func(h history) bool { return firstEntry(h, "c", 0) != nil })
	hung := *firstEntry(h, "c", 0)
	c.kill(t)

	h = waitFor(t, db.Pool, job, every, "the retry of C's run", func(h history) bool {
		r, ok := h.runAt(hung.Instant)
		return ok && r.State != "running"
	})
	retry, _ := h.runAt(hung.Instant)

	// The killed run's late write, the completion it never made: refused
	// since the retry's claim took the fence.
	ctx := context.Background()
	err := sqlfence.Guard{Resource: fence}.Write(ctx, db.Pool, hung.Token, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE jobtest_entry SET completed_at = clock_timestamp()
			WHERE job = $1 AND instant = $2 AND token = $3`, job, hung.Instant, hung.Token)
		return err
	})
	var stale *sqlfence.StaleError
	switch {
	case !errors.As(err, &stale) || !errors.Is(err, sqlfence.ErrFenced):
		t.Errorf("a write with the killed run's token %d after the retry: %v; want refused (ErrFenced)", hung.Token, err)
	case stale.Stored < retry.Token:
		t.Errorf("the write was refused with stored fence %d; want the retry's token %d or higher", stale.Stored, retry.Token)
	}

	waitFor(t, db.Pool, job, every, "20 instants, 5 after the retry", func(h history) bool {
		return h.instants() >= 20 && h.instants() > h.index(hung.Instant)+5
	})
	a.stop(t)
	b.stop(t)

	h = readHistory(t, db.Pool, job, every)
	defer func() {
		if t.Failed() {
			t.Logf("history:\n%s", h)
		}
	}()
	if n := h.instants(); n < 20 {
		t.Errorf("%d instants from the first run to the last; want at least 20", n)
	}
	retry, _ = h.runAt(hung.Instant)
	if retry.State != "done" || retry.Attempt != 2 || retry.Owner == "c" || retry.Token <= hung.Token {
		t.Errorf("C's instant %d: %s by %s, token %d, attempt %d; want done by another replica, attempt 2, token above %d",
			h.index(hung.Instant), retry.State, retry.Owner, retry.Token, retry.Attempt, hung.Token)
	}
	owners := map[string]int{}
	for _, r := range h.runs {
		owners[r.Owner]++
		var completed []entry
		for _, e := range h.entriesAt(r.Instant) {
			if e.Completed {
				completed = append(completed, e)
			}
		}
		want := 1
		if r.Instant.Equal(hung.Instant) {
			want = 2
		}
		if r.State != "done" || r.Attempt != want || len(completed) != 1 {
			t.Errorf("instant %d: %s by %s, attempt %d, %d entries completed; want done, attempt %d, completed exactly once",
				h.index(r.Instant), r.State, r.Owner, r.Attempt, len(completed), want)
			continue
		}
		if e := completed[0]; e.Token != r.Token || e.FenceBefore != r.Token {
			t.Errorf("instant %d: completed by token %d, which found the fence at %d; want the run's token %d, taken by its claim",
				h.index(r.Instant), e.Token, e.FenceBefore, r.Token)
		}
	}
	if es := h.entriesAt(hung.Instant); len(es) != 2 || es[0].Token != hung.Token || es[0].Completed {
		t.Errorf("C's instant %d has entries %+v; want C's, not completed (the late write did not land), then the retry's", h.index(hung.Instant), es)
	}
	// The instants that came while C's hung run held the job, and until
	// its lease expired, have no run: a runner does not start them late
	// (MissedSkip), and at least once retries runs, not instants. So do
	// those that came while the run of an earlier instant ran late.
	missing, busy := h.passedOver(h.missing(), hung.Instant)
	for _, at := range missing {
		if !at.After(hung.Instant) || !at.Before(retry.StartedAt) {
			t.Errorf("instant %d has no run; only those between C's hung instant %d and its retry may lack one",
				h.index(at), h.index(hung.Instant))
		}
	}
	t.Logf("%d instants, %d runs (by owner %v), 1 retried (instant %d, token %d → %d, %v after its instant), %d missed while C's run held the job, %d while an earlier run ran late",
		h.instants(), len(h.runs), owners, h.index(hung.Instant), hung.Token, retry.Token,
		retry.StartedAt.Sub(hung.Instant).Round(100*time.Millisecond), len(missing), busy)
}

// firstEntry returns owner's first entry from instant from on, or nil.
func firstEntry(h history, owner string, from int) *entry {
	for i, e := range h.entries {
		if e.Owner == owner && h.index(e.Instant) >= from {
			return &h.entries[i]
		}
	}
	return nil
}

func indexes(h history, ats []time.Time) []string {
	var out []string
	for _, at := range ats {
		out = append(out, fmt.Sprint(h.index(at)))
	}
	return out
}
