package otelpgleader

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgleader/pgleader/pgleader"
)

// ScopeName is the instrumentation scope of the meter the Observer uses.
const ScopeName = "github.com/pgleader/pgleader/otelpgleader"

// The instruments' names.
const (
	MetricLeader        = "pgleader.leader"
	MetricToken         = "pgleader.token"
	MetricTermsStarted  = "pgleader.terms.started"
	MetricTermsEnded    = "pgleader.terms.ended"
	MetricRenewDuration = "pgleader.renew.duration"
	MetricClaimsRefused = "pgleader.claims.refused"
	// MetricKeysHeld is the number of keys each owner leads (a Set's keys,
	// or its Electors'), from the terms observed.
	MetricKeysHeld = "pgleader.keys.held"
	// MetricJobRuns counts the scheduled runs this replica ran
	// (pgleader.RunJob), by outcome: ok or failed.
	MetricJobRuns = "pgleader.job.runs"
	// MetricJobSkips counts the scheduled instants this replica did not
	// run, by why: elsewhere (another replica ran or runs it) or missed
	// (this replica passed it over: busy, late or cut off; another may have
	// run it).
	MetricJobSkips = "pgleader.job.skips"
)

// The attribute keys.
const (
	AttrKey     = attribute.Key("key")
	AttrOwner   = attribute.Key("owner")
	AttrReason  = attribute.Key("reason")  // on pgleader.terms.ended
	AttrOutcome = attribute.Key("outcome") // on pgleader.renew.duration: ok, lost or error; on pgleader.job.runs: ok or failed
	AttrWhy     = attribute.Key("why")     // on pgleader.job.skips: elsewhere or missed
)

// renewBuckets are the histogram's bucket boundaries in seconds: a renewal
// is one short statement, so the SDK's defaults (0 to 10000) would put every
// sample in the first bucket.
var renewBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Option configures New.
type Option func(*config)

type config struct {
	provider metric.MeterProvider
	noOwner  bool
}

// WithMeterProvider sets where the instruments are created. Default: the
// global provider, otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.provider = mp }
}

// WithoutOwner leaves the owner attribute out of every instrument, so that a
// key's series survive restarts of its replicas. The gauges then report, per
// key, the largest value among the electors of this process.
func WithoutOwner() Option {
	return func(c *config) { c.noOwner = true }
}

// Observer is a pgleader.Observer that records OpenTelemetry metrics. Create
// it with New. It is safe for concurrent use and may observe any number of
// electors.
type Observer struct {
	noOwner bool

	started metric.Int64Counter
	ended   metric.Int64Counter
	renew   metric.Float64Histogram
	refused metric.Int64Counter
	runs    metric.Int64Counter
	skips   metric.Int64Counter
	reg     metric.Registration

	mu     sync.Mutex
	states map[elector]*state
}

var _ pgleader.Observer = (*Observer)(nil)

type elector struct{ key, owner string }

// state is what the gauges report for one elector, and its attribute sets,
// built once.
type state struct {
	leading bool
	token   int64
	attrs   attribute.Set
	renewOK metric.MeasurementOption
	renewLo metric.MeasurementOption
	renewEr metric.MeasurementOption
	base    metric.MeasurementOption
}

// New creates the instruments and returns an Observer recording to them.
// Call Close when done to unregister the gauges' callback.
func New(opts ...Option) (*Observer, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.provider == nil {
		c.provider = otel.GetMeterProvider()
	}
	m := c.provider.Meter(ScopeName)
	o := &Observer{noOwner: c.noOwner, states: make(map[elector]*state)}

	leader, err1 := m.Int64ObservableGauge(MetricLeader, metric.WithUnit("{leader}"),
		metric.WithDescription("1 while this replica leads the key (from the term's start until it begins to end), else 0"))
	token, err2 := m.Int64ObservableGauge(MetricToken, metric.WithUnit("{token}"),
		metric.WithDescription("Fencing token of this replica's current or last term of the key"))
	var err3, err4, err5, err6, err7, err9, err10 error
	o.started, err3 = m.Int64Counter(MetricTermsStarted, metric.WithUnit("{term}"),
		metric.WithDescription("Terms this replica won whose claim passed, so the body ran"))
	o.ended, err4 = m.Int64Counter(MetricTermsEnded, metric.WithUnit("{term}"),
		metric.WithDescription("Terms of this replica that are over, by end reason"))
	o.renew, err5 = m.Float64Histogram(MetricRenewDuration, metric.WithUnit("s"),
		metric.WithDescription("Round trip of each lease renewal, by outcome"),
		metric.WithExplicitBucketBoundaries(renewBuckets...))
	o.refused, err6 = m.Int64Counter(MetricClaimsRefused, metric.WithUnit("{claim}"),
		metric.WithDescription("Terms whose Claim hook refused the token or failed"))
	keysHeld, err8 := m.Int64ObservableGauge(MetricKeysHeld, metric.WithUnit("{key}"),
		metric.WithDescription("Keys this replica leads with a live term (for a pgleader.Set, its keys held)"))
	o.runs, err9 = m.Int64Counter(MetricJobRuns, metric.WithUnit("{run}"),
		metric.WithDescription("Scheduled runs of a job this replica ran, by outcome"))
	o.skips, err10 = m.Int64Counter(MetricJobSkips, metric.WithUnit("{instant}"),
		metric.WithDescription("Scheduled instants of a job this replica did not run, by why"))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err8, err9, err10); err != nil {
		return nil, err
	}
	o.reg, err7 = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		o.report(obs, leader, token)
		o.reportHeld(obs, keysHeld)
		return nil
	}, leader, token, keysHeld)
	if err7 != nil {
		return nil, err7
	}
	return o, nil
}

// Close unregisters the gauges' callback; the counters and histogram keep
// working. It is safe to call more than once.
func (o *Observer) Close() error {
	o.mu.Lock()
	reg := o.reg
	o.reg = nil
	o.mu.Unlock()
	if reg == nil {
		return nil
	}
	return reg.Unregister()
}

// Observe implements pgleader.Observer. It records ob without blocking.
func (o *Observer) Observe(ob pgleader.Observation) {
	ctx := context.Background()
	o.mu.Lock()
	s := o.state(ob.Key, ob.Owner)
	switch ob.Kind {
	case pgleader.ObserveTermStarted:
		s.leading, s.token = true, ob.Token
	case pgleader.ObserveTermEnding, pgleader.ObserveTermEnded:
		s.leading = false
	}
	o.mu.Unlock()

	switch ob.Kind {
	case pgleader.ObserveTermStarted:
		o.started.Add(ctx, 1, s.base)
	case pgleader.ObserveTermEnded:
		attrs := append(s.attrs.ToSlice(), AttrReason.String(ob.Reason.String()))
		o.ended.Add(ctx, 1, metric.WithAttributes(attrs...))
	case pgleader.ObserveRenewed:
		outcome := s.renewOK
		switch {
		case errors.Is(ob.Err, pgleader.ErrLost):
			outcome = s.renewLo
		case ob.Err != nil:
			outcome = s.renewEr
		}
		o.renew.Record(ctx, ob.Took.Seconds(), outcome)
	case pgleader.ObserveClaimRefused:
		o.refused.Add(ctx, 1, s.base)
	case pgleader.ObserveJobRun:
		outcome := "ok"
		if ob.Err != nil {
			outcome = "failed"
		}
		o.runs.Add(ctx, 1, metric.WithAttributes(append(s.attrs.ToSlice(), AttrOutcome.String(outcome))...))
	case pgleader.ObserveJobSkipped:
		why := "elsewhere"
		if ob.Missed {
			why = "missed"
		}
		o.skips.Add(ctx, 1, metric.WithAttributes(append(s.attrs.ToSlice(), AttrWhy.String(why))...))
	}
}

// state returns the elector's state, creating it on first sight. o.mu must
// be held.
func (o *Observer) state(key, owner string) *state {
	id := elector{key, owner}
	if s, ok := o.states[id]; ok {
		return s
	}
	kv := []attribute.KeyValue{AttrKey.String(key)}
	if !o.noOwner {
		kv = append(kv, AttrOwner.String(owner))
	}
	attrs := attribute.NewSet(kv...)
	with := func(outcome string) metric.MeasurementOption {
		return metric.WithAttributes(append(attrs.ToSlice(), AttrOutcome.String(outcome))...)
	}
	s := &state{
		attrs:   attrs,
		base:    metric.WithAttributeSet(attrs),
		renewOK: with("ok"),
		renewLo: with("lost"),
		renewEr: with("error"),
	}
	o.states[id] = s
	return s
}

// report observes the gauges. Without owners, electors of one key share an
// attribute set, so their values are merged first: the largest wins.
func (o *Observer) report(obs metric.Observer, leader, token metric.Int64Observable) {
	type values struct{ leading, token int64 }
	merged := make(map[attribute.Distinct]values)
	sets := make(map[attribute.Distinct]attribute.Set)
	o.mu.Lock()
	for _, s := range o.states {
		id := s.attrs.Equivalent()
		v := merged[id]
		if s.leading {
			v.leading = 1
		}
		v.token = max(v.token, s.token)
		merged[id], sets[id] = v, s.attrs
	}
	o.mu.Unlock()
	for id, v := range merged {
		attrs := metric.WithAttributeSet(sets[id])
		obs.ObserveInt64(leader, v.leading, attrs)
		obs.ObserveInt64(token, v.token, attrs)
	}
}

// reportHeld observes, per owner (one series without owners), how many keys
// it leads.
func (o *Observer) reportHeld(obs metric.Observer, keysHeld metric.Int64Observable) {
	held := make(map[string]int64)
	o.mu.Lock()
	for id, s := range o.states {
		owner := id.owner
		if o.noOwner {
			owner = ""
		}
		if _, ok := held[owner]; !ok {
			held[owner] = 0
		}
		if s.leading {
			held[owner]++
		}
	}
	o.mu.Unlock()
	for owner, n := range held {
		if o.noOwner {
			obs.ObserveInt64(keysHeld, n)
			continue
		}
		obs.ObserveInt64(keysHeld, n, metric.WithAttributes(AttrOwner.String(owner)))
	}
}
