package gocronpgleader_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/sqlfence"
)

// TestLockerProcessesAtLeastOnce is TestLockerProcesses with the Lockers'
// AtLeastOnce (RetryWithin 20 s): A and B start, B's clock 2 s ahead; C
// starts from second 10 with a first run that hangs, and is SIGKILLed in
// it. The next firing after C's lease lapsed retries C's run on A or B,
// as attempt 2 with a higher token, before its own run; a late write with
// C's token is then refused. C comes back (as C2) 5 seconds after the
// retry; A is stopped with SIGTERM in a run from 10 seconds after the
// retry on. Over at least 50 seconds every run is recorded done and
// completed exactly once, C's with two entries (its own, never completed,
// and the retry's); the seconds without a run are those C's hung run's
// lease covered.
func TestLockerProcessesAtLeastOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testPool(t)
	if _, err := pool.Exec(ctx, entryTable); err != nil {
		t.Fatal(err)
	}
	bin := buildReplica(t)
	const job = "at-least-once"
	const window = 500 * time.Millisecond
	common := []string{"-database", pool.Config().ConnString(), "-job", job, "-window", window.String(), "-work", "300ms",
		"-at-least-once", "-retry-within", "20s"}
	a := startReplica(t, bin, "a", common...)
	b := startReplica(t, bin, "b", append(common, "-clock-ahead", "2s")...)
	waitProc(t, pool, job, "10 seconds", func(h procHistory) bool { return h.seconds() >= 10 })
	c := startReplica(t, bin, "c", append(common, "-hang-first")...)

	// C's first run hangs after its entry; C wins a firing about once in
	// three.
	h := waitProc(t, pool, job, "C's run", func(h procHistory) bool { return h.lastEntry("c", 0) != nil })
	hung := *h.lastEntry("c", 0)
	c.kill(t)

	h = waitProc(t, pool, job, "the retry of C's run", func(h procHistory) bool {
		r, ok := h.runAt(hung.Instant)
		return ok && r.State != "running"
	})
	retry, _ := h.runAt(hung.Instant)

	// C's late write, the completion it never made: refused, since the
	// retry's writes took the fence with its higher token.
	err := sqlfence.Guard{Resource: "gocrontest/" + job}.Write(ctx, pool, hung.Token, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE gocrontest_entry SET completed_at = clock_timestamp()
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

	retried := h.seconds()
	waitProc(t, pool, job, "5 seconds after the retry", func(h procHistory) bool { return h.seconds() >= retried+5 })
	c2 := startReplica(t, bin, "c2", common...)
	h = waitProc(t, pool, job, "a run of A 10 seconds after the retry", func(h procHistory) bool {
		return h.seconds() > retried+25 || h.lastEntry("a", retried+10) != nil
	})
	a.stop(t)
	aMidRun := h.lastEntry("a", retried+10) != nil && !h.lastEntry("a", retried+10).Completed
	waitProc(t, pool, job, "55 seconds", func(h procHistory) bool { return h.seconds() >= 55 && h.seconds() >= retried+20 })
	b.stop(t)
	c2.stop(t)

	h = readProcHistory(t, pool, job)
	defer func() {
		if t.Failed() {
			t.Logf("runs:\n%s", h.runsString())
		}
	}()
	if n := h.seconds(); n < 50 {
		t.Errorf("%d seconds from the first run to the last; want at least 50", n)
	}

	// Every write found the previous write's token in the fence: the
	// entries by token (a retry and the run its term claimed next share
	// one), each entry's fence_before is the token of the one before.
	entries := append([]procEntry(nil), h.entries...)
	sort.SliceStable(entries, func(i, j int) bool {
		if entries[i].Token != entries[j].Token {
			return entries[i].Token < entries[j].Token
		}
		return entries[i].Started.Before(entries[j].Started)
	})
	var before int64
	for _, e := range entries {
		if e.FenceBefore != before {
			t.Errorf("%s's entry with token %d at %v found the fence at %d; want the previous entry's token %d",
				e.Owner, e.Token, e.Instant, e.FenceBefore, before)
		}
		before = e.Token
	}

	// Every run done, and completed exactly once; C's retried.
	owners := map[string]int{}
	perSecond := map[int64]int{}
	bySecond := map[int64][]procEntry{} // each run's first entry, by the second it started in
	var prev jobRun
	for i, r := range h.runs {
		owners[r.Owner]++
		if i > 0 && r.Instant.Sub(prev.Instant) < window {
			t.Errorf("runs at %v and %v started less than Window (%v) apart", prev.Instant, r.Instant, window)
		}
		prev = r
		es := h.entriesAt(r.Instant)
		if len(es) == 0 {
			t.Errorf("run by %s at %v: no entry", r.Owner, r.Instant)
			continue
		}
		perSecond[es[0].second()]++
		bySecond[es[0].second()] = append(bySecond[es[0].second()], es[0])
		var completed []procEntry
		for _, e := range es {
			if e.Completed {
				completed = append(completed, e)
			}
		}
		want := 1
		if r.Instant.Equal(hung.Instant) {
			want = 2
		}
		if r.State != "done" || r.Attempt != want || len(completed) != 1 || completed[0].Token != r.Token {
			t.Errorf("run at %v: %s by %s, token %d, attempt %d, completed by %+v; want done, attempt %d, completed once by its token",
				r.Instant, r.State, r.Owner, r.Token, r.Attempt, completed, want)
		}
	}
	if es := h.entriesAt(hung.Instant); len(es) != 2 || es[0].Token != hung.Token || es[0].Completed || es[1].Token != retry.Token {
		t.Errorf("C's run has entries %+v; want C's, never completed, then the retry's", es)
	}
	if retry.Owner == "c" || retry.Token <= hung.Token {
		t.Errorf("C's run retried by %s with token %d; want another replica, a token above %d", retry.Owner, retry.Token, hung.Token)
	}

	// The seconds without a run follow C's hung run and precede its
	// retry (the first firing after C's lease lapsed), plus a second for
	// the firing's delay; none has two.
	var missing, busy int
	for s := h.first(); s < h.first()+int64(h.seconds()); s++ {
		switch n := perSecond[s]; {
		case n == 0 && h.busyAt(s, hung.Instant):
			busy++
		case n == 0:
			missing++
			if s <= hung.second() || !time.Unix(s, 0).Before(retry.Started.Add(time.Second)) {
				t.Errorf("second %d has no run; only those between C's hung run (second %d) and its retry (%v) may lack one",
					h.index(s), h.index(hung.second()), retry.Started)
			}
		case n > 1 && lateDouble(bySecond[s], window):
			t.Logf("second %d has %d runs, the later started Window or more into it: a firing delayed past Window", h.index(s), n)
		case n > 1:
			t.Errorf("second %d has %d runs", h.index(s), n)
		}
	}
	if owners["b"] == 0 {
		t.Errorf("B, its clock 2 s ahead, ran no run of %d", len(h.runs))
	}
	t.Logf("%d seconds, %d runs (by owner %v), C's run retried by %s (token %d → %d, %v after it started), %d seconds missed while its lease lasted, "+
		"%d while an earlier run ran late; A stopped mid-run %v",
		h.seconds(), len(h.runs), owners, retry.Owner, hung.Token, retry.Token, retry.Started.Sub(hung.Instant).Round(100*time.Millisecond),
		missing, busy, aMidRun)
}
