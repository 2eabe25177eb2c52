package pgleader

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/pgleader/pgleader/internal/lifecycle"
)

// EndReason says why a term ended.
type EndReason int

// The end reasons. A term that has not begun to end has ReasonNone.
const (
	// ReasonNone: the term is live.
	ReasonNone EndReason = iota
	// ReasonStopped: Run's context was cancelled. The body sees Ending at
	// once, its context is cancelled YieldGrace later, and the lease is
	// released when it returns (ReleaseTimeout after the cancellation if
	// it returned only once cancelled; see the package doc).
	ReasonStopped
	// ReasonExpiring: renewals kept failing until the yield instant Y. The
	// body sees Ending at Y and is cancelled at C; release is best-effort.
	ReasonExpiring
	// ReasonLost: a renewal found the lease no longer this term's. The body
	// sees Ending and is cancelled at once; nothing is released.
	ReasonLost
	// ReasonFinished: the body returned. The lease is released (or handed
	// to a waiting candidate) and the replica campaigns again.
	ReasonFinished
	// ReasonRefused: the Claim hook refused the token (or failed). The body
	// never runs; the lease is released at once.
	ReasonRefused
	// ReasonResigned: the term was asked to end, by [Elector.StepDown] or
	// from outside (pgleader.resign in SQL, [Postgres.Resign], the CLI's
	// resign). It ends as on stop: Ending at once, the body cancelled
	// YieldGrace later, the lease released when it returns; then the
	// replica campaigns again.
	ReasonResigned
)

// String returns the reason's lower-case name, as used in logs.
func (r EndReason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonStopped:
		return "stopped"
	case ReasonExpiring:
		return "expiring"
	case ReasonLost:
		return "lost"
	case ReasonFinished:
		return "finished"
	case ReasonRefused:
		return "refused"
	case ReasonResigned:
		return "resigned"
	}
	return "unknown"
}

// Term is one holder's generation of a key's lease. It is handed to the
// Claim hook and the Lead body, and is safe for concurrent use.
type Term struct {
	key, owner string
	token      int64
	started    time.Time
	ending     chan struct{}
	// An Elector's term only (newElectorTerm); nil in a Set's terms, which
	// nothing resigns or waits on this way.
	resign chan struct{} // closed by StepDown; see Elector.lead
	over   chan struct{} // closed when the term is over and released

	mu       sync.Mutex
	reason   EndReason
	deadline time.Time // safe end S
	yieldAt  time.Time // Y
	renewed  time.Time // s: the last successful acquire or renew was sent
}

// newTerm returns a Set's term. Each channel costs about 100 bytes per
// held key, so it has only the one its body watches.
func newTerm(key, owner string, token int64, started time.Time) *Term {
	return &Term{key: key, owner: owner, token: token, started: started, renewed: started,
		ending: make(chan struct{})}
}

// newElectorTerm returns an Elector's term, which StepDown and Transfer
// can resign and wait on.
func newElectorTerm(key, owner string, token int64, started time.Time) *Term {
	t := newTerm(key, owner, token, started)
	t.resign, t.over = make(chan struct{}), make(chan struct{})
	return t
}

// Key returns the term's key.
func (t *Term) Key() string { return t.key }

// requestResign asks the term's elector to end it as resigned.
func (t *Term) requestResign() {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.resign:
	default:
		close(t.resign)
	}
}

// Owner returns the replica that holds the term.
func (t *Term) Owner() string { return t.owner }

// Token returns the term's fencing token, greater than every token issued
// for the key before. Write it with every fenced write.
func (t *Term) Token() int64 { return t.token }

// Started returns the local instant the winning acquire was sent.
func (t *Term) Started() time.Time { return t.started }

// Deadline returns the term's safe end S on the local clock: the lease is
// certainly held until then. Each renewal moves it later.
func (t *Term) Deadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deadline
}

// Live reports whether the term has not begun to end: Ending is open and the
// local clock is before the yield instant. Check it between units of work;
// it turns false even if the goroutine that renews was paused with the body.
func (t *Term) Live() bool {
	select {
	case <-t.ending:
		return false
	default:
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.yieldAt.IsZero() || time.Now().Before(t.yieldAt) // zero: internal/hook.NoYield
}

// Ending returns a channel that is closed when the term begins to end.
func (t *Term) Ending() <-chan struct{} { return t.ending }

// Wait waits d, or until the term begins to end if that is sooner, and
// then reports whether it is still live: the pause between units of work
// of a body that works periodically.
//
//	for t.Live() {
//		work()
//		t.Wait(time.Minute)
//	}
func (t *Term) Wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.ending:
	case <-timer.C:
	}
	return t.Live()
}

// Reason returns why the term ended, or ReasonNone while it is live.
func (t *Term) Reason() EndReason {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reason
}

func (t *Term) setTimeline(safeEnd, yieldAt time.Time) {
	t.mu.Lock()
	t.deadline, t.yieldAt = safeEnd, yieldAt
	t.mu.Unlock()
}

func (t *Term) renewedSent() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.renewed
}

// end starts the term's end with reason r, once, and reports whether this
// call did; later calls keep the first reason.
func (t *Term) end(r EndReason) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reason != ReasonNone {
		return false
	}
	t.reason = r
	close(t.ending)
	return true
}

// apply carries out for t what its machine decided: the timeline moved,
// Ending closed with the reason (and observed), the body's context
// cancelled, the note logged. The Elector and the Set both drive their
// terms through it.
func (t *Term) apply(m *lifecycle.Machine, act lifecycle.Actions, sent time.Time, cancel func(), log *slog.Logger, observe func(Observation), attrs ...any) {
	if act.Extended {
		t.mu.Lock()
		t.deadline, t.yieldAt, t.renewed = m.SafeEnd(), m.YieldAt(), sent
		t.mu.Unlock()
	}
	if act.End != lifecycle.None && t.end(EndReason(act.End)) {
		observe(Observation{Kind: ObserveTermEnding, Key: t.key, Token: t.token, Reason: EndReason(act.End)})
	}
	if act.Cancel {
		cancel()
	}
	if act.Note != lifecycle.NoNote && log != nil {
		level, msg := noteLine(act.Note)
		log.Log(context.Background(), level, msg, attrs...)
	}
}

// renewOutcome feeds m the answer to a renewal sent at sent: the lease
// renewed (and whether the database asked the term to resign), lost, the
// schema gone, or a failure that may pass.
func renewOutcome(m *lifecycle.Machine, sent time.Time, resign bool, err error) lifecycle.Actions {
	now := time.Now()
	switch {
	case err == nil:
		return m.Renewed(sent, resign, now)
	case errors.Is(err, ErrLost):
		return m.Lost(now, false)
	case errors.Is(err, ErrNotMigrated):
		return m.Lost(now, true)
	}
	return m.RenewFailed(now)
}

// noteLine is the level and message of a term machine's note.
func noteLine(n lifecycle.Note) (slog.Level, string) {
	switch n {
	case lifecycle.BornLate:
		return slog.LevelWarn, "the acquire was answered after the term's yield instant; releasing without running the body"
	case lifecycle.Stopping:
		return slog.LevelInfo, "stopping; the body has YieldGrace to return"
	case lifecycle.Resigning:
		return slog.LevelInfo, "resigning; the body has YieldGrace to return"
	case lifecycle.RenewFailed:
		return slog.LevelWarn, "renew failed; retrying until the yield instant"
	case lifecycle.LeaseLost:
		return slog.LevelWarn, "lease lost; cancelling the body"
	case lifecycle.SchemaGone:
		return slog.LevelError, "the pgleader schema is gone; ending the term at once"
	case lifecycle.ExpiredAfterFailures:
		return slog.LevelWarn, "renewals failed until the yield instant; the term is ending"
	case lifecycle.ExpiredUnanswered:
		return slog.LevelWarn, "the yield instant passed before a renewal was answered (was this process paused?); the term is ending"
	case lifecycle.ReleaseHeld:
		return slog.LevelInfo, "the body returned only after its context was cancelled; releasing ReleaseTimeout after that, so a statement it had sent commits while the lease is held"
	case lifecycle.ReleaseHeldAfterError:
		return slog.LevelInfo, "the body returned an error; releasing ReleaseTimeout after that, so a statement it had sent, whose outcome it may not know, commits while the lease is held"
	}
	return slog.LevelDebug, "term note"
}
