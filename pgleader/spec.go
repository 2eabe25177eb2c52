package pgleader

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pgleader/pgleader/internal/hook"
	"github.com/pgleader/pgleader/internal/lifecycle"
)

// DefaultTTL is the lease TTL of a Spec that leaves TTL zero.
const DefaultTTL = 6 * time.Second

// The bounds a Spec is held to. Below them an elector floods the database
// and its log without failing over any faster (a TTL of 1ms campaigns
// hundreds of times a second); above them durations stop meaning a lease.
const (
	// MinTTL and MaxTTL bound Spec.TTL.
	MinTTL = 100 * time.Millisecond
	MaxTTL = 24 * time.Hour
	// MinInterval is the shortest RenewEvery and CampaignEvery: each
	// is a statement to the database.
	MinInterval = 5 * time.Millisecond
)

// Spec is the timing of one key's leadership. The zero value of each
// duration means its default, derived from TTL so that the recipe's spec
// comes out of TTL alone: with the default TTL of 6s the defaults are
// RenewEvery 2s, CampaignEvery 500ms, Margin 500ms, YieldGrace 1s and
// ReleaseTimeout 500ms.
//
// A term's timeline is measured from s, the local monotonic instant at which
// the last successful acquire or renew statement was sent:
//
//	safe end  S = s + TTL - Margin
//	cancel    C = S - ReleaseTimeout
//	yield     Y = C - YieldGrace
//
// RenewEvery + YieldGrace + ReleaseTimeout + Margin < TTL is required, so a
// healthy term always renews before it would be told to yield.
type Spec struct {
	// Key names the work; 1 to MaxKeyLen bytes. Required.
	Key string
	// TTL is how long an acquire or renew holds the lease on the database
	// clock, from MinTTL to MaxTTL. Default DefaultTTL.
	TTL time.Duration
	// RenewEvery is the interval between renewals, at least MinInterval.
	// Default TTL/3.
	RenewEvery time.Duration
	// CampaignEvery is the interval between campaigns while another
	// replica leads, at least MinInterval and at most TTL. Default TTL/12.
	CampaignEvery time.Duration
	// Margin absorbs clock-rate drift and scheduling delay between the
	// local clock and the database's. Default TTL/12.
	Margin time.Duration
	// YieldGrace is how long the body has, after Live turns false, before
	// its context is cancelled. Default TTL/6.
	YieldGrace time.Duration
	// ReleaseTimeout bounds the body's unwind after cancellation and the
	// release statement. Default TTL/12.
	ReleaseTimeout time.Duration
	// RequireFenceAdvance makes New fail unless the backend can move its
	// token counter up (Abilities.Advance) and Options.FenceFloor is set,
	// so a lock backend that lost its data cannot silently restart its
	// tokens below the store's fence.
	RequireFenceAdvance bool
}

// withDefaults returns s with every zero duration replaced by its default.
func (s Spec) withDefaults() Spec {
	if s.TTL == 0 {
		s.TTL = DefaultTTL
	}
	def := func(d *time.Duration, div time.Duration) {
		if *d == 0 {
			*d = s.TTL / div
		}
	}
	def(&s.RenewEvery, 3)
	def(&s.CampaignEvery, 12)
	def(&s.Margin, 12)
	def(&s.YieldGrace, 6)
	def(&s.ReleaseTimeout, 12)
	return s
}

// Validate reports every rule s breaks once its defaults are filled in. The
// error matches ErrInvalid and names the fields involved.
func (s Spec) Validate() error {
	_, err := s.resolve()
	return err
}

func (s Spec) resolve() (Spec, error) {
	s = s.withDefaults()
	var errs []error
	if err := CheckKey(s.Key); err != nil {
		errs = append(errs, fmt.Errorf("Spec.Key: %w", err))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"TTL", s.TTL}, {"RenewEvery", s.RenewEvery}, {"CampaignEvery", s.CampaignEvery},
		{"Margin", s.Margin}, {"YieldGrace", s.YieldGrace}, {"ReleaseTimeout", s.ReleaseTimeout},
	} {
		if f.d < 0 {
			errs = append(errs, invalidf("Spec.%s must be positive (zero means the default), got %v", f.name, f.d))
		}
	}
	if len(errs) == 0 && (s.TTL < MinTTL || s.TTL > MaxTTL) {
		errs = append(errs, invalidf("Spec.TTL must be between %v and %v, got %v", MinTTL, MaxTTL, s.TTL))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"RenewEvery", s.RenewEvery}, {"CampaignEvery", s.CampaignEvery}} {
		if f.d > 0 && f.d < MinInterval {
			errs = append(errs, invalidf("Spec.%s must be at least %v (each is a statement), got %v", f.name, MinInterval, f.d))
		}
	}
	if len(errs) == 0 && s.CampaignEvery > s.TTL {
		errs = append(errs, invalidf("Spec.CampaignEvery (%v) must not exceed TTL (%v)", s.CampaignEvery, s.TTL))
	}
	// Each part at most MaxTTL first, so their sum cannot overflow.
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"RenewEvery", s.RenewEvery}, {"YieldGrace", s.YieldGrace}, {"ReleaseTimeout", s.ReleaseTimeout}, {"Margin", s.Margin}} {
		if f.d > MaxTTL {
			errs = append(errs, invalidf("Spec.%s must be at most %v, got %v", f.name, MaxTTL, f.d))
		}
	}
	if sum := s.RenewEvery + s.YieldGrace + s.ReleaseTimeout + s.Margin; len(errs) == 0 && sum >= s.TTL {
		errs = append(errs, invalidf(
			"Spec: RenewEvery (%v) + YieldGrace (%v) + ReleaseTimeout (%v) + Margin (%v) = %v must be less than TTL (%v)",
			s.RenewEvery, s.YieldGrace, s.ReleaseTimeout, s.Margin, sum, s.TTL))
	}
	return s, errors.Join(errs...)
}

// timing is s's durations for the term machine (internal/lifecycle), with
// the fault checker's switch internal/hook.NoYield read once, as a term
// starts.
func (s Spec) timing() *lifecycle.Timing {
	return &lifecycle.Timing{TTL: s.TTL, RenewEvery: s.RenewEvery, CampaignEvery: s.CampaignEvery, Margin: s.Margin,
		YieldGrace: s.YieldGrace, ReleaseTimeout: s.ReleaseTimeout, NoYield: hook.NoYield.Load()}
}

// yieldAt is the yield instant of a term won by a statement sent at sent:
// a campaign's answer must come before it.
func (s Spec) yieldAt(sent time.Time) time.Time {
	_, _, y := s.timing().Timeline(sent, s.TTL)
	return y
}

// handOffKeep is how long a handed-off term must have left for its
// successor to believe it on a read: TTL less RenewEvery, what any term has
// left when its renewal is due, so the first renewal of a term believed on
// a read has as long to succeed as every later one. New refuses a Spec in
// which it is not longer than Margin + ReleaseTimeout + YieldGrace, so such
// a term never starts past its yield instant.
func (s Spec) handOffKeep() time.Duration { return s.TTL - s.RenewEvery }

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
