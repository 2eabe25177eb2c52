package gocronpgleader_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/pgleader/pgleader/gocronpgleader"
	"github.com/pgleader/pgleader/pgleader"
)

// Each replica runs this; one of them runs each instant of "digest", with
// a fencing token for its writes.
func ExampleLocker() {
	pool, cleanup, err := newDatabase(context.Background()) // a pool on a database migrated to pgleader's schema
	if err != nil {
		log.Fatal(err)
	}
	defer cleanup()

	locker, err := gocronpgleader.NewLocker(pool, gocronpgleader.Options{Window: 30 * time.Second, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	publish := func(ctx context.Context, t *pgleader.Term, r pgleader.JobRun) error {
		defer close(done)
		fmt.Printf("%s runs with token %d\n", r.Job, t.Token()) // fence its writes with t.Token() (package sqlfence)
		return nil
	}
	_, err = s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(locker.Task("digest", publish)),
		gocron.WithName("digest"), gocron.WithStartAt(gocron.WithStartImmediately()))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	<-done
	if err := s.Shutdown(); err != nil {
		log.Fatal(err)
	}
	// Output: digest runs with token 1
}
