package jobtest_test

import (
	"context"
	"testing"
	"time"
)

// TestAtLeastOnceAfterRestart runs an at-least-once job on one replica, the
// commonest deployment: C dies in a run (SIGKILL), and its replacement C2
// starts when the database clock is two and a half periods past that run's
// instant, well within RetryWithin (20 s). The run C left is C2's to take
// over: "its replica died … another runner takes it over … until
// RetryWithin after the instant".
func TestAtLeastOnceAfterRestart(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	bin := build(t)
	const job = "restart"
	every := 2 * time.Second
	common := []string{"-database", db.URL, "-job", job, "-every", every.String(), "-ttl", "3s", "-work", "300ms",
		"-at-least-once", "-retry-within", "20s", "-fence", "restart-fence"}
	c := start(t, bin, "c", append(common, "-hang-first")...)
	h := waitFor(t, db.Pool, job, every, "C's first run", func(h history) bool { return firstEntry(h, "c", 0) != nil })
	hung := *firstEntry(h, "c", 0)
	c.kill(t)

	restartAt := hung.Instant.Add(2*every + every/2)
	for {
		var now time.Time
		if err := db.Pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		if !now.Before(restartAt) {
			break
		}
		time.Sleep(min(restartAt.Sub(now), 100*time.Millisecond))
	}
	c2 := start(t, bin, "c2", common...)
	waitFor(t, db.Pool, job, every, "3 runs of C2", func(h history) bool {
		n := 0
		for _, r := range h.runs {
			if r.Owner == "c2" {
				n++
			}
		}
		return n >= 3
	})
	c2.stop(t)

	h = readHistory(t, db.Pool, job, every)
	r, _ := h.runAt(hung.Instant)
	if r.State != "done" || r.Attempt != 2 || r.Owner != "c2" {
		t.Errorf("C's run (instant %d, token %d) is %s by %s, attempt %d, after C2 ran %d later instants; want done by C2, attempt 2 (RetryWithin 20s)\n%s",
			h.index(hung.Instant), hung.Token, r.State, r.Owner, r.Attempt, len(h.runs)-1, h)
	}
}

// TestAtLeastOnceKeepOneRun runs an at-least-once job on three replicas
// that keep one run in the database (KeepRuns 1): a run the database no
// longer keeps is still a run, and no instant may run twice.
func TestAtLeastOnceKeepOneRun(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	bin := build(t)
	const job = "keep-one"
	every := time.Second
	common := []string{"-database", db.URL, "-job", job, "-every", every.String(), "-ttl", "3s", "-work", "100ms",
		"-at-least-once", "-retry-within", "10s", "-keep-runs", "1"}
	var rs []*replica
	for _, owner := range []string{"a", "b", "c"} {
		rs = append(rs, start(t, bin, owner, common...))
	}
	waitFor(t, db.Pool, job, every, "15 instants with entries", func(h history) bool { return len(byInstant(h)) >= 15 })
	for _, r := range rs {
		r.stop(t)
	}

	h := readHistory(t, db.Pool, job, every)
	twice := 0
	for at, es := range byInstant(h) {
		if len(es) > 1 {
			twice++
			t.Errorf("instant %s ran %d times: %+v", at.Format("15:04:05"), len(es), es)
		}
	}
	t.Logf("%d instants with entries, %d entries, %d instants run twice", len(byInstant(h)), len(h.entries), twice)
}

// byInstant groups the entries by instant.
func byInstant(h history) map[time.Time][]entry {
	out := map[time.Time][]entry{}
	for _, e := range h.entries {
		k := e.Instant.UTC()
		out[k] = append(out[k], e)
	}
	return out
}
