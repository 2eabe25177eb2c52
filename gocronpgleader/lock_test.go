package gocronpgleader_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/gocronpgleader"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/sqlfence"
)

func TestNewLockerChecks(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	for _, opts := range []gocronpgleader.Options{
		{},
		{Window: -time.Second},
		{Window: time.Second, Spec: pgleader.Spec{Key: "x"}},
		{Window: time.Second, KeepRuns: -1},
		{Window: time.Second, Spec: pgleader.Spec{TTL: time.Second, RenewEvery: time.Second}},
		{Window: time.Second, AtLeastOnce: true},
		{Window: time.Second, AtLeastOnce: true, RetryWithin: -time.Second},
		{Window: time.Second, RetryWithin: time.Hour},
	} {
		if _, err := gocronpgleader.NewLocker(pool, opts); !errors.Is(err, pgleader.ErrInvalid) {
			t.Errorf("NewLocker(%+v): %v; want ErrInvalid", opts, err)
		}
	}
	if _, err := gocronpgleader.NewLocker(nil, gocronpgleader.Options{Window: time.Second}); !errors.Is(err, pgleader.ErrInvalid) {
		t.Errorf("NewLocker(nil): %v; want ErrInvalid", err)
	}
}

// TestLock: a second replica's Lock is skipped while the first holds the
// run and within Window after; the run's row records its end and the
// Task's error; a Lock past Window runs again with a higher token.
func TestLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testPool(t)
	a, err := gocronpgleader.NewLocker(pool, gocronpgleader.Options{Window: time.Hour, Owner: "a", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	b, err := gocronpgleader.NewLocker(pool, gocronpgleader.Options{Window: time.Hour, Owner: "b", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Task("report", nil)(ctx); !errors.Is(err, gocronpgleader.ErrNoRun) {
		t.Fatalf("Task without a run: %v; want ErrNoRun", err)
	}
	lock, err := a.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lock(ctx, "report"); !errors.Is(err, gocronpgleader.ErrSkipped) {
		t.Errorf("the same Locker's second Lock: %v; want ErrSkipped", err)
	}
	if _, err := b.Lock(ctx, "report"); !errors.Is(err, gocronpgleader.ErrSkipped) || !errors.Is(err, pgleader.ErrHeld) {
		t.Errorf("another Locker's Lock while held: %v; want ErrSkipped and ErrHeld", err)
	}
	var first pgleader.JobRun
	boom := errors.New("boom")
	err = a.Task("report", func(ctx context.Context, term *pgleader.Term, r pgleader.JobRun) error {
		if term.Token() != r.Token || r.Job != "report" || r.Attempt != 1 {
			t.Errorf("term %d, run %+v", term.Token(), r)
		}
		if tt, rr, ok := a.Term("report"); !ok || tt != term || rr != r {
			t.Errorf("Term: %v %+v %v; want the Task's", tt, rr, ok)
		}
		first = r
		return boom
	})(ctx)
	if err != boom {
		t.Fatalf("Task: %v; want its function's error", err)
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.Term("report"); ok {
		t.Error("Term after Unlock: ok")
	}
	_, err = b.Lock(ctx, "report")
	if !errors.Is(err, gocronpgleader.ErrSkipped) || errors.Is(err, pgleader.ErrHeld) {
		t.Errorf("another Locker's Lock within Window: %v; want ErrSkipped, not ErrHeld", err)
	}
	var state, msg string
	if err := pool.QueryRow(ctx, `SELECT state, error FROM pgleader.job_runs('report') WHERE token = $1`, first.Token).Scan(&state, &msg); err != nil {
		t.Fatal(err)
	}
	if state != "failed" || msg != "boom" {
		t.Errorf("run row: %s %q; want failed \"boom\"", state, msg)
	}

	// Past Window (a short one), the job runs again.
	c, err := gocronpgleader.NewLocker(pool, gocronpgleader.Options{Window: time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	lock, err = c.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	_, r, _ := c.Term("report")
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Token <= first.Token || !r.Instant.After(first.Instant) {
		t.Errorf("second run %+v after first %+v", r, first)
	}
}

// TestLockLeaseLost: when the run's lease is lost (its row deleted here),
// the Task's context is cancelled, Unlock reports the term's end, and the
// run's end is not recorded.
func TestLockLeaseLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testPool(t)
	l, err := gocronpgleader.NewLocker(pool, gocronpgleader.Options{Window: time.Second, Logger: quiet,
		Spec: pgleader.Spec{TTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	lock, err := l.Lock(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	var token int64
	err = l.Task("lost", func(ctx context.Context, term *pgleader.Term, r pgleader.JobRun) error {
		token = r.Token
		if _, err := pool.Exec(ctx, `DELETE FROM pgleader.lease WHERE key = 'lost'`); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Minute):
			return errors.New("the context was not cancelled a minute after the lease was lost")
		}
	})(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Task: %v; want context.Canceled", err)
	}
	if err := lock.Unlock(ctx); !errors.Is(err, pgleader.ErrTermEnded) {
		t.Errorf("Unlock: %v; want ErrTermEnded", err)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM pgleader.job_runs('lost') WHERE token = $1`, token).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "running" {
		t.Errorf("run row: %s; want running (its end not recorded)", state)
	}
}

// leaveRunning records a run of job that a term of owner claimed and then
// left without recording its end, as a replica killed in the run leaves
// it, and returns its instant and token.
func leaveRunning(t *testing.T, pool *pgxpool.Pool, job, owner string) (time.Time, int64) {
	t.Helper()
	ctx := context.Background()
	var instant time.Time
	var token int64
	lead := func(ctx context.Context, term *pgleader.Term) error {
		token = term.Token()
		var outcome string
		err := pool.QueryRow(ctx, `SELECT now, (SELECT outcome FROM pgleader.job_claim($1, now, $2, $3))
				FROM pgleader.job_schedule($1, 'gocron', NULL) AS now`, job, term.Owner(), token).Scan(&instant, &outcome)
		if err == nil && outcome != "run" {
			err = fmt.Errorf("job_claim: %s", outcome)
		}
		return err
	}
	el, err := pgleader.New(pgleader.NewPostgres(pool), pgleader.Spec{Key: job},
		pgleader.Options{Owner: owner, Logger: quiet, Lead: lead, NoHandOff: true})
	if err == nil {
		err = el.RunOnce(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	return instant, token
}

// runState reads the state, token and attempt of job's run at instant.
func runState(t *testing.T, pool *pgxpool.Pool, job string, instant time.Time) (string, int64, int) {
	t.Helper()
	var state string
	var token int64
	var attempt int
	err := pool.QueryRow(context.Background(), `SELECT state, token, attempt FROM pgleader.job_runs($1) WHERE instant = $2`,
		job, instant).Scan(&state, &token, &attempt)
	if err != nil {
		t.Fatal(err)
	}
	return state, token, attempt
}

// TestLockAtLeastOnce: a run left running by a dead term is run again by
// the next Lock's Task, before the run gocron fired it for, as attempt 2
// under the new term's token, and a write of the dead run's token after
// the retry's is refused. A run left longer than RetryWithin ago is not
// retried, nor one whose job's function is not wrapped by Task (said at
// Warn); a Locker without AtLeastOnce retries nothing.
func TestLockAtLeastOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testPool(t)
	var logs bytes.Buffer
	var logsMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&logsMu, &logs}, nil))
	newLocker := func(opts gocronpgleader.Options) *gocronpgleader.Locker {
		opts.Window, opts.Logger = time.Millisecond, logger
		l, err := gocronpgleader.NewLocker(pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	guard := sqlfence.Guard{Resource: "retried"}
	var runs []pgleader.JobRun
	task := func(l *gocronpgleader.Locker) func(context.Context) error {
		return l.Task("retried", func(ctx context.Context, term *pgleader.Term, r pgleader.JobRun) error {
			runs = append(runs, r)
			return guard.Write(ctx, pool, r.Token, func(pgx.Tx) error { return nil })
		})
	}
	lockRun := func(l *gocronpgleader.Locker, fn func(context.Context) error) {
		t.Helper()
		runs = nil
		lock, err := l.Lock(ctx, "retried")
		if err != nil {
			t.Fatal(err)
		}
		if fn != nil {
			if err := fn(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := lock.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Without AtLeastOnce, a run left running stays so.
	left, dead := leaveRunning(t, pool, "retried", "dead")
	if err := guard.Write(ctx, pool, dead, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	atMostOnce := newLocker(gocronpgleader.Options{})
	lockRun(atMostOnce, task(atMostOnce))
	if len(runs) != 1 || runs[0].Instant.Equal(left) {
		t.Errorf("at most once: runs %+v; want only the run fired", runs)
	}
	if state, _, _ := runState(t, pool, "retried", left); state != "running" {
		t.Errorf("at most once: the run left running is %s; want still running", state)
	}

	// With it, the next Lock's Task runs it first.
	l := newLocker(gocronpgleader.Options{AtLeastOnce: true, RetryWithin: time.Hour})
	lockRun(l, task(l))
	if len(runs) != 2 || !runs[0].Instant.Equal(left) || runs[0].Attempt != 2 || runs[0].Token <= dead ||
		runs[1].Instant.Before(left) || runs[1].Attempt != 1 || runs[1].Token != runs[0].Token {
		t.Fatalf("runs %+v; want the run left at %v retried (attempt 2, token above %d), then the run fired (attempt 1)", runs, left, dead)
	}
	for _, r := range runs {
		if state, token, attempt := runState(t, pool, "retried", r.Instant); state != "done" || token != r.Token || attempt != r.Attempt {
			t.Errorf("run at %v: %s, token %d, attempt %d; want done, %d, %d", r.Instant, state, token, attempt, r.Token, r.Attempt)
		}
	}
	err := guard.Write(ctx, pool, dead, func(pgx.Tx) error { return nil })
	var stale *sqlfence.StaleError
	if !errors.As(err, &stale) || stale.Stored != runs[0].Token {
		t.Errorf("the dead run's write after its retry: %v; want refused at the retry's token %d", err, runs[0].Token)
	}

	// A function not wrapped by Task cannot retry: the run stays, said at Warn.
	left, _ = leaveRunning(t, pool, "retried", "dead")
	lockRun(l, nil)
	if state, _, _ := runState(t, pool, "retried", left); state != "running" {
		t.Errorf("a plain function's Lock: the run left running is %s; want still running", state)
	}
	logsMu.Lock()
	said := strings.Contains(logs.String(), "runs left running were not retried")
	logsMu.Unlock()
	if !said {
		t.Errorf("a plain function's Lock left a run running without a warning; log:\n%s", logs.String())
	}

	// Past RetryWithin, a run left running is not retried.
	short := newLocker(gocronpgleader.Options{AtLeastOnce: true, RetryWithin: 50 * time.Millisecond})
	time.Sleep(100 * time.Millisecond)
	lockRun(short, task(short))
	if len(runs) != 1 || runs[0].Instant.Equal(left) {
		t.Errorf("past RetryWithin: runs %+v; want only the run fired", runs)
	}
}

// lockedWriter serialises a log's writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
