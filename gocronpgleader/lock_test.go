package gocronpgleader_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgleader/pgleader/gocronpgleader"
	"github.com/pgleader/pgleader/pgleader"
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
