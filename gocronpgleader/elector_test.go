package gocronpgleader_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/pgleader/pgleader/gocronpgleader"
	"github.com/pgleader/pgleader/pgleader"
)

// electorRun is one run of a job under an Elector.
type electorRun struct {
	replica int
	label   time.Time // the instant on the replica's own clock
	token   int64
}

// TestElectorLeaderChangeUnderSkew shows the Elector's weaker guarantee:
// replica 0 leads and runs an instant; the lease moves to replica 1, whose
// clock is 2 s behind, before replica 1's scheduler reaches that instant;
// replica 1 then runs the same instant again, with its own token. Only
// the leader's scheduler runs jobs throughout.
func TestElectorLeaderChangeUnderSkew(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	backend := pgleader.NewPostgres(pool, pgleader.WithLogger(quiet))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	var mu sync.Mutex
	var runs []electorRun
	ran := make(chan struct{}, 100)
	offs := []time.Duration{0, -2 * time.Second}
	ges := make([]*gocronpgleader.Elector, 2)
	els := make([]*pgleader.Elector, 2)
	for i, off := range offs {
		ge := new(gocronpgleader.Elector)
		el, err := pgleader.New(backend, pgleader.Spec{Key: "scheduler"}, pgleader.Options{Owner: []string{"zero", "one"}[i], Lead: ge.Lead, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ges[i], els[i] = ge, el
		wg.Go(func() { _ = el.Run(ctx) })
		if i == 0 {
			waitLeader(t, ge)
		}
		clock := newOffsetClock(off)
		s, err := gocron.NewScheduler(gocron.WithClock(clock), gocron.WithDistributedElector(ge))
		if err != nil {
			t.Fatal(err)
		}
		task := ge.Task(func(ctx context.Context, term *pgleader.Term) error {
			mu.Lock()
			runs = append(runs, electorRun{replica: i, label: clock.Now().Round(time.Second), token: term.Token()})
			mu.Unlock()
			ran <- struct{}{}
			return nil
		})
		if _, err := s.NewJob(gocron.CronJob("*/5 * * * * *", true), gocron.NewTask(task), gocron.WithName("report")); err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(func() { _ = s.Shutdown() })
	}

	<-ran // replica 0 ran an instant
	mu.Lock()
	first := runs[0]
	mu.Unlock()
	if first.replica != 0 {
		t.Fatalf("replica %d ran first; want the leader, 0", first.replica)
	}
	if err := els[0].Transfer(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, ges[1])
	if behind := time.Now().Add(offs[1]); !behind.Before(first.label.Add(-200 * time.Millisecond)) {
		t.Skipf("the lease reached replica 1 at %v on its clock, too late to show the double run of %v", behind, first.label)
	}
	for {
		select {
		case <-ran:
		case <-time.After(time.Minute):
			t.Fatal("replica 1 ran nothing in a minute")
		}
		mu.Lock()
		last := runs[len(runs)-1]
		mu.Unlock()
		if last.replica == 1 {
			if !last.label.Equal(first.label) || last.token <= first.token {
				t.Errorf("replica 1 ran %v with token %d; want the instant replica 0 ran, %v (token %d), again",
					last.label, last.token, first.label, first.token)
			}
			break
		}
		if last.replica != 0 {
			t.Fatalf("run by replica %d", last.replica)
		}
	}
	if err := ges[0].IsLeader(ctx); !errors.Is(err, pgleader.ErrNotLeader) {
		t.Errorf("replica 0's IsLeader after the transfer: %v; want ErrNotLeader", err)
	}
	if err := ges[0].Task(func(context.Context, *pgleader.Term) error { return nil })(ctx); !errors.Is(err, pgleader.ErrNotLeader) {
		t.Errorf("replica 0's Task after the transfer: %v; want ErrNotLeader", err)
	}
}

func waitLeader(t *testing.T, ge *gocronpgleader.Elector) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for ge.IsLeader(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("no term in a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
