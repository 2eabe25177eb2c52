package pgleader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgleader/pgleader/internal/lifecycle"
	"github.com/pgleader/pgleader/internal/wait"
)

// Elector campaigns for one key and runs the body while it leads. Create it
// with New; its methods are safe for concurrent use, and Run may be called
// once at a time.
type Elector struct {
	backend Backend
	ab      Abilities // the backend's
	handOff bool      // register as a candidate and hand off: ab.Candidates, and not Options.NoHandOff
	spec    Spec
	opts    Options
	log     *slog.Logger

	running sync.Mutex
	c       candidacy // Run's and RunOnce's goroutine only
	// rehearsalFailed is set once a hand-off rehearsal failed and said so
	// at Warn; later failures are logged at Debug.
	rehearsalFailed atomic.Bool

	mu     sync.Mutex
	status Status
	term   *Term

	// bs is the connection of a session-bound elector while Run runs
	// (Options.SessionBound), else nil. Run's goroutine sets it.
	bs *boundSession
}

// New validates spec and opts and returns an Elector over backend (for
// PostgreSQL, NewPostgres(pool)). It fails with an error matching ErrInvalid
// for a bad Spec, a missing Lead, or RequireFenceAdvance without FenceFloor,
// and with ErrAdvanceUnsupported when
// spec.RequireFenceAdvance is set and the backend cannot advance.
func New(backend Backend, spec Spec, opts Options) (*Elector, error) {
	if backend == nil {
		return nil, invalidf("New: nil backend")
	}
	ab := backend.Abilities()
	spec, log, err := replica(spec, opts.Lead, &opts.Owner, opts.Logger, ab, "Options")
	if err != nil {
		return nil, err
	}
	if err := CheckValue(opts.Value); err != nil {
		return nil, fmt.Errorf("Options.Value: %w", err)
	}
	if opts.Value != "" && !ab.Values {
		return nil, invalidf("Options.Value is set and %T cannot keep a value with its leases (its Abilities.Values is false)", backend)
	}
	if opts.MinTerm < 0 {
		return nil, invalidf("Options.MinTerm must not be negative, got %v", opts.MinTerm)
	}
	if opts.MinTerm == 0 {
		opts.MinTerm = spec.TTL
	}
	if spec.RequireFenceAdvance && opts.FenceFloor == nil {
		return nil, invalidf("Spec.RequireFenceAdvance is set but Options.FenceFloor is nil: " +
			"without a floor there is nothing to advance the token counter to, and after lost lease data " +
			"terms are refused until the tokens climb past the store's fence; set FenceFloor or clear RequireFenceAdvance")
	}
	if spec.RequireFenceAdvance && !ab.Advance {
		return nil, fmt.Errorf("%w: Spec.RequireFenceAdvance is set and %T cannot advance (its Abilities.Advance is false)", ErrAdvanceUnsupported, backend)
	}
	if opts.SessionBound && ab.session == nil {
		return nil, invalidf("Options.SessionBound is set and %T cannot bind a term to a session: "+
			"it needs the PostgreSQL backend over a *pgxpool.Pool, or with ListenWith", backend)
	}
	log = log.With("key", spec.Key, "owner", opts.Owner)
	if opts.FenceFloor != nil && !ab.Advance {
		log.Warn("FenceFloor is set but the backend cannot advance its counter; the floor is ignored")
	}
	return &Elector{backend: backend, ab: ab, handOff: ab.Candidates && !opts.NoHandOff, spec: spec, opts: opts, log: log,
		status: Status{Key: spec.Key, Owner: opts.Owner}}, nil
}

// replica is what New and NewSet check and choose alike: the Spec with its
// defaults, a body, the owner (hostname:pid:random if empty), the logger
// (the options', else the backend's, else slog's).
func replica(spec Spec, lead func(context.Context, *Term) error, owner *string, log *slog.Logger, ab Abilities, opts string) (Spec, *slog.Logger, error) {
	spec, err := spec.resolve()
	if err != nil {
		return spec, nil, err
	}
	if lead == nil {
		return spec, nil, invalidf("%s.Lead is required", opts)
	}
	if *owner == "" {
		host, _ := os.Hostname()
		*owner = fmt.Sprintf("%s:%d:%04x", host, os.Getpid(), rand.Uint32()&0xffff)
	}
	if err := CheckOwner(*owner); err != nil {
		return spec, nil, fmt.Errorf("%s.Owner: %w", opts, err)
	}
	return spec, cmp.Or(log, ab.Logger, slog.Default()), nil
}

// Spec returns the elector's Spec with its defaults filled in.
func (e *Elector) Spec() Spec { return e.spec }

// ErrRunning is returned by Run when the Elector is already running.
var ErrRunning = errors.New("pgleader: Run called while the elector is already running")

// Run campaigns for the key until ctx is cancelled, running the body for
// every term it wins. Backend errors are logged and retried with backoff
// (CampaignEvery, doubling up to TTL/2), except one that retrying cannot
// cure ([Permanent]: no schema, no grant, a TTL above the database's
// max_ttl) before the first campaign is answered: Run returns it, and
// Status then says StateStopped with that error as LastError. When ctx
// is cancelled, a live term ends as stopped: the body is told at once,
// cancelled YieldGrace later (at once with Options.CancelOnStop), and the
// lease is released within ReleaseTimeout after the body returns (a body
// that returns only once cancelled is released ReleaseTimeout after the
// cancellation, and one that returns an error ReleaseTimeout after it
// returned, since a statement it had sent may not have run yet). Run then
// returns nil, with no goroutine of its own left running (a [Postgres]
// backend closes its connections 100 ms later).
//
// While another replica leads, Run waits for the lease's expiry as read from
// the database, and never longer than TTL. With a backend that is a
// [Watcher] and is listening, it also wakes at once when it hears that the
// lease was released. Such events are hints: anyone who can connect can
// send one, so an event can only make a candidate look sooner, never wait
// longer or believe anything without a read, and after a hint that proved
// wrong the next one is heeded no sooner than CampaignEvery later. An idle
// candidate thus issues about one statement per lease period. Without a
// watcher, or while it is not listening, it polls every CampaignEvery (less
// up to 10% jitter).
func (e *Elector) Run(ctx context.Context) error {
	if !e.running.TryLock() {
		return ErrRunning
	}
	defer e.running.Unlock()
	if e.ab.Hold != nil {
		defer e.ab.Hold()()
	}

	// Watch while campaigning only: a leader has no use for lease events,
	// and its LISTEN connection, if no other elector of the backend needs
	// it, is closed while it leads.
	var events <-chan Event
	unwatch := func() {}
	watch := func() {
		if w := e.ab.Events; w != nil && e.handOff {
			budget := e.spec.TTL - e.spec.Margin - e.spec.ReleaseTimeout - e.spec.YieldGrace // the yield instant
			events, unwatch = w.WatchCandidate(e.spec.Key, CandidateWatch{Owner: e.opts.Owner, TTL: e.spec.TTL,
				Budget: budget, HeedEvery: e.spec.CampaignEvery, Keep: e.spec.handOffKeep()})
		} else if w != nil {
			events, unwatch = w.Watch(e.spec.Key)
		}
	}
	watch()
	defer func() { unwatch() }()

	defer e.bindSession()()

	c := &e.c
	*c = candidacy{lastToken: c.lastToken, floor: c.floor, floorRead: c.floorRead} // a Run starts afresh but for these
	defer func() {
		if c.registered {
			e.withdraw(ctx)
		}
	}()
	defer e.setState(StateStopped, time.Time{})
	for ctx.Err() == nil {
		if ev, ok := drain(events); ok && c.took == nil { // what happened before this campaign, it will see
			c.took = &ev
		}
		took := c.took
		if took != nil && took.Lease.Token <= c.lastToken {
			// A check that raced a campaign or an earlier check: the
			// term it found was led already.
			took = nil
		}
		c.took = nil
		var lease Lease
		var sent time.Time
		var won bool
		var err error
		announce := true
		bound := e.spec.TTL // what the term had left when sent
		if took != nil {
			// The hand-off's hint has told the watchers already.
			lease, sent, won, announce = took.Lease, took.Sent, true, false
			bound = min(bound, took.Lease.ExpiresAt.Sub(took.Lease.Now))
			c.registered = false
		} else {
			e.setState(StateCampaigning, time.Time{})
			candidate := e.handOff && e.ab.Events != nil && e.ab.Events.Listening()
			lease, sent, won, err = e.campaign(ctx, candidate, c.reuseFloor)
			c.registered = candidate && err == nil && !won
			c.holderBound = c.holderBound && err == nil && !won
		}
		c.reuseFloor = err == nil && !won && lease.Held() && lease.Holder != e.opts.Owner
		c.answered = c.answered || err == nil
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && !c.answered && Permanent(err):
			e.log.Error("campaign failed, and retrying cannot cure it: Run returns", "err", err)
			return err
		case err != nil:
			c.failures++
			retry := e.spec.backoff(c.failures)
			e.setState(StateBackingOff, time.Now().Add(retry))
			e.log.Warn("campaign failed", "err", err, "retry_in", retry)
			if !wait.Sleep(ctx, retry) {
				return nil
			}
		case won && lease.Token <= c.lastToken:
			// A term this elector led already, or one before it: most
			// often the term it led last, still in the row as handed to
			// it (a term believed on a read is confirmed only by its
			// first renewal), when the release or hand-off that ended it
			// did not take effect and the campaign confirmed it; or a
			// row restored by a failover that lost the later ones. Its
			// token was led, or superseded by one that was; end it in
			// the database too rather than lead a token twice or lead
			// one below the fence.
			c.failures = 0
			if lease.Token < c.lastToken {
				e.log.Warn("won a term below the last one this elector led (lease data lost or restored?); ending it",
					"token", lease.Token, "last_token", c.lastToken)
			}
			c.handedOff = e.release(ctx, e.log.With("token", lease.Token), lease.Token, true)
			if !c.handedOff && !wait.Sleep(ctx, e.spec.CampaignEvery) {
				return nil
			}
		case won:
			c.failures = 0
			c.lastToken = lease.Token
			// Watch while campaigning only: a leader has no use for
			// lease events, and its LISTEN connection, if no other
			// elector of the backend needs it, is closed once the term
			// has settled, when its shutdown no longer competes with the
			// term's first writes.
			unwatched := false
			c.handedOff = e.lead(ctx, lease.Token, sent, bound, announce, func() { unwatch(); unwatched = true }).handedOff
			if unwatched && ctx.Err() == nil {
				watch()
			}
			if ctx.Err() != nil {
				return nil
			}
			// Let other candidates, woken by the release, take a turn;
			// after a hand-off one has the lease already.
			if !c.handedOff && !wait.Sleep(ctx, e.spec.CampaignEvery) {
				return nil
			}
		case ctx.Err() != nil:
			return nil
		default:
			c.failures = 0
			c.heedAfter = time.Time{}
			if c.hinted && lease.Holder == c.waited.Holder && lease.Token == c.waited.Token {
				// The same term still holds the lease: the release event
				// was false. A forged flood costs at most one campaign
				// per CampaignEvery.
				c.heedAfter = sent.Add(e.spec.CampaignEvery)
			}
			c.waited = lease
			var freed <-chan struct{}
			stopWaiting := func() {}
			if e.bs != nil && c.holderBound {
				freed, stopWaiting = e.waitSession(ctx, lease)
			}
			var live bool
			c.hinted, c.took, live = e.waitForExpiry(ctx, lease, events, c.heedAfter, freed)
			stopWaiting()
			if !live {
				return nil
			}
		}
	}
	return nil
}

// bindSession gives a session-bound elector its connection for a Run (or
// RunOnce) and returns the function that closes it.
func (e *Elector) bindSession() func() {
	if !e.opts.SessionBound {
		return func() {}
	}
	bs := e.ab.session(e.spec.Key, e.spec.TTL, e.log)
	bs.owner = e.opts.Owner
	e.bs = bs
	return func() {
		bs.close()
		e.bs = nil
	}
}

// unbindSession makes the rest of a session-bound elector's Run TTL-bound,
// after its connection turned out to pass through a pooler in session mode
// (errSessionPooler). Run's goroutine calls it while no term runs.
func (e *Elector) unbindSession(err error) {
	e.log.Warn("Options.SessionBound cannot bind terms to a pooler's sessions; this Run's terms are bound to the TTL: "+
		"a crashed leader's successor waits for its expiry", "err", err)
	e.bs.close()
	e.bs = nil
}

func (e *Elector) setState(st State, until time.Time) {
	e.mu.Lock()
	e.status.State, e.status.WaitUntil = st, until
	e.mu.Unlock()
}

func (e *Elector) fail(err error) error {
	e.mu.Lock()
	e.status.LastError, e.status.LastErrorAt = err, time.Now()
	e.mu.Unlock()
	return err
}

type renewResult struct {
	sent   time.Time
	took   time.Duration
	err    error
	resign bool // the term was asked to resign
}

type bodyResult struct {
	err       error
	cancelled bool // the body's context was cancelled before it returned
}

// termEnd is how a term ended: why, what the body returned, and whether
// the lease was handed to a candidate.
type termEnd struct {
	reason    EndReason
	err       error
	handedOff bool
}

// lead runs one term from acquisition to release and returns how it
// ended. The term had bound left when the statement that proved it was
// sent: TTL, or less for a handed-off term believed on a read. With
// announce it announces the term (see [Watcher.Announce]); a term handed to this
// replica was announced by the hand-off's hint already; settled is called
// once the term has lasted RenewEvery. It drives the term's machine
// (internal/lifecycle), which makes every decision.
func (e *Elector) lead(ctx context.Context, token int64, sent time.Time, bound time.Duration, announce bool, settled func()) termEnd {
	t := newElectorTerm(e.spec.Key, e.opts.Owner, token, sent)
	defer close(t.over)
	log := e.log.With("token", token)
	tm := e.spec.timing()
	tm.CancelOnStop = e.opts.CancelOnStop
	m, act := lifecycle.Start(tm, sent, bound, time.Now())
	t.setTimeline(m.SafeEnd(), m.YieldAt())
	e.mu.Lock()
	e.term = t
	e.status.Token = token
	e.status.State, e.status.WaitUntil = StateLeading, time.Time{}
	e.mu.Unlock()

	bodyCtx, cancelBody := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBody()
	renewCtx, cancelRenew := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRenew()
	var bodyDone chan bodyResult
	var renewing chan renewResult // non-nil while a renewal is in flight
	if !act.Release {
		bodyDone = make(chan bodyResult, 1)
		go func() {
			err := runBody(bodyCtx, t, e.opts.Claim, e.opts.Lead, func(err error) { e.fail(err) }, func() {
				e.mu.Lock()
				e.status.Terms++
				e.mu.Unlock()
				log.Info("leading")
				e.observe(Observation{Kind: ObserveTermStarted, Token: token})
			}, false)
			bodyDone <- bodyResult{err: err, cancelled: bodyCtx.Err() != nil}
		}()
		aside := e.aside(ctx, t, announce, settled)
		defer func() { <-aside }()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stop, resign := ctx.Done(), t.resign
	var sessionEnded <-chan struct{} // a bound term's session ended
	if e.bs != nil {
		sessionEnded = e.bs.sessionEnded()
	}
	var bodyErr error
	var attrs []any // for the note of the last event
	for {
		t.apply(m, act, sent, cancelBody, log, e.observe, attrs...)
		if act.StopRenewing {
			cancelRenew()
		}
		if act.Release || act.Forget {
			break
		}
		if at := m.RenewAt(); !at.IsZero() && !at.After(time.Now()) {
			if deadline, ok := m.StartRenewal(time.Now()); ok {
				renewing = make(chan renewResult, 1)
				go e.renew(renewCtx, e.bs, token, deadline, renewing)
			}
		}
		wake(timer, m.Next(), m.RenewAt())
		attrs = nil
		select {
		case <-stop:
			stop = nil
			act = m.Yield(lifecycle.Stopped, time.Now())
		case <-resign:
			resign = nil
			act = m.Yield(lifecycle.Resigned, time.Now())
		case r := <-renewing:
			renewing = nil
			e.observe(Observation{Kind: ObserveRenewed, Token: token, Took: r.took, Err: r.err})
			if r.err != nil {
				e.fail(r.err)
				attrs = []any{"err", r.err}
			}
			act, sent = renewOutcome(m, r.sent, r.resign, r.err), r.sent
			if e.bs != nil && sessionEnded == nil {
				sessionEnded = e.bs.sessionEnded() // bound by this renewal
			}
		case <-sessionEnded:
			// The session the term was bound to ended (terminated, reset,
			// the server restarted): a candidate may lead already, and
			// no other session can renew the term.
			sessionEnded = nil
			act = m.Lost(time.Now(), false)
			attrs = []any{"why", "the session the term was bound to ended"}
		case <-timer.C:
			act = m.Tick(time.Now())
		case r := <-bodyDone:
			bodyErr = r.err
			refused := errors.Is(r.err, errRefused)
			if refused {
				e.observe(Observation{Kind: ObserveClaimRefused, Token: token, Err: errors.Unwrap(r.err)})
			} else if r.err != nil {
				e.fail(r.err)
			}
			act = m.BodyDone(refused, r.err != nil, r.cancelled, time.Now())
		}
	}
	end := termEnd{reason: t.Reason(), err: bodyErr}
	if act.Release {
		end.handedOff = e.release(ctx, log, token, act.HandOff)
	} else if e.bs != nil {
		// Let go of the session lock, which wakes a waiting candidate.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.spec.ReleaseTimeout)
		if err := e.bs.end(uctx, e.backend, func(Backend) error { return nil }); err != nil {
			log.Warn("letting go of the term's session lock failed; waiting candidates find the lease at its expiry", "err", err)
		}
		cancel()
	}
	e.mu.Lock()
	e.status.LastEnd = end.reason
	e.mu.Unlock()
	e.observe(Observation{Kind: ObserveTermEnded, Token: token, Reason: end.reason})
	e.log.Info("term ended", "token", token, "reason", end.reason.String(), "err", bodyErr)
	return end
}

// wake resets timer to the earliest of the non-zero instants, if any.
func wake(timer *time.Timer, instants ...time.Time) {
	var next time.Time
	for _, at := range instants {
		if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	timer.Stop()
	if !next.IsZero() {
		timer.Reset(time.Until(next))
	}
}

// aside runs beside a term what its first moments need, off the body's
// path: the announcement; the hand-off's rehearsal (see prepareHandOff),
// once the term's first writes had time to go first; and settled, once
// the term has lasted RenewEvery. A term that begins to end stops it.
func (e *Elector) aside(ctx context.Context, t *Term, announce bool, settled func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if announce && e.ab.Events != nil {
			e.announce(ctx, e.ab.Events, t.token)
		}
		for _, at := range []time.Duration{min(rehearseAfter, e.spec.RenewEvery/2), e.spec.RenewEvery} {
			timer := time.NewTimer(time.Until(t.started.Add(at)))
			select {
			case <-timer.C:
			case <-t.Ending():
				timer.Stop()
				return
			}
			if at == e.spec.RenewEvery {
				settled()
			} else {
				e.prepareHandOff(ctx)
			}
		}
	}()
	return done
}

// errRefused marks a body goroutine that stopped because Claim refused.
var errRefused = errors.New("pgleader: claim refused the token")

// runBody runs claim (if not nil) and then lead for term t, calling started
// between them; a Claim error is also passed to fail. A panic becomes an
// error naming the body that panicked (with ofKey, the body of t's key), so
// the term still ends and releases.
func runBody(ctx context.Context, t *Term, claim func(context.Context, *Term) (bool, error),
	lead func(context.Context, *Term) error, fail func(error), started func(), ofKey bool) (err error) {
	defer func() {
		if p := recover(); p != nil {
			what := "body"
			if ofKey {
				what = fmt.Sprintf("body of key %q", t.key)
			}
			err = fmt.Errorf("pgleader: %s panicked: %v\n%s", what, p, debug.Stack())
		}
	}()
	if claim != nil {
		ok, err := claim(ctx, t)
		if err != nil {
			fail(fmt.Errorf("pgleader: Claim: %w", err))
			return fmt.Errorf("%w: %w", errRefused, err)
		}
		if !ok {
			return errRefused
		}
	}
	started()
	return lead(ctx, t)
}

// renew sends one renewal, bounded by the term's safe end and by ctx,
// which lead cancels once the body has returned. A session-bound term (bs
// not nil) is renewed on its session; bs is passed in since the goroutine
// may outlive Run, which clears e.bs.
func (e *Elector) renew(ctx context.Context, bs *boundSession, token int64, safeEnd time.Time, out chan<- renewResult) {
	rctx, cancel := context.WithDeadline(ctx, safeEnd)
	defer cancel()
	sent := time.Now()
	minTerm := NoPreference
	if e.handOff {
		minTerm = e.opts.MinTerm
	}
	var resign bool
	var err error
	if bs != nil {
		_, resign, err = bs.renewTerm(rctx, e.opts.Owner, token, e.spec.TTL, minTerm)
	} else {
		_, resign, err = e.backend.RenewTerm(rctx, e.spec.Key, e.opts.Owner, token, e.spec.TTL, minTerm)
	}
	out <- renewResult{sent: sent, took: time.Since(sent), err: err, resign: resign}
}

// release frees the lease within ReleaseTimeout, even after ctx is
// cancelled, or with handOff hands it to the best live candidate if the
// backend can, and reports whether it did.
func (e *Elector) release(ctx context.Context, log *slog.Logger, token int64, handOff bool) (handedOff bool) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.spec.ReleaseTimeout)
	defer cancel()
	var released bool
	var successor string
	op := func(b Backend) (err error) {
		if e.handOff && handOff {
			released, successor, err = b.HandOff(rctx, e.spec.Key, e.opts.Owner, token, "")
		} else {
			released, err = b.Release(rctx, e.spec.Key, e.opts.Owner, token)
		}
		return err
	}
	var err error
	if e.bs != nil {
		// On the term's session, which then lets go of its lock.
		err = e.bs.end(rctx, e.backend, op)
	} else {
		err = op(e.backend)
	}
	if handedOff = err == nil && successor != ""; handedOff {
		// Not token + 1: after a move to a new token epoch the
		// successor draws above the epoch's base.
		log.Info("handed the lease off", "successor", successor)
	}
	switch {
	case err != nil:
		e.fail(err)
		log.Warn("release failed; the lease will expire", "err", err)
	case !released:
		log.Warn("release found the lease no longer ours: it had expired or passed to another term")
	}
	return handedOff
}

// withdraw removes this replica's candidate registration, best-effort,
// within ReleaseTimeout: a stopped replica must not be handed a term (if it
// were, the term would wait for its candidate expiry).
func (e *Elector) withdraw(ctx context.Context) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.spec.ReleaseTimeout)
	defer cancel()
	if e.ab.Steer == nil {
		return
	}
	if err := e.ab.Steer.Withdraw(wctx, e.spec.Key, e.opts.Owner); err != nil {
		e.log.Warn("withdrawing the candidate registration failed; it expires by itself", "err", err)
	}
}

// rehearseAfter is how long after its start a term rehearses its hand-off
// (see prepareHandOff), at most: half of RenewEvery if that is shorter.
const rehearseAfter = 100 * time.Millisecond

// prepareHandOff lets the backend load, off the hand-off's path, what the
// term's hand-off will need on its connection, with the Spec's TTL, which
// the real calls use. It is an optimisation: a failure costs the hand-off
// time, not correctness, and is logged at Warn the first time only.
func (e *Elector) prepareHandOff(ctx context.Context) {
	if e.ab.PrepareHandOff == nil || !e.handOff {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.spec.RenewEvery)
	defer cancel()
	if err := e.ab.PrepareHandOff(pctx, e.spec.TTL); err != nil {
		if e.rehearsalFailed.CompareAndSwap(false, true) {
			e.log.Warn("preparing the hand-off failed; hand-offs run without it, slower (said once per Elector)", "err", err)
		} else {
			e.log.Debug("preparing the hand-off failed", "err", err)
		}
	}
}
