package pgleader_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// A publisher body: one unit at a time, Live checked between units, and
// Ending watched while it waits for the next unit, so it returns promptly
// when its term ends. Here the replica is stopped after three units, as a
// deploy would stop it.
func Example_publisher() {
	ctx, stop := context.WithCancel(context.Background())
	outbox := make(chan string)

	publish := func(ctx context.Context, t *pgleader.Term) error {
		for t.Live() {
			select {
			case <-t.Ending():
			case msg := <-outbox:
				// A real body writes msg with t.Token() through a fenced
				// write (package sqlfence), so a stale term is refused.
				fmt.Printf("token %d: published %s\n", t.Token(), msg)
			}
		}
		fmt.Println("term ended:", t.Reason())
		return nil
	}

	el, err := pgleader.New(pgleadertest.NewBackend(), pgleader.Spec{Key: "digest-publisher"},
		pgleader.Options{Owner: "pod-a", Lead: publish, Logger: quiet})
	if err != nil {
		panic(err)
	}
	done := make(chan error)
	go func() { done <- el.Run(ctx) }()

	for _, msg := range []string{"digest #1", "digest #2", "digest #3"} {
		outbox <- msg
	}
	stop()
	fmt.Println("Run returned:", <-done)
	// Output:
	// token 1: published digest #1
	// token 1: published digest #2
	// token 1: published digest #3
	// term ended: stopped
	// Run returned: <nil>
}

// A nightly job that must not run twice: whichever replica gets the lease
// runs it; the others are told at once that it is taken.
func ExampleDo() {
	backend := pgleadertest.NewBackend() // pgleader.NewPostgres(pool) in production
	spec := pgleader.Spec{Key: "nightly-report"}
	ctx := context.Background()

	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- pgleader.Do(ctx, backend, spec, func(ctx context.Context, t *pgleader.Term) error {
			fmt.Println("replica 1 runs the report with token", t.Token())
			close(started)
			<-finish
			return nil
		})
	}()
	<-started
	err := pgleader.Do(ctx, backend, spec, func(context.Context, *pgleader.Term) error {
		fmt.Println("replica 2 runs it too (never printed)")
		return nil
	})
	fmt.Println("replica 2:", errors.Is(err, pgleader.ErrHeld))
	close(finish)
	fmt.Println("replica 1:", <-done)
	// Output:
	// replica 1 runs the report with token 1
	// replica 2: true
	// replica 1: <nil>
}

// An operator asks the leader to step aside (pgleader.resign in SQL, or
// pgleader resign KEY): the term ends gracefully at its next renewal, and
// the replica campaigns again.
func ExampleSteerer_resign() {
	backend := pgleadertest.NewBackend() // pgleader.NewPostgres(pool) in production
	ended := make(chan pgleader.EndReason, 1)
	el, err := pgleader.New(backend, pgleader.Spec{Key: "digest-publisher", TTL: 300 * time.Millisecond},
		pgleader.Options{Owner: "pod-a", Logger: quiet, Lead: func(_ context.Context, t *pgleader.Term) error {
			<-t.Ending()
			ended <- t.Reason()
			return nil
		}})
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- el.Run(ctx) }()
	for !el.Status().Leading {
		time.Sleep(time.Millisecond)
	}
	l, asked, err := backend.Resign(ctx, "digest-publisher", 0)
	fmt.Println("asked:", asked, l.Holder, l.Token, err)
	fmt.Println("term ended:", <-ended)
	stop()
	<-done
	// Output:
	// asked: true pod-a 1 <nil>
	// term ended: resigned
}
