package pgleader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/pgleader/pgleader/internal/lifecycle"
)

// Set campaigns for many keys at once and runs one body per key it wins,
// each with its own Term and the timeline of [Spec], as an Elector per key
// would, but with one statement per renewal tick for every key it holds and
// one per campaign for up to 10,000 keys it waits for, sent only when a
// campaign can take something. The replicas of a set count each other and
// each aims at its fair share ceil(keys / replicas); a term that ends
// stopped, resigned or finished hands its key to another replica; see
// docs/sets.md. Create it with NewSet; its methods are safe for concurrent
// use, and Run may be called once at a time.
type Set struct {
	backend SetBackend
	spec    Spec
	opts    SetOptions
	log     *slog.Logger
	changed chan struct{} // Add and Remove poke the loop

	running sync.Mutex

	mu     sync.Mutex
	keys   map[string]struct{}
	sorted []string // keys, sorted; nil after a change (see sortedKeys)
	status SetStatus
	live   map[string]*Term // terms with no end reason yet, for Terms
}

// NewSet validates spec and opts and returns a Set over backend (for
// PostgreSQL, NewPostgres(pool)) that campaigns for keys. spec.Key names
// the set: every replica of the set uses the same name and, normally, the
// same keys. A set name may equal a key. NewSet fails with an error
// matching ErrInvalid for a bad Spec, a bad or repeated key, or a missing
// Lead, and with ErrAdvanceUnsupported when spec.RequireFenceAdvance is set
// and opts.FenceFloors is nil.
func NewSet(backend SetBackend, spec Spec, keys []string, opts SetOptions) (*Set, error) {
	if backend == nil {
		return nil, invalidf("NewSet: nil backend")
	}
	spec, log, err := replica(spec, opts.Lead, &opts.Owner, opts.Logger, backend.Abilities(), "SetOptions")
	if err != nil {
		return nil, err
	}
	if spec.RequireFenceAdvance && opts.FenceFloors == nil {
		return nil, invalidf("Spec.RequireFenceAdvance is set but SetOptions.FenceFloors is nil")
	}
	if opts.SessionBound && backend.Abilities().connect == nil {
		return nil, invalidf("SetOptions.SessionBound is set and %T cannot open a session of its own: "+
			"use the PostgreSQL backend over a pool (NewPostgres(pool)) or with ListenWith", backend)
	}
	set := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if err := CheckKey(k); err != nil {
			return nil, err
		}
		if _, dup := set[k]; dup {
			return nil, invalidf("key %q appears twice", k)
		}
		set[k] = struct{}{}
	}
	return &Set{
		backend: backend,
		spec:    spec,
		opts:    opts,
		log:     log.With("set", spec.Key, "owner", opts.Owner),
		changed: make(chan struct{}, 1),
		keys:    set,
		live:    make(map[string]*Term),
		status:  SetStatus{Name: spec.Key, Owner: opts.Owner, Keys: len(set), Members: 1, Share: len(set)},
	}, nil
}

// Spec returns the set's Spec with its defaults filled in.
func (s *Set) Spec() Spec { return s.spec }

// Add adds keys to the set; a running set campaigns for them from its next
// campaign on. Keys already in the set are ignored.
func (s *Set) Add(keys ...string) error {
	for _, k := range keys {
		if err := CheckKey(k); err != nil {
			return err
		}
	}
	s.mu.Lock()
	for _, k := range keys {
		s.keys[k] = struct{}{}
	}
	s.sorted = nil
	s.status.Keys = len(s.keys)
	s.mu.Unlock()
	s.poke()
	return nil
}

// Remove removes keys from the set. A term this replica holds for a removed
// key ends as stopped (Ending at once, its body cancelled YieldGrace later,
// the lease released when it returns).
func (s *Set) Remove(keys ...string) {
	s.mu.Lock()
	for _, k := range keys {
		delete(s.keys, k)
	}
	s.sorted = nil
	s.status.Keys = len(s.keys)
	s.mu.Unlock()
	s.poke()
}

func (s *Set) poke() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Keys returns the set's keys, sorted.
func (s *Set) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sortedKeys())
}

// sortedKeys returns the set's keys, sorted, kept until Add or Remove
// changes them: each campaign walks them (sorting 100,000 keys took 35 to
// 50 ms on the development VM, at the instant a dead member's keys lapse).
// The caller holds s.mu and must not change the slice.
func (s *Set) sortedKeys() []string {
	if s.sorted == nil {
		s.sorted = slices.Sorted(maps.Keys(s.keys))
	}
	return s.sorted
}

// Terms returns the live terms of this replica (won, not yet ending),
// ordered by key.
func (s *Set) Terms() []*Term {
	s.mu.Lock()
	ts := make([]*Term, 0, len(s.live))
	for _, t := range s.live {
		ts = append(ts, t)
	}
	s.mu.Unlock()
	slices.SortFunc(ts, func(a, b *Term) int { return cmp.Compare(a.key, b.key) })
	return ts
}

func (s *Set) fail(err error) {
	s.mu.Lock()
	s.status.LastError, s.status.LastErrorAt = err, time.Now()
	s.mu.Unlock()
}

func (s *Set) observe(o Observation) {
	if s.opts.Observer == nil {
		return
	}
	if o.Key == "" {
		o.Key = s.spec.Key
	}
	o.Owner = s.opts.Owner
	s.opts.Observer.Observe(o)
}

// Run campaigns for the set's keys until ctx is cancelled, running the body
// for every key it wins. Backend errors are logged and retried, except one
// that retrying cannot cure ([Permanent]) from a tick before the first tick
// is answered, or from a campaign before the first campaign is: Run
// returns it, and Status's LastError is it. When ctx is cancelled every
// live term ends as stopped: each body is told at once and cancelled
// YieldGrace later (at once with SetOptions.CancelOnStop), each lease is
// handed to another live member of the set (released, with
// SetOptions.NoHandOff or when no other member is live) after its body
// returns (ReleaseTimeout after the cancellation for a body that returned
// only once cancelled, as for an Elector), and the replica leaves the
// set's members. Run then returns nil, with no goroutine of its own left
// running (a [Postgres] backend closes its connections 100 ms later).
func (s *Set) Run(ctx context.Context) error {
	if !s.running.TryLock() {
		return ErrRunning
	}
	defer s.running.Unlock()
	if hold := s.backend.Abilities().Hold; hold != nil {
		defer hold()()
	}
	s.mu.Lock()
	s.status.Running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.status.Running, s.status.Held, s.status.Ending = false, 0, 0
		clear(s.live)
		s.mu.Unlock()
	}()
	r := newSetRun(s, ctx)
	r.loop()
	return r.fatal
}

// setTerm is one key's term inside a run.
type setTerm struct {
	t      *Term
	m      *lifecycle.Machine
	sent   time.Time          // the last successful statement for it was sent
	cancel context.CancelFunc // cancels the body's context
}

// setRun is the state of one Run, owned by its loop goroutine. Each term
// is driven by its own machine (internal/lifecycle); the run sends one
// statement per renewal tick, campaign and batch of releases for all of
// them, and wakes at the earliest instant any machine needs.
type setRun struct {
	s      *Set
	ctx    context.Context
	bodies context.Context // ctx without its cancellation: the bodies' contexts' parent

	terms     map[string]*setTerm // won and not yet released (or forgotten)
	releasing map[string]ending   // keys whose release is queued or in flight
	pending   []string            // queued for release, in order
	notes     map[lifecycle.Note]int
	ended     map[EndReason]int // terms ended since the last settle, by reason, to be logged once per reason
	tm        *lifecycle.Timing // the terms' (see timing)

	nLive     int // terms in terms with no end reason yet
	members   []SetMember
	nMembers  int
	ticks     int // ticks answered, counted up to 2: after one, members and handed are known
	handed    int // terms handed to this replica, unconfirmed, at the last tick
	hinted    int // the campaign a hint on the set's name asked for since the last one
	extra     int // keys the others agreed this replica takes beyond its share
	freeSeen  bool
	shedHold  time.Time // no campaign before it, after stepping down from keys (see shed)
	paceAt    time.Time // no campaign before it: CampaignEvery after one that won nothing, or a backoff
	hintAt    time.Time // no campaign for a hint before it: as paceAt, after one a hint asked for
	inSweep   bool      // a sweep of the parts is under way (see nextPart)
	fruitless fruitless // the last sweep won nothing, on these counts
	part      string    // the key the next campaign's part starts at
	partEnd   string    // and the key it ends before, if not the budget's end: the home's end
	homeOf    string    // the members' owners the sweep's home was worked out for
	idle      int       // parts in a row that won nothing, while a sweep of the keys is not done
	failures  int
	// Which kinds of statement of this run were answered (see failFast).
	tickAnswered, campaignAnswered bool
	fatal                          error // a Permanent error before its kind's first answer: Run returns it
	stopping                       bool
	left                           bool
	batching                       bool // releaseT is armed
	// A statement of each kind is in flight; its answer, and each body's
	// return, arrive on done as a call to run on the loop.
	renewing, campaigning, sending bool
	done                           chan func()
	// launch holds the bodies of the terms started by the event the loop
	// handles now, run on goroutines of their own once it is handled (see
	// campaigned).
	launch    []func()
	renewT    *time.Timer
	tickAt    time.Time // when renewT fires
	campaignT *time.Timer
	termT     *time.Timer // the earliest instant a term's machine needs
	releaseT  *time.Timer // armed while releases wait to be batched

	// With SetOptions.SessionBound (setbound.go): the member's bound
	// session, the context and wait group of its binder and watcher
	// goroutines, the end of the session bound now (nil while unbound),
	// whether the member may campaign (bound, or running without a
	// binding behind a session pooler), whether the watcher runs, and the
	// binding's generation, raised at each session's end.
	sess      *setSession
	sessCtx   context.Context
	sessStop  context.CancelFunc
	sessWG    sync.WaitGroup
	sessEnded <-chan struct{}
	watchPoke chan struct{} // a tick found the members changed
	bound     bool
	watching  bool
	gen       int
}

func newSetRun(s *Set, ctx context.Context) *setRun {
	return &setRun{
		s: s, ctx: ctx, bodies: context.WithoutCancel(ctx),
		terms:     make(map[string]*setTerm),
		releasing: make(map[string]ending),
		notes:     make(map[lifecycle.Note]int),
		ended:     make(map[EndReason]int),
		nMembers:  1,
		done:      make(chan func(), 64),
	}
}

func (r *setRun) loop() {
	s := r.s
	// Join first: the first tick renews nothing and records the member,
	// so the first campaign already counts this replica.
	r.renewT, r.tickAt = time.NewTimer(0), time.Now()
	// The first campaign waits CampaignEvery and the second tick, so the
	// replicas that start together have joined: each counts them all,
	// knows its place among them, and takes its share from its home.
	r.paceAt = time.Now().Add(s.spec.CampaignEvery)
	r.hintAt = r.paceAt
	r.campaignT = time.NewTimer(time.Hour)
	r.campaignT.Stop() // until the first tick is answered
	r.termT = time.NewTimer(time.Hour)
	r.releaseT = time.NewTimer(time.Hour)
	r.releaseT.Stop()
	defer r.releaseT.Stop()
	defer r.renewT.Stop()
	defer r.campaignT.Stop()
	defer r.termT.Stop()
	if s.opts.SessionBound {
		r.startBinding()
		defer r.stopBinding()
	}
	stop := r.ctx.Done()
	var hints <-chan Event
	if w := s.backend.Abilities().Events; w != nil {
		var unwatch func()
		hints, unwatch = w.Watch(s.spec.Key) // ReleaseSet's hint after a hand-off
		defer unwatch()
	}
	for {
		if r.stopping && len(r.terms) == 0 && !r.renewing && !r.campaigning && !r.sending && !r.batching {
			if len(r.pending) == 0 && r.left {
				return
			}
			r.startRelease()
			if !r.sending { // nothing could be sent
				return
			}
		}
		select {
		case <-stop:
			stop = nil
			r.stop()
		case <-s.changed:
			r.applyKeys()
		case <-r.renewT.C:
			r.startRenew()
		case <-r.campaignT.C:
			r.startCampaign()
		case ev := <-hints:
			// Keys freed (release) may be taken; keys handed off only
			// confirmed, which sends no key.
			r.hinted = max(r.hinted, confirmOnly)
			if ev.Kind == EventReleased {
				r.hinted = fullCampaign
			}
			r.schedule()
		case f := <-r.done:
			f()
			r.drain() // what else has arrived, before settle looks at every term
		case <-r.termT.C:
			now := time.Now()
			for k, st := range r.terms {
				if at := st.m.Next(); !at.IsZero() && !now.Before(at) {
					r.step(k, st, st.m.Tick(now))
				}
			}
		case <-r.releaseT.C:
			r.batching = false
			r.startRelease()
		case <-r.sessEnded:
			r.sessionLost()
		}
		r.settle()
		r.launchBodies()
	}
}

// launchBodies runs the bodies of the terms started since the last call.
func (r *setRun) launchBodies() {
	for _, body := range r.launch {
		go body()
	}
	r.launch = nil
}

// stop ends every term as stopped and the run once they are released.
func (r *setRun) stop() {
	if r.stopping {
		return
	}
	r.stopping = true
	r.renewT.Stop()
	r.campaignT.Stop()
	r.yield(maps.Keys(r.terms), lifecycle.Stopped)
	r.startRelease()
}

// failFast stops the run with err, which Run returns, if retrying cannot
// cure err and no statement of its kind (a tick, a campaign) of the run was
// answered: answered is the run's flag for that kind, set here by a nil
// err. A tick's answer says nothing of the campaign's statement: a schema
// can have the one and lack the other, and a key can be another role's.
func (r *setRun) failFast(err error, answered *bool) bool {
	*answered = *answered || err == nil
	if err == nil || *answered || r.stopping || !Permanent(err) {
		return false
	}
	r.s.log.Error("set failed, and retrying cannot cure it: Run returns", "err", err)
	r.fatal, r.left = err, true // nothing of this run was written: no member row to leave
	r.stop()
	return true
}

// drain runs the answers already waiting on done: bodies that were told to
// end together return together, and settle, which looks at every term,
// then runs once for all of them rather than once per body.
func (r *setRun) drain() {
	for {
		select {
		case f := <-r.done:
			f()
		default:
			return
		}
	}
}

// step carries out what st's machine decided, as the Elector does, but
// with the machine's notes counted, to be logged once per kind for all
// the keys of an event (see settle).
func (r *setRun) step(key string, st *setTerm, act lifecycle.Actions) {
	live := st.t.Reason() == ReasonNone
	st.t.apply(st.m, act, st.sent, st.cancel, nil, r.s.observe)
	if act.Note != lifecycle.NoNote {
		r.notes[act.Note]++
	}
	if live && st.t.Reason() != ReasonNone {
		r.nLive--
		r.s.mu.Lock()
		delete(r.s.live, key)
		r.s.mu.Unlock()
	}
	if act.Release || act.Forget {
		delete(r.terms, key)
		if act.Release {
			r.queueRelease(key, st.t.token, act.HandOff)
		}
		r.over(st.t)
	}
}

// yield ends the terms of keys as stop does: Ending now, each body
// cancelled YieldGrace later (or at C, if sooner).
func (r *setRun) yield(keys iter.Seq[string], reason lifecycle.Reason) {
	now := time.Now()
	for k := range keys {
		if st := r.terms[k]; st != nil {
			r.step(k, st, st.m.Yield(reason, now))
		}
	}
}

// settle logs the notes of the last event, arms the term timer for the
// earliest instant a machine needs, and copies the run's counts into the
// status.
func (r *setRun) settle() {
	for n, keys := range r.notes {
		if level, msg := noteLine(n); n != lifecycle.RenewFailed { // renewed says why, once
			r.s.log.Log(r.ctx, level, msg, "keys", keys)
		}
		delete(r.notes, n)
	}
	for reason, n := range r.ended {
		r.s.log.Info("terms ended", "keys", n, "reason", reason.String())
		delete(r.ended, reason)
	}
	var next time.Time
	for _, st := range r.terms {
		if at := st.m.Next(); !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	wake(r.termT, next)
	live := r.nLive
	r.s.mu.Lock()
	r.s.status.Held, r.s.status.Ending = live, len(r.terms)-live+len(r.releasing)
	r.s.status.Members = r.nMembers
	r.s.status.Share = ceilDiv(len(r.s.keys), r.nMembers)
	r.s.mu.Unlock()
}

func ceilDiv(a, b int) int {
	if b <= 0 {
		return a
	}
	return (a + b - 1) / b
}

// startRenew sends one renewal tick for every live term whose safe end is
// ahead, bounded by the earliest of those safe ends.
func (r *setRun) startRenew() {
	if r.renewing || r.stopping {
		return
	}
	s := r.s
	now := time.Now()
	var keys []string
	var tokens []int64
	var terms []*setTerm
	deadline := now.Add(s.spec.TTL)
	for k, st := range r.terms {
		safeEnd, ok := st.m.StartRenewal(now)
		if !ok {
			continue
		}
		keys, tokens, terms = append(keys, k), append(tokens, st.t.token), append(terms, st)
		if safeEnd.Before(deadline) {
			deadline = safeEnd
		}
	}
	r.renewing = true
	go func() {
		ctx, cancel := context.WithDeadline(context.WithoutCancel(r.ctx), deadline)
		defer cancel()
		sent := time.Now()
		ans, err := s.backend.RenewSet(ctx, s.spec.Key, s.opts.Owner, keys, tokens, s.spec.TTL, len(keys))
		took := time.Since(sent)
		r.done <- func() { r.renewed(sent, took, keys, terms, ans, err) }
	}()
}

func (r *setRun) renewed(sent time.Time, took time.Duration, keys []string, terms []*setTerm, d SetRenewal, err error) {
	s := r.s
	r.renewing = false
	s.observe(Observation{Kind: ObserveRenewed, Took: took, Err: err})
	if r.failFast(err, &r.tickAnswered) {
		s.fail(err)
		return
	}
	for i, st := range terms {
		if r.terms[keys[i]] != st {
			continue
		}
		kerr := err
		if kerr == nil && d.Expires[i].IsZero() {
			kerr = ErrLost
		}
		if kerr == nil {
			st.sent = sent
		}
		r.step(keys[i], st, renewOutcome(st.m, sent, kerr == nil && d.Resign != nil && d.Resign[i], kerr))
	}
	if err != nil {
		s.fail(err)
		retry := s.spec.timing().RenewRetry()
		if !errors.Is(err, ErrNotMigrated) {
			s.log.Warn("renewal failed", "err", err, "keys", len(keys), "retry_in", retry)
		}
		if !r.stopping {
			r.armRenew(time.Now().Add(retry))
		}
		return
	}
	s.mu.Lock()
	s.status.LastRenewSent = sent
	s.mu.Unlock()
	r.pokeWatch(r.members, d.Members)
	r.members, r.handed, r.ticks = d.Members, d.Handed, min(r.ticks+1, 2)
	if !r.fruitless.stale(sent, d.Members, s.spec.TTL, time.Now()) {
		r.fruitless = fruitless{} // counts newer than the fruitless sweep
	}
	r.nMembers = max(len(d.Members), 1)
	next := sent.Add(s.spec.RenewEvery)
	if r.ticks == 1 {
		// The second tick comes as the first campaign may start, and
		// tells which members joined meanwhile (see home).
		next = sent.Add(min(s.spec.CampaignEvery, s.spec.RenewEvery))
	}
	if !r.stopping {
		r.armRenew(next)
		r.rebalance()
		r.schedule()
	}
}

// armRenew sets the next tick at the earliest renewal any term needs, and
// at next at the latest (the membership's). Terms won since the last tick
// was sent need theirs RenewEvery after their campaign was sent: a tick at
// the usual step could come too late for a campaign that took long.
func (r *setRun) armRenew(next time.Time) {
	for _, st := range r.terms {
		if at := st.m.RenewAt(); !at.IsZero() && at.Before(next) {
			next = at
		}
	}
	r.tickAt = next
	r.renewT.Reset(time.Until(next))
}

// over observes that t ended, and counts it for settle's line. A line
// per key at info level made a graceful stop of 33,333 keys write 33,333
// lines before its release was sent: with a file behind the logger, 291 to
// 329 ms from the cancellation to the release on the development VM, 136
// to 150 ms without them (BenchmarkSetStopLogged); one per key is at debug
// level.
func (r *setRun) over(t *Term) {
	reason := t.Reason()
	r.s.observe(Observation{Kind: ObserveTermEnded, Key: t.key, Token: t.token, Reason: reason})
	r.ended[reason]++
	if r.s.log.Enabled(context.Background(), slog.LevelDebug) {
		r.s.log.Debug("term ended", "key", t.key, "token", t.token, "reason", reason.String())
	}
}

// candidates returns the set's keys this replica neither holds nor is
// releasing, sorted.
func (r *setRun) candidates() []string {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	var out []string
	for _, k := range r.s.sortedKeys() {
		if _, held := r.terms[k]; held {
			continue
		}
		if _, rel := r.releasing[k]; rel {
			continue
		}
		out = append(out, k)
	}
	return out
}

// unbound reports whether the member must not campaign: SessionBound and
// no session bound now.
func (r *setRun) unbound() bool { return r.sess != nil && !r.bound }

// startCampaign sends one campaign, if one may take anything, for the keys
// this replica does not hold (at most campaignBudget of them, from the
// key its part starts at up to the last key, see home), bounded by the
// yield instant of the terms it would start.
func (r *setRun) startCampaign() {
	s := r.s
	if r.campaigning || r.stopping || r.unbound() {
		return
	}
	now := time.Now()
	want := r.wantCampaign(now)
	byHint := r.hinted != noCampaign
	if now.Before(r.gate()) || want == noCampaign {
		r.schedule()
		return
	}
	r.hinted = noCampaign
	keys := r.candidates()
	held := len(r.terms) + len(r.releasing)
	s.mu.Lock()
	held = min(held, len(s.keys)-len(keys))
	total := held + len(keys)
	s.mu.Unlock()
	// Terms handed to this replica are confirmed among its keys not held
	// (another component under the same Owner may wait for its own).
	var confirm []string
	if r.handed > 0 || byHint {
		confirm = keys
	}
	if want == confirmOnly {
		keys = nil
	}
	sweep, next := 1, ""
	if len(keys) > 0 {
		keys, sweep, next = r.nextPart(keys, now)
	}
	extra, gen := r.extra, r.gen
	r.campaigning = true
	go func() {
		var floors []int64
		if s.opts.FenceFloors != nil && len(keys) > 0 {
			fctx, cancel := context.WithTimeout(r.ctx, s.spec.TTL)
			fl, err := s.opts.FenceFloors(fctx, keys)
			cancel()
			if err == nil && len(fl) != len(keys) {
				err = fmt.Errorf("returned %d floors for %d keys", len(fl), len(keys))
			}
			for i := 0; err == nil && i < len(fl); i++ {
				err = CheckFloor(fl[i])
			}
			if err != nil {
				r.done <- func() {
					r.campaigned(time.Time{}, gen, nil, 0, false, byHint, 1, "", fmt.Errorf("pgleader: FenceFloors: %w", err))
				}
				return
			}
			floors = fl
		}
		sent := time.Now()
		ctx, cancel := context.WithDeadline(r.ctx, s.spec.yieldAt(sent))
		defer cancel()
		won, members, err := s.backend.AcquireSet(ctx, s.spec.Key, s.opts.Owner, keys, floors, s.spec.TTL, held, extra, total, confirm)
		r.done <- func() { r.campaigned(sent, gen, won, members, len(keys) == 0, byHint, sweep, next, err) }
	}()
}

func (r *setRun) campaigned(sent time.Time, gen int, won []Lease, members int, confirming, byHint bool, sweep int, next string, err error) {
	s := r.s
	r.campaigning = false
	if err == nil && gen != r.gen && len(won) > 0 {
		// Sent before the member's bound session ended: the keys are
		// bound to that session, and a watcher may lapse them.
		s.log.Warn("a campaign sent before the member's bound session ended won keys: they are released", "keys", len(won))
		for _, l := range won {
			r.queueRelease(l.Key, l.Token, false)
		}
		won = nil
	}
	if err != nil {
		if r.stopping && r.ctx.Err() != nil {
			return
		}
		s.fail(err)
		if r.failFast(err, &r.campaignAnswered) {
			return
		}
		r.failures++
		retry := s.spec.backoff(r.failures)
		s.log.Warn("campaign failed", "err", err, "retry_in", retry)
		r.paceAt = time.Now().Add(retry)
		r.hintAt = r.paceAt
		r.schedule()
		return
	}
	r.failures, r.campaignAnswered = 0, true
	r.nMembers = max(members, 1)
	// A campaign that won keys goes on at once with the next part while
	// one may take more, and so does a part that won nothing until the
	// parts have covered every key once (the free keys may lie in the
	// others); otherwise one that won nothing waits CampaignEvery, or a
	// tenth of it if it only confirmed (it sent no key). One a hint asked
	// for paces the next hints, the others the rest: a campaign a tick
	// asked for just before a stop's hand-offs does not hold back the
	// confirmation the stop's hint asks for. A flood of forged hints
	// costs one sweep of the parts, and ten campaigns that send no key,
	// per CampaignEvery: those send no part and leave the sweep's count
	// alone (TestSetForgedHintFlood).
	pace := s.spec.CampaignEvery
	if confirming {
		pace /= 10
	}
	switch {
	case confirming: // sent no key: no part of a sweep
	case len(won) > 0: // the next part starts where this one did
		r.idle = 0
	case r.idle+1 >= sweep: // the next sweep starts at home again
		r.idle, r.inSweep = 0, false
		now := time.Now()
		_, others, m := r.view(now)
		r.fruitless = fruitless{set: true, at: now, others: others, m: m}
		for _, mb := range r.members {
			if mb.Owner != s.opts.Owner && mb.Expires.After(now) {
				r.fruitless.seen = append(r.fruitless.seen, mb)
			}
		}
	default:
		r.idle, r.part, r.partEnd = r.idle+1, next, ""
		pace = 0
	}
	if at := time.Now().Add(pace - jitter(pace/10)); byHint {
		r.hintAt = at
	} else {
		r.paceAt = at
	}
	if len(won) > 0 {
		r.paceAt, r.hintAt, r.extra, r.handed = time.Time{}, time.Time{}, 0, 0
		for _, l := range won {
			r.start(l, sent)
		}
		r.startRelease()
		if !r.renewing && !r.stopping {
			r.armRenew(r.tickAt)
		}
	}
	if len(won) == 0 {
		r.schedule()
		return
	}
	// The next part, if one may take more, is sent before the bodies of
	// this one start (the loop runs them once this event is handled):
	// starting 10,000 bodies takes the loop 0.1 to 0.3 s on two cores, and
	// a dead member's keys at 100,000 keys come in two parts that used to
	// wait for each other's starts. If none may go now, startCampaign
	// arms the timer as schedule does.
	r.startCampaign()
}

// start begins the term of a key won by a campaign sent at sent. A term
// won for a key removed meanwhile, or after Run's context was cancelled,
// never runs its body and is released at once, as is one its machine
// finds answered after its yield instant.
func (r *setRun) start(l Lease, sent time.Time) {
	s := r.s
	t := newTerm(l.Key, s.opts.Owner, l.Token, sent)
	m, act := lifecycle.Start(r.timing(), sent, s.spec.TTL, time.Now())
	t.setTimeline(m.SafeEnd(), m.YieldAt())
	s.mu.Lock()
	_, wanted := s.keys[l.Key]
	s.mu.Unlock()
	if !act.Release && (r.stopping || !wanted) {
		t.end(ReasonStopped)
		r.queueRelease(l.Key, l.Token, true)
		r.over(t)
		return
	}
	ctx, cancel := context.WithCancel(r.bodies)
	st := &setTerm{t: t, m: m, sent: sent, cancel: cancel}
	r.terms[l.Key] = st
	r.nLive++
	s.mu.Lock()
	s.live[l.Key] = t
	s.mu.Unlock()
	if act.Release {
		r.step(l.Key, st, act)
		return
	}
	r.launch = append(r.launch, func() {
		err := runBody(ctx, t, s.opts.Claim, s.opts.Lead, s.fail, func() { s.leading(t) }, true)
		cancelled := ctx.Err() != nil
		r.done <- func() { r.bodyReturned(st, err, cancelled) }
	})
}

// leading logs and observes that t's body starts, on the body's goroutine.
// The Enabled check keeps slog's record off that goroutine's stack when
// debug lines are not wanted: Logger.log's frame alone would grow every
// body's stack from 2 KB to 4 KB, for the whole term.
func (s *Set) leading(t *Term) {
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("leading", "key", t.key, "token", t.token)
	}
	s.observe(Observation{Kind: ObserveTermStarted, Key: t.key, Token: t.token})
}

// timing is the Timing of a term that starts now. The run's terms share
// one while it stays the same (internal/hook.NoYield may change it): a copy
// per term would cost 64 bytes per held key.
func (r *setRun) timing() *lifecycle.Timing {
	tm := *r.s.spec.timing()
	tm.CancelOnStop = r.s.opts.CancelOnStop
	if r.tm == nil || *r.tm != tm {
		shared := tm
		r.tm = &shared
	}
	return r.tm
}

func (r *setRun) bodyReturned(st *setTerm, err error, cancelled bool) {
	refused := errors.Is(err, errRefused)
	if refused {
		r.s.observe(Observation{Kind: ObserveClaimRefused, Key: st.t.key, Token: st.t.token, Err: errors.Unwrap(err)})
	} else if err != nil {
		r.s.fail(err)
		r.s.log.Warn("body returned an error", "key", st.t.key, "token", st.t.token, "err", err)
	}
	r.step(st.t.key, st, st.m.BodyDone(refused, err != nil, cancelled, time.Now()))
}

// releaseBound bounds a statement that ends n terms: ReleaseTimeout for
// each thousand, at most TTL - Margin. A release of 33,000 keys takes about
// a second on the development VM; cut off at ReleaseTimeout it ended none,
// and every key waited for its expiry. The terms have ended already: the
// bound only decides how long Run waits for the statement.
func releaseBound(sp Spec, n int) time.Duration {
	return min(sp.ReleaseTimeout*time.Duration(1+n/1000), sp.TTL-sp.Margin)
}

// releaseBatchWait is how long a release waits for others to share its
// statement.
const releaseBatchWait = 5 * time.Millisecond

// ending is a term whose release is queued or in flight.
type ending struct {
	token   int64
	handOff bool // hand the lease to another member instead
}

// queueRelease queues the release of key's term, or with handOff its
// hand-off to another member; a key removed from the set is released.
func (r *setRun) queueRelease(key string, token int64, handOff bool) {
	if _, ok := r.releasing[key]; ok {
		return
	}
	r.s.mu.Lock()
	_, wanted := r.s.keys[key]
	r.s.mu.Unlock()
	r.releasing[key] = ending{token, handOff && wanted && !r.s.opts.NoHandOff}
	r.pending = append(r.pending, key)
	if !r.batching {
		// Bodies told to end together return together: gather them
		// into one statement.
		r.batching = true
		r.releaseT.Reset(releaseBatchWait)
	}
}

// startRelease sends every queued release in one statement, unless one is
// in flight; once Run's context is cancelled, every term has ended and no
// renewal or campaign is in flight, such a statement also leaves the set's
// members.
func (r *setRun) startRelease() {
	// Leave only once no renewal or campaign is in flight: either would
	// write this replica's member row again after the leave. And only with
	// the last terms' hand-off: the others, counting one member fewer
	// while this one still held its keys, would campaign for keys that are
	// not free, and confirm those handed to them only after.
	canLeave := r.stopping && !r.left && !r.renewing && !r.campaigning && len(r.terms) == 0
	if r.sending || r.batching || (len(r.pending) == 0 && !canLeave) {
		return
	}
	s := r.s
	keys := r.pending
	r.pending = nil
	tokens, handOff := make([]int64, len(keys)), make([]bool, len(keys))
	for i, k := range keys {
		tokens[i], handOff[i] = r.releasing[k].token, r.releasing[k].handOff
	}
	leave := canLeave
	r.sending = true
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), releaseBound(s.spec, len(keys)))
		defer cancel()
		ok, err := s.backend.ReleaseSet(ctx, s.spec.Key, s.opts.Owner, keys, tokens, handOff, leave)
		r.done <- func() { r.released(keys, ok, leave, err) }
	}()
}

func (r *setRun) released(keys []string, ok []bool, left bool, err error) {
	s := r.s
	r.sending = false
	for _, k := range keys {
		delete(r.releasing, k)
	}
	lost := len(keys)
	for _, ended := range ok {
		if ended {
			lost--
		}
	}
	if err != nil {
		s.fail(err)
		s.log.Warn("release failed; the leases will expire", "keys", len(keys), "err", err)
	} else if lost > 0 {
		s.log.Warn("release found leases no longer ours: they had expired or passed to another term", "keys", lost)
	}
	if left {
		r.left = true // even on error: the member row expires with its leases
	}
	r.startRelease()
}

// applyKeys ends the terms of keys removed from the set.
func (r *setRun) applyKeys() {
	s := r.s
	s.mu.Lock()
	var gone []string
	for k := range r.terms {
		if _, ok := s.keys[k]; !ok {
			gone = append(gone, k)
		}
	}
	s.mu.Unlock()
	r.yield(slices.Values(gone), lifecycle.Stopped)
	r.schedule() // added keys may be free
}
