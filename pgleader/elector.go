package pgleader

import (
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

	"github.com/pgleader/pgleader/internal/hook"
	"github.com/pgleader/pgleader/internal/wait"
)

// Options are the parts of an Elector that are not timing.
type Options struct {
	// Owner identifies this replica (pod name, host:pid); unique among the
	// running replicas. Default: hostname:pid:random.
	Owner string
	// Lead is the body, run for each term this replica wins, after Claim.
	// Its context is cancelled at the term's cancel instant (see Spec). It
	// should check t.Live() between units of work and return when the term
	// ends; when it returns the term ends as finished. Required.
	Lead func(ctx context.Context, t *Term) error
	// Claim, if set, runs after acquisition and before Lead. It returns
	// false if the fenced store already saw this token or a higher one; the
	// term then ends as refused. An error ends it as refused too.
	Claim func(ctx context.Context, t *Term) (bool, error)
	// FenceFloor, if set, returns the store's highest fence. Before a
	// campaign the key's token counter is advanced to it while the lease is
	// free, so after the lease data was lost the first term draws floor+1.
	// It is read before every campaign except one at the expiry of a term
	// the last campaign found holding the lease: that campaign reuses the
	// floor read last (see docs/model.md, "Hand-off").
	FenceFloor func(ctx context.Context) (int64, error)
	// Logger receives the elector's logs, each with key and owner, and
	// token where a term is concerned. Default: the backend's logger if it
	// has one (NewPostgres's WithLogger), else slog.Default().
	Logger *slog.Logger
	// Value, if set, is published with each term's lease (at most
	// MaxValueLen bytes), e.g. this replica's address so followers can
	// forward requests to the leader: [Observe], [Postgres.Lease], SQL's
	// pgleader.lease(key) and the CLI's status read it. It needs a backend
	// that is a [Steerer]; New refuses it otherwise.
	Value string
	// Observer, if set, receives the elector's observations for metrics:
	// terms started and ended, renewals and their latency, refused claims.
	Observer Observer

	// Priority ranks this replica as a candidate when its backend is a
	// [Handoffer]: a leader hands off to the live candidate of highest
	// priority, and a leader whose term has lasted MinTerm steps down (at
	// its next renewal) when a candidate of higher priority than its own
	// waits. Default 0; with equal priorities nobody is pre-empted.
	Priority int32
	// MinTerm is how long a term lasts at least before a candidate of
	// higher priority makes it step down, so that leadership does not
	// flap. Default: the Spec's TTL.
	MinTerm time.Duration
	// NoHandOff turns hand-off off: the elector neither registers as a
	// candidate nor hands the lease to one when its term ends, and
	// releases instead. Hand-off is on by default with a [Handoffer]
	// backend; it needs a listening [Watcher] for the candidate's side.
	NoHandOff bool
}

// State is what an Elector is doing.
type State int

// The states of an Elector.
const (
	// StateStopped: Run is not running.
	StateStopped State = iota
	// StateCampaigning: an acquire is being sent or awaited.
	StateCampaigning
	// StateWaiting: another term holds the lease; the elector looks again
	// at Status.WaitUntil, or sooner when it hears of a release.
	StateWaiting
	// StateBackingOff: the last campaign failed (see Status.LastError); the
	// next is at Status.WaitUntil.
	StateBackingOff
	// StateLeading: a term was won; Status.Leading says whether it is
	// still live or already ending.
	StateLeading
)

// String returns the state's lower-case name.
func (s State) String() string {
	switch s {
	case StateStopped:
		return "stopped"
	case StateCampaigning:
		return "campaigning"
	case StateWaiting:
		return "waiting"
	case StateBackingOff:
		return "backing-off"
	case StateLeading:
		return "leading"
	}
	return "unknown"
}

// Status is a snapshot of an Elector for health endpoints and logs.
type Status struct {
	Key, Owner string
	// State is what the elector is doing; WaitUntil is when it next
	// campaigns while StateWaiting or StateBackingOff (zero otherwise).
	State     State
	WaitUntil time.Time
	// Listening reports whether the backend is delivering lease events now
	// (false for a backend that is not a Watcher): a replica that waits and
	// listens takes over within milliseconds of a release.
	Listening bool
	// Leading is true while a term is live (won and not yet ending).
	Leading bool
	// Token is the current term's token, or the last term's.
	Token int64
	// Deadline is the live term's safe end on the local clock; zero when
	// not leading.
	Deadline time.Time
	// LastRenewSent is when the live term's last successful acquire or
	// renew was sent, on the local clock; zero when not leading.
	LastRenewSent time.Time
	// Terms counts the terms this elector has won.
	Terms int
	// LastEnd is why the last term ended.
	LastEnd EndReason
	// LastError is the last error from the backend or a hook, and when.
	LastError   error
	LastErrorAt time.Time
}

// Elector campaigns for one key and runs the body while it leads. Create it
// with New; its methods are safe for concurrent use, and Run may be called
// once at a time.
type Elector struct {
	backend   Backend
	advancer  Advancer  // nil if the backend cannot advance
	watcher   Watcher   // nil if the backend cannot push events
	handoffer Handoffer // nil if the backend cannot hand off, or NoHandOff
	spec      Spec
	opts      Options
	log       *slog.Logger

	running   sync.Mutex
	handedOff bool // the last term handed the lease off; Run's goroutine only
	// lastToken is the token of the last term led: this elector never
	// leads a token at or below it. Run's goroutine only.
	lastToken int64
	// rehearsalFailed is set once a hand-off rehearsal failed and said so
	// at Warn; later failures are logged at Debug.
	rehearsalFailed atomic.Bool
	// floor is the last fence floor read, and floorRead whether there is
	// one; see campaign. Run's goroutine only.
	floor     int64
	floorRead bool

	mu     sync.Mutex
	status Status
	term   *Term
}

// New validates spec and opts and returns an Elector over backend (for
// PostgreSQL, NewPostgres(pool)). It fails with an error matching ErrInvalid
// for a bad Spec, a missing Lead, or RequireFenceAdvance without FenceFloor,
// and with ErrAdvanceUnsupported when
// spec.RequireFenceAdvance is set and backend does not implement Advancer.
func New(backend Backend, spec Spec, opts Options) (*Elector, error) {
	if backend == nil {
		return nil, invalidf("New: nil backend")
	}
	spec, err := spec.resolve()
	if err != nil {
		return nil, err
	}
	if opts.Lead == nil {
		return nil, invalidf("Options.Lead is required")
	}
	if opts.Owner == "" {
		opts.Owner = defaultOwner()
	}
	if err := CheckOwner(opts.Owner); err != nil {
		return nil, fmt.Errorf("Options.Owner: %w", err)
	}
	if err := CheckValue(opts.Value); err != nil {
		return nil, fmt.Errorf("Options.Value: %w", err)
	}
	if _, ok := backend.(Steerer); opts.Value != "" && !ok {
		return nil, invalidf("Options.Value is set and %T cannot keep a value with its leases (it is not a Steerer)", backend)
	}
	advancer, _ := backend.(Advancer)
	watcher, _ := backend.(Watcher)
	handoffer, _ := backend.(Handoffer)
	if opts.NoHandOff {
		handoffer = nil
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
	if spec.RequireFenceAdvance && advancer == nil {
		return nil, fmt.Errorf("%w: Spec.RequireFenceAdvance is set and %T does not implement Advancer", ErrAdvanceUnsupported, backend)
	}
	log := opts.Logger
	if lb, ok := backend.(interface{ logger() *slog.Logger }); ok && log == nil {
		log = lb.logger()
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("key", spec.Key, "owner", opts.Owner)
	if opts.FenceFloor != nil && advancer == nil {
		log.Warn("FenceFloor is set but the backend cannot advance its counter; the floor is ignored")
	}
	return &Elector{
		backend:   backend,
		advancer:  advancer,
		watcher:   watcher,
		handoffer: handoffer,
		spec:      spec,
		opts:      opts,
		log:       log,
		status:    Status{Key: spec.Key, Owner: opts.Owner},
	}, nil
}

func defaultOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%04x", host, os.Getpid(), rand.Uint32()&0xffff)
}

// Spec returns the elector's Spec with its defaults filled in.
func (e *Elector) Spec() Spec { return e.spec }

// Status returns a snapshot of the elector's state.
func (e *Elector) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.status
	if e.watcher != nil {
		s.Listening = e.watcher.Listening()
	}
	if e.term != nil {
		s.Leading = e.term.Live()
		if s.Leading {
			s.Deadline, s.LastRenewSent = e.term.Deadline(), e.term.renewedSent()
		}
	}
	return s
}

// ErrRunning is returned by Run when the Elector is already running.
var ErrRunning = errors.New("pgleader: Run called while the elector is already running")

// Run campaigns for the key until ctx is cancelled, running the body for
// every term it wins. Backend errors never end Run: it logs them and retries
// with backoff (CampaignEvery, doubling up to TTL/2). When ctx is
// cancelled, a live term ends as stopped: the body is told at once,
// cancelled YieldGrace later, and the lease is released within
// ReleaseTimeout after the body returns (a body that returns only once
// cancelled is released ReleaseTimeout after the cancellation, and one
// that returns an error ReleaseTimeout after it returned, since a
// statement it had sent may not have run yet). Run then returns nil, with
// no goroutine of its own left running (a [Postgres] backend closes its
// connections 100 ms later).
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
	if h, ok := e.backend.(interface{ holdConnections() func() }); ok {
		defer h.holdConnections()()
	}

	// Watch while campaigning only: a leader has no use for lease events,
	// and its LISTEN connection, if no other elector of the backend needs
	// it, is closed while it leads.
	var events <-chan Event
	unwatch := func() {}
	watch := func() {
		if cw, ok := e.watcher.(CandidateWatcher); ok && e.handoffer != nil {
			budget := e.spec.TTL - e.spec.Margin - e.spec.ReleaseTimeout - e.spec.YieldGrace // the yield instant
			events, unwatch = cw.WatchCandidate(e.spec.Key, CandidateWatch{Owner: e.opts.Owner, TTL: e.spec.TTL,
				Budget: budget, HeedEvery: e.spec.CampaignEvery, Keep: e.spec.handOffKeep()})
		} else if e.watcher != nil {
			events, unwatch = e.watcher.Watch(e.spec.Key)
		}
	}
	watch()
	defer func() { unwatch() }()

	registered := false // the last campaign registered this replica as a candidate
	defer func() {
		if registered {
			e.withdraw(ctx)
		}
	}()

	defer e.setState(StateStopped, time.Time{})
	failures := 0
	hinted := false         // the last wait ended on a release event
	var waited Lease        // the lease the last wait was for
	var heedAfter time.Time // release events before this are not heeded at once
	var took *Event         // a term handed to this replica, confirmed by the watcher
	reuseFloor := false     // the last campaign found another live term holding the lease
	for ctx.Err() == nil {
		if ev, ok := drain(events); ok && took == nil { // what happened before this campaign, it will see
			took = &ev
		}
		var lease Lease
		var sent time.Time
		var won bool
		var err error
		announce := true
		bound := e.spec.TTL // what the term had left when sent
		if took != nil && took.Lease.Token <= e.lastToken {
			// A check that raced a campaign or an earlier check: the
			// term it found was led already.
			took = nil
		}
		if took != nil {
			// The hand-off's hint has told the watchers already.
			lease, sent, won, announce = took.Lease, took.Sent, true, false
			bound = min(bound, took.Lease.ExpiresAt.Sub(took.Lease.Now))
			took = nil
			registered = false
		} else {
			e.setState(StateCampaigning, time.Time{})
			candidate := e.handoffer != nil && e.watcher != nil && e.watcher.Listening()
			lease, sent, won, err = e.campaign(ctx, candidate, reuseFloor)
			registered = candidate && err == nil && !won
		}
		reuseFloor = err == nil && !won && lease.Held() && lease.Holder != e.opts.Owner
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			failures++
			retry := e.spec.backoff(failures)
			e.setState(StateBackingOff, time.Now().Add(retry))
			e.log.Warn("campaign failed", "err", err, "retry_in", retry)
			if !wait.Sleep(ctx, retry) {
				return nil
			}
		case won && lease.Token <= e.lastToken:
			// A term this elector led already, or one before it: most
			// often the term it led last, still in the row as handed to
			// it (a term believed on a read is confirmed only by its
			// first renewal), when the release or hand-off that ended it
			// did not take effect and the campaign confirmed it; or a
			// row restored by a failover that lost the later ones. Its
			// token was led, or superseded by one that was; end it in
			// the database too rather than lead a token twice or lead
			// one below the fence.
			failures = 0
			if lease.Token < e.lastToken {
				e.log.Warn("won a term below the last one this elector led (lease data lost or restored?); ending it",
					"token", lease.Token, "last_token", e.lastToken)
			}
			e.release(ctx, e.log.With("token", lease.Token), lease.Token, ReasonFinished)
			if !e.handedOff && !wait.Sleep(ctx, e.spec.CampaignEvery) {
				return nil
			}
		case won:
			failures = 0
			e.lastToken = lease.Token
			if e.leadUnwatched(ctx, lease.Token, sent, bound, announce, unwatch) {
				unwatch = func() {}
				if ctx.Err() == nil {
					watch()
				}
			}
			if ctx.Err() != nil {
				return nil
			}
			// Let other candidates, woken by the release, take a turn;
			// after a hand-off one has the lease already.
			if !e.handedOff && !wait.Sleep(ctx, e.spec.CampaignEvery) {
				return nil
			}
		case ctx.Err() != nil:
			return nil
		default:
			failures = 0
			heedAfter = time.Time{}
			if hinted && lease.Holder == waited.Holder && lease.Token == waited.Token {
				// The same term still holds the lease: the release event
				// was false. A forged flood costs at most one campaign
				// per CampaignEvery.
				heedAfter = sent.Add(e.spec.CampaignEvery)
			}
			waited = lease
			var live bool
			if hinted, took, live = e.waitForExpiry(ctx, lease, events, heedAfter); !live {
				return nil
			}
		}
	}
	return nil
}

// leadUnwatched runs the term, and stops watching once the term has lasted
// RenewEvery: by then it is settled, and the LISTEN connection's shutdown
// no longer competes with its first writes for the CPU. A short term keeps
// watching. It reports whether it called unwatch.
func (e *Elector) leadUnwatched(ctx context.Context, token int64, sent time.Time, bound time.Duration, announce bool, unwatch func()) bool {
	done, closed := make(chan struct{}), make(chan struct{})
	unwatched := false
	go func() {
		defer close(closed)
		t := time.NewTimer(e.spec.RenewEvery)
		defer t.Stop()
		select {
		case <-t.C:
			unwatch()
			unwatched = true
		case <-done:
		}
	}()
	e.lead(ctx, token, sent, bound, announce)
	close(done)
	<-closed
	return unwatched
}

// waitForExpiry waits while lease is held by another term: until the expiry
// the backend reported (at most TTL away), a resync, or a release event (or
// a hand-off hint naming this replica), but not sooner than heedAfter for a
// release event. While the watcher is not listening it looks at least every
// CampaignEvery, less up to 10% jitter. A checked hand-off event (see
// [Event]) that confirmed a term ends the wait with that event; one that did
// not is a fresh read of the lease, whose expiry ends the wait if it is
// sooner (a hint never makes a candidate wait longer, nor lets its
// registration lapse). It
// reports whether a release event ended the wait, the confirmed hand-off if
// one did, and whether ctx is still live.
func (e *Elector) waitForExpiry(ctx context.Context, lease Lease, events <-chan Event, heedAfter time.Time) (hinted bool, took *Event, live bool) {
	expiry := time.Now().Add(min(lease.Remaining(), e.spec.TTL))
	e.setState(StateWaiting, expiry)
	var heard bool // a release event is waiting for heedAfter
	next := func() time.Duration {
		d := time.Until(expiry)
		if heard {
			d = min(d, time.Until(heedAfter))
		}
		if e.watcher == nil || !e.watcher.Listening() {
			d = min(d, e.spec.CampaignEvery-jitter(e.spec.CampaignEvery/10))
		}
		return d
	}
	timer := time.NewTimer(next())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil, false
		case <-timer.C:
			return heard && !time.Now().Before(heedAfter), nil, true
		case ev := <-events:
			// Acquire and renew events change nothing: the expiry read
			// from the backend stands until a read says otherwise.
			switch {
			case ev.Kind == EventResync: // from the watcher itself, not the channel
				return false, nil, true
			case ev.Kind == EventReleased, ev.Kind == EventHandedOff && !ev.Checked && ev.Owner == e.opts.Owner:
				if !time.Now().Before(heedAfter) {
					return true, nil, true
				}
				heard = true
			case ev.Kind == EventHandedOff && ev.Checked && ev.Acquired:
				return false, &ev, true
			case ev.Kind == EventHandedOff && ev.Checked && ev.Err == nil:
				// A fresh read, which the watcher takes no more often
				// than HeedEvery however many hints are forged. It may
				// bring the next campaign forward, never put it off: only
				// a campaign registers this replica as a candidate again,
				// and its registration outlasts the expiry that campaign
				// read by Margin only.
				if !ev.Lease.Held() {
					return true, nil, true
				}
				if at := ev.Sent.Add(min(ev.Lease.Remaining(), e.spec.TTL)); at.Before(expiry) {
					expiry = at
					e.setState(StateWaiting, expiry)
				}
			}
			timer.Reset(next())
		}
	}
}

// drain empties events, and returns a term confirmed for this replica (see
// [Event.Checked]) if one was among them.
func drain(events <-chan Event) (Event, bool) {
	var took Event
	var ok bool
	for {
		select {
		case ev := <-events:
			if ev.keep() && !ok {
				took, ok = ev, true
			}
		default:
			return took, ok
		}
	}
}

// backoff is the wait after failures consecutive failed campaigns, for an
// Elector and a Set alike: the campaign interval doubled for each failure
// up to half the TTL, less up to 20% jitter so replicas do not retry in
// step. The cap keeps a candidate that was backing off when the database
// came back from sleeping past the moment a lapsed lease becomes free.
func (s Spec) backoff(failures int) time.Duration {
	limit := max(s.CampaignEvery, s.TTL/2)
	d := s.CampaignEvery
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d - jitter(d/5)
}

// jitter returns a random duration in [0, d].
func jitter(d time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// campaign reads the fence floor and tries to acquire above it. It returns
// the lease as the backend saw it, and when the acquire was sent. The floor
// read is bounded by TTL, so a statement lost in a network partition does
// not stall the candidate until the connection is reset; the acquire is
// bounded by the yield instant of the term it would start, since a term
// answered later must not run (lead releases it at once).
//
// As a candidate (see [Handoffer]) it campaigns with Handoffer.Campaign,
// registering this replica until TTL + Margin from now, longer than the
// at most TTL until its next campaign.
//
// With reuseFloor it sends the floor it read last instead of reading it: the
// campaign follows one that found another term holding the lease, and is
// most likely to find it held again (renewed), when a floor read would be a
// wasted statement. That is safe: the floor only spares terms that Claim
// would refuse after lost lease data, and a refused term makes the next
// campaign read it.
func (e *Elector) campaign(ctx context.Context, asCandidate, reuseFloor bool) (Lease, time.Time, bool, error) {
	var floor int64
	switch {
	case reuseFloor && e.floorRead:
		floor = e.floor
	case e.opts.FenceFloor != nil && e.advancer != nil:
		var err error
		fctx, cancel := context.WithTimeout(ctx, e.spec.TTL)
		floor, err = e.opts.FenceFloor(fctx)
		cancel()
		if err != nil {
			return Lease{}, time.Time{}, false, e.fail(fmt.Errorf("pgleader: FenceFloor: %w", err))
		}
		if err := CheckFloor(floor); err != nil {
			return Lease{}, time.Time{}, false, e.fail(fmt.Errorf("pgleader: FenceFloor: %w", err))
		}
		e.floor, e.floorRead = floor, true
	}
	sent := time.Now()
	_, _, yieldAt := e.spec.timeline(sent)
	actx, cancel := context.WithDeadline(ctx, yieldAt)
	defer cancel()
	var lease Lease
	var won bool
	var err error
	if e.handoffer != nil {
		// Campaign even when not registering, so that a term won records
		// this replica's priority.
		c := Candidate{Owner: e.opts.Owner, Priority: e.opts.Priority, Value: e.opts.Value}
		if asCandidate {
			c.TTL = e.spec.TTL + e.spec.Margin
		}
		lease, won, err = e.handoffer.Campaign(actx, e.spec.Key, c, e.spec.TTL, floor)
	} else {
		lease, won, err = e.acquire(actx, floor)
	}
	if err != nil {
		return Lease{}, time.Time{}, false, e.fail(err)
	}
	return lease, sent, won, nil
}

// acquire advances the counter to floor while the lease is free and
// acquires: in one operation if the backend can, else in two.
func (e *Elector) acquire(ctx context.Context, floor int64) (Lease, bool, error) {
	if st, ok := e.backend.(Steerer); ok {
		return st.AcquireValue(ctx, e.spec.Key, e.opts.Owner, e.spec.TTL, floor, e.opts.Value)
	}
	if floor > 0 {
		if fa, ok := e.backend.(FloorAcquirer); ok {
			return fa.AcquireWithFloor(ctx, e.spec.Key, e.opts.Owner, e.spec.TTL, floor)
		}
		if _, _, err := e.advancer.Advance(ctx, e.spec.Key, floor); err != nil {
			return Lease{}, false, err
		}
	}
	return e.backend.Acquire(ctx, e.spec.Key, e.opts.Owner, e.spec.TTL)
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
	unsent bool // the safe end had passed before it could be sent
	resign bool // the term was asked to resign
}

// lead runs one term from acquisition to release, and returns why it
// ended and what the body returned. The term had bound left when the
// statement that proved it was sent: TTL, or less for a handed-off term
// believed on a read, whose first renewal then comes as much sooner. With
// announce it announces the term (see [Announcer]); a term handed to this
// replica was announced by the hand-off's hint already.
func (e *Elector) lead(ctx context.Context, token int64, sent time.Time, bound time.Duration, announce bool) (EndReason, error) {
	t := newTerm(e.spec.Key, e.opts.Owner, token, sent)
	defer close(t.over)
	log := e.log.With("token", token)
	safeEnd, cancelAt, yieldAt := e.spec.timelineWithin(sent, bound)
	t.setTimeline(safeEnd, yieldAt)

	e.mu.Lock()
	e.term = t
	e.status.Token = token
	e.status.State, e.status.WaitUntil = StateLeading, time.Time{}
	e.mu.Unlock()

	if !time.Now().Before(yieldAt) {
		// Born late: by the time the acquire was answered, the term was
		// already past its yield instant. Neither Claim (a write) nor
		// Lead may run.
		e.endTerm(t, ReasonExpiring)
		log.Warn("the acquire was answered after the term's yield instant; releasing without running the body",
			"sent_ago", time.Since(sent))
		e.release(ctx, log, token, t.Reason())
		e.ended(t, nil)
		return t.Reason(), nil
	}

	a, _ := e.backend.(Announcer)
	announced := make(chan struct{})
	go func() {
		defer close(announced)
		if a != nil && announce {
			e.announce(ctx, a, token)
		}
		// Rehearse the hand-off once the term's first writes had time to
		// go first: on two cores it held up Claim and the first fenced
		// write by over a millisecond. A term that is already ending
		// hands off cold rather than wait behind it.
		settle := time.NewTimer(min(rehearseAfter, e.spec.RenewEvery/2))
		defer settle.Stop()
		select {
		case <-settle.C:
			e.prepareHandOff(ctx)
		case <-t.Ending():
		}
	}()
	defer func() { <-announced }()

	bodyCtx, cancelCtx := context.WithCancel(context.WithoutCancel(ctx))
	var cancelledAt time.Time // when the body's context was first cancelled
	var returnedAt time.Time  // when the body returned
	cancelBody := func() {
		if cancelledAt.IsZero() {
			cancelledAt = time.Now()
		}
		cancelCtx()
	}
	defer cancelCtx()
	bodyDone := make(chan error, 1)
	cancelled := false // the body's context was cancelled before it returned; read after bodyDone
	go func() {
		err := e.runBody(bodyCtx, t, func() {
			e.mu.Lock()
			e.status.Terms++
			e.mu.Unlock()
			log.Info("leading")
			e.observe(Observation{Kind: ObserveTermStarted, Token: token})
		})
		cancelled = bodyCtx.Err() != nil
		bodyDone <- err
	}()

	renewTimer := time.NewTimer(time.Until(sent.Add(e.spec.RenewEvery - (e.spec.TTL - bound))))
	defer renewTimer.Stop()
	yieldTimer := time.NewTimer(time.Until(yieldAt))
	defer yieldTimer.Stop()
	cancelTimer := time.NewTimer(time.Until(cancelAt))
	defer cancelTimer.Stop()

	var renewing chan renewResult // non-nil while a renewal is in flight
	renewCtx, cancelRenew := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRenew()
	stop := ctx.Done()
	resign := t.resign
	var bodyErr error
	release := false
	renewFailed := false // since the last successful renewal
	// yieldNow ends the term gracefully: Ending at once, the body cancelled
	// YieldGrace later (or at C, if that is sooner).
	yieldNow := func(reason EndReason, doing string) {
		if e.endTerm(t, reason) {
			log.Info(doing+"; the body has YieldGrace to return", "yield_grace", e.spec.YieldGrace)
			if grace := time.Until(cancelAt); grace > e.spec.YieldGrace {
				cancelTimer.Reset(e.spec.YieldGrace)
			}
		}
	}

	for bodyDone != nil || renewing != nil {
		select {
		case <-stop:
			stop = nil
			yieldNow(ReasonStopped, "stopping")

		case <-resign:
			resign = nil
			yieldNow(ReasonResigned, "resigning")

		case <-renewTimer.C:
			if t.Reason() != ReasonNone {
				continue
			}
			renewing = make(chan renewResult, 1)
			go e.renew(renewCtx, token, safeEnd, renewing)

		case r := <-renewing:
			renewing = nil
			if r.unsent {
				continue // past the safe end: the yield and cancel timers end the term
			}
			e.observe(Observation{Kind: ObserveRenewed, Token: token, Took: r.took, Err: r.err})
			switch {
			case r.err == nil:
				renewFailed = false
				if t.Reason() != ReasonNone {
					continue
				}
				if r.resign {
					t.requestResign() // handled as StepDown: yield, then release
				}
				safeEnd, cancelAt, yieldAt = e.spec.timeline(r.sent)
				t.setTimeline(safeEnd, yieldAt)
				t.setRenewed(r.sent)
				yieldTimer.Reset(time.Until(yieldAt))
				cancelTimer.Reset(time.Until(cancelAt))
				renewTimer.Reset(time.Until(r.sent.Add(e.spec.RenewEvery)))
			case errors.Is(r.err, ErrLost):
				if e.endTerm(t, ReasonLost) {
					log.Warn("lease lost; cancelling the body")
				}
				cancelBody()
			case errors.Is(r.err, ErrNotMigrated):
				// Not transient: the schema was dropped or migrated down
				// under the term. Its row, and the token counter with it,
				// may be gone; the fence floor guards the next tokens.
				e.fail(r.err)
				if e.endTerm(t, ReasonLost) {
					log.Error("the pgleader schema is gone; ending the term at once", "err", r.err)
				}
				cancelBody()
			default:
				renewFailed = true
				e.fail(r.err)
				retry := min(e.spec.CampaignEvery, e.spec.RenewEvery)
				log.Warn("renew failed", "err", r.err, "retry_in", retry, "yield_in", time.Until(yieldAt))
				renewTimer.Reset(retry)
			}

		case <-yieldTimer.C:
			if hook.NoYield.Load() {
				continue
			}
			if e.endTerm(t, ReasonExpiring) {
				if renewFailed {
					log.Warn("renewals failed until the yield instant; the term is ending")
				} else {
					log.Warn("the yield instant passed before a renewal was answered (was this process paused?); the term is ending")
				}
			}

		case <-cancelTimer.C:
			if hook.NoYield.Load() && t.Reason() != ReasonStopped {
				continue
			}
			cancelBody()

		case bodyErr = <-bodyDone:
			bodyDone = nil
			returnedAt = time.Now()
			cancelBody()
			cancelRenew() // nothing to keep: the lease is released or lost next
			reason := ReasonFinished
			if errors.Is(bodyErr, errRefused) {
				reason = ReasonRefused
				e.observe(Observation{Kind: ObserveClaimRefused, Token: token, Err: errors.Unwrap(bodyErr)})
			}
			e.endTerm(t, reason)
			release = t.Reason() != ReasonLost
		}
	}
	if from, msg := releaseHeldFrom(cancelled, cancelledAt, returnedAt, bodyErr); release && !from.IsZero() {
		e.holdRelease(log, from, msg)
	}

	if bodyErr != nil && !errors.Is(bodyErr, errRefused) {
		e.fail(bodyErr)
	}
	if release {
		e.release(ctx, log, token, t.Reason())
	}
	e.ended(t, bodyErr)
	return t.Reason(), bodyErr
}

// holdRelease waits, before a release, as long as Spec.releaseHold says
// for a body cancelled, or failed, at from; msg says which.
func (e *Elector) holdRelease(log *slog.Logger, from time.Time, msg string) {
	d := e.spec.releaseHold(from)
	if d <= 0 {
		return
	}
	log.Info(msg, "release_in", d)
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}

// releaseHold is how long the release of a term must still wait when its
// body returned only once its context was cancelled, at from, or returned
// an error (other than a refusal by the fence) at from: until
// ReleaseTimeout after that. Such a body may have sent a statement that
// has not run yet: pgx returns at once on cancellation, and a statement
// whose connection broke under it (a proxy or a network cutting it) still
// runs and commits on the server. Released at once, the lease could pass
// to a successor before that statement commits. A term that expires gives
// such a statement ReleaseTimeout and Margin, from C to the expiry; this
// gives it ReleaseTimeout, and the lease is still held until then: a body
// not cancelled returned before C, a cancellation came at C or sooner, and
// S = C + ReleaseTimeout is Margin before the expiry. Elector and Set both
// apply it.
func (s Spec) releaseHold(from time.Time) time.Duration {
	return time.Until(from.Add(s.ReleaseTimeout))
}

// releaseHeldFrom returns from when releaseHold counts for a term whose
// body returned at returnedAt with err, its context cancelled at
// cancelledAt, before it returned if cancelled, and the log message that
// says why; the zero time when the release is not held.
func releaseHeldFrom(cancelled bool, cancelledAt, returnedAt time.Time, err error) (time.Time, string) {
	switch {
	case cancelled:
		return cancelledAt, releaseHeld
	case err != nil && !errors.Is(err, errRefused):
		return returnedAt, releaseHeldAfterError
	}
	return time.Time{}, ""
}

// releaseHeld and releaseHeldAfterError are the log messages of a release
// held by releaseHold.
const (
	releaseHeld           = "the body returned only after its context was cancelled; releasing ReleaseTimeout after that, so a statement it had sent commits while the lease is held"
	releaseHeldAfterError = "the body returned an error; releasing ReleaseTimeout after that, so a statement it had sent, whose outcome it may not know, commits while the lease is held"
)

// ended records that t is over.
func (e *Elector) ended(t *Term, bodyErr error) {
	reason := t.Reason()
	e.mu.Lock()
	e.status.LastEnd = reason
	e.mu.Unlock()
	e.observe(Observation{Kind: ObserveTermEnded, Token: t.token, Reason: reason})
	e.log.Info("term ended", "token", t.token, "reason", reason.String(), "err", bodyErr)
}

// endTerm starts t's end with reason unless it has begun to end already,
// and reports whether it did.
func (e *Elector) endTerm(t *Term, reason EndReason) bool {
	if !t.end(reason) {
		return false
	}
	e.observe(Observation{Kind: ObserveTermEnding, Token: t.token, Reason: reason})
	return true
}

// errRefused marks a body goroutine that stopped because Claim refused.
var errRefused = errors.New("pgleader: claim refused the token")

// runBody runs Claim and then Lead, calling started between them, and turns
// a panic into an error so the term still ends and releases.
func (e *Elector) runBody(ctx context.Context, t *Term, started func()) error {
	return runBody(ctx, t, e.opts.Claim, e.opts.Lead, func(err error) { e.fail(err) }, started, "body")
}

// runBody runs claim (if not nil) and then lead for term t, calling started
// between them; a Claim error is also passed to fail. A panic becomes an
// error naming what panicked.
func runBody(ctx context.Context, t *Term, claim func(context.Context, *Term) (bool, error),
	lead func(context.Context, *Term) error, fail func(error), started func(), what string) (err error) {
	defer func() {
		if p := recover(); p != nil {
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
// which lead cancels once the body has returned.
func (e *Elector) renew(ctx context.Context, token int64, safeEnd time.Time, out chan<- renewResult) {
	sent := time.Now()
	if !sent.Before(safeEnd) {
		out <- renewResult{sent: sent, unsent: true}
		return
	}
	rctx, cancel := context.WithDeadline(ctx, safeEnd)
	defer cancel()
	var resign bool
	var err error
	if e.handoffer != nil {
		_, resign, err = e.handoffer.RenewPreferring(rctx, e.spec.Key, e.opts.Owner, token, e.spec.TTL, e.opts.MinTerm)
	} else if st, ok := e.backend.(Steerer); ok {
		_, resign, err = st.RenewTerm(rctx, e.spec.Key, e.opts.Owner, token, e.spec.TTL)
	} else {
		_, err = e.backend.Renew(rctx, e.spec.Key, e.opts.Owner, token, e.spec.TTL)
	}
	out <- renewResult{sent: sent, took: time.Since(sent), err: err, resign: resign}
}

// release frees the lease within ReleaseTimeout, even after ctx is
// cancelled. A term that ends as stopped, resigned or finished hands the
// lease to the best live candidate instead, if the backend can: a refused
// term's successor would need the fence floor read first, and an expiring
// term's has lost its footing.
func (e *Elector) release(ctx context.Context, log *slog.Logger, token int64, reason EndReason) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.spec.ReleaseTimeout)
	defer cancel()
	var released bool
	var err error
	e.handedOff = false
	if e.handoffer != nil && (reason == ReasonStopped || reason == ReasonResigned || reason == ReasonFinished) {
		var successor string
		released, successor, err = e.handoffer.HandOff(rctx, e.spec.Key, e.opts.Owner, token, "")
		e.handedOff = err == nil && successor != ""
		if e.handedOff {
			// Not token + 1: after a move to a new token epoch the
			// successor draws above the epoch's base.
			log.Info("handed the lease off", "successor", successor)
		}
	} else {
		released, err = e.backend.Release(rctx, e.spec.Key, e.opts.Owner, token)
	}
	switch {
	case err != nil:
		e.fail(err)
		log.Warn("release failed; the lease will expire", "err", err)
	case !released:
		log.Warn("release found the lease no longer ours: it had expired or passed to another term")
	}
}

// withdraw removes this replica's candidate registration, best-effort,
// within ReleaseTimeout: a stopped replica must not be handed a term (if it
// were, the term would wait for its candidate expiry).
func (e *Elector) withdraw(ctx context.Context) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.spec.ReleaseTimeout)
	defer cancel()
	if err := e.handoffer.Withdraw(wctx, e.spec.Key, e.opts.Owner); err != nil {
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
	w, ok := e.backend.(interface {
		prepareHandOff(context.Context, string, string, time.Duration) error
	})
	if !ok || e.handoffer == nil {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.spec.RenewEvery)
	defer cancel()
	if err := w.prepareHandOff(pctx, e.spec.Key, e.opts.Owner, e.spec.TTL); err != nil {
		if e.rehearsalFailed.CompareAndSwap(false, true) {
			e.log.Warn("preparing the hand-off failed; hand-offs run without it, slower (said once per Elector)", "err", err)
		} else {
			e.log.Debug("preparing the hand-off failed", "err", err)
		}
	}
}
