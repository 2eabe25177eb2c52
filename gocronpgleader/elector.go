package gocronpgleader

import (
	"context"
	"fmt"
	"sync"

	"github.com/pgleader/pgleader/pgleader"
)

// Elector is a gocron.Elector on a pgleader election: its Lead is the body
// of a pgleader.Elector that the application runs, and IsLeader reports
// whether that elector leads now. Only the leader's scheduler runs jobs;
// each of its runs belongs to the term that was leading when the run
// started. The zero value is ready to use, and it is safe for concurrent
// use.
//
//	ge := new(gocronpgleader.Elector)
//	el, err := pgleader.New(backend, pgleader.Spec{Key: "scheduler"}, pgleader.Options{Lead: ge.Lead})
//	go el.Run(ctx)
//	s, err := gocron.NewScheduler(gocron.WithDistributedElector(ge))
//
// Its guarantee is weaker than [Locker]'s: nothing records which instants
// ran, so an instant near a change of leader can run twice, or not at all,
// when the replicas' clocks disagree (see the package doc).
type Elector struct {
	mu  sync.Mutex
	cur *leading
}

// leading is one term as the Elector sees it.
type leading struct {
	term  *pgleader.Term
	ctx   context.Context
	tasks sync.WaitGroup // the Task functions of this term still running
	over  bool           // the term began to end: no Task starts in it
}

// Lead is the body to give pgleader.Options.Lead. It makes IsLeader
// succeed from the term's start until it begins to end (Term.Ending), and
// then returns once the [Elector.Task] functions the term started have
// returned, or when its context is cancelled.
func (e *Elector) Lead(ctx context.Context, t *pgleader.Term) error {
	cur := &leading{term: t, ctx: ctx}
	e.mu.Lock()
	e.cur = cur
	e.mu.Unlock()
	select {
	case <-t.Ending():
	case <-ctx.Done():
	}
	e.mu.Lock()
	cur.over = true
	if e.cur == cur {
		e.cur = nil
	}
	e.mu.Unlock()
	idle := make(chan struct{})
	go func() {
		cur.tasks.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-ctx.Done():
	}
	return nil
}

// IsLeader implements gocron.Elector: nil while a term of this replica is
// live, else an error matching pgleader.ErrNotLeader.
func (e *Elector) IsLeader(context.Context) error {
	if e.Term() == nil {
		return pgleader.ErrNotLeader
	}
	return nil
}

// Term returns this replica's live term, or nil if it does not lead.
func (e *Elector) Term() *pgleader.Term {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur == nil || !e.cur.term.Live() {
		return nil
	}
	return e.cur.term
}

// Task adapts fn into a gocron task function that runs it in this
// replica's live term: fn gets the term, for its fencing token, and a
// context cancelled when the term is cancelled (lease lost, renewals
// failing) or when gocron cancels the job's context. The term's body waits
// for fn before the lease is released. If the replica does not lead when
// the function starts (leadership moved after gocron asked IsLeader), it
// returns an error matching pgleader.ErrNotLeader without calling fn.
func (e *Elector) Task(fn func(ctx context.Context, t *pgleader.Term) error) func(context.Context) error {
	return func(jobCtx context.Context) error {
		e.mu.Lock()
		cur := e.cur
		if cur == nil || cur.over || !cur.term.Live() {
			e.mu.Unlock()
			return fmt.Errorf("gocronpgleader: task: %w", pgleader.ErrNotLeader)
		}
		cur.tasks.Add(1)
		e.mu.Unlock()
		defer cur.tasks.Done()
		ctx, cancel := context.WithCancel(cur.ctx)
		defer cancel()
		stop := context.AfterFunc(jobCtx, cancel)
		defer stop()
		return fn(ctx, cur.term)
	}
}
