package pgleader_test

import (
	"context"
	"fmt"

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
