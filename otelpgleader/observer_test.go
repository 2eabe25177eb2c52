package otelpgleader_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/pgleader/pgleader/otelpgleader"
	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func recipeSpec(key string) pgleader.Spec {
	return pgleader.Spec{Key: key, TTL: 6 * time.Second, RenewEvery: 2 * time.Second,
		CampaignEvery: 500 * time.Millisecond, Margin: 500 * time.Millisecond,
		YieldGrace: time.Second, ReleaseTimeout: 500 * time.Millisecond}
}

// metrics reads the instruments through a manual reader.
type metrics struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
}

func (m metrics) collect() map[string]metricdata.Aggregation {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		m.t.Fatal(err)
	}
	out := make(map[string]metricdata.Aggregation)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelpgleader.ScopeName {
			m.t.Errorf("scope %q, want %q", sm.Scope.Name, otelpgleader.ScopeName)
		}
		for _, mt := range sm.Metrics {
			out[mt.Name] = mt.Data
		}
	}
	return out
}

// int64Value returns the value of name's data point with exactly attrs, and
// whether there is one.
func (m metrics) int64Value(name string, attrs ...attribute.KeyValue) (int64, bool) {
	m.t.Helper()
	want := attribute.NewSet(attrs...)
	var points []metricdata.DataPoint[int64]
	switch d := m.collect()[name].(type) {
	case metricdata.Gauge[int64]:
		points = d.DataPoints
	case metricdata.Sum[int64]:
		if !d.IsMonotonic {
			m.t.Errorf("%s is not monotonic", name)
		}
		points = d.DataPoints
	case nil:
		return 0, false
	default:
		m.t.Fatalf("%s is %T", name, d)
	}
	for _, p := range points {
		if p.Attributes.Equals(&want) {
			return p.Value, true
		}
	}
	return 0, false
}

func (m metrics) expect(name string, want int64, attrs ...attribute.KeyValue) {
	m.t.Helper()
	got, ok := m.int64Value(name, attrs...)
	if !ok || got != want {
		m.t.Errorf("%s%v = %d (present %v), want %d", name, attrs, got, ok, want)
	}
}

// renewals returns the renew histogram's count and sum for an outcome.
func (m metrics) renewals(attrs ...attribute.KeyValue) (uint64, float64) {
	m.t.Helper()
	h, ok := m.collect()[otelpgleader.MetricRenewDuration].(metricdata.Histogram[float64])
	if !ok {
		return 0, 0
	}
	want := attribute.NewSet(attrs...)
	for _, p := range h.DataPoints {
		if p.Attributes.Equals(&want) {
			return p.Count, p.Sum
		}
	}
	return 0, 0
}

func newObserver(t *testing.T, opts ...otelpgleader.Option) (*otelpgleader.Observer, metrics) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := otelpgleader.New(append([]otelpgleader.Option{otelpgleader.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = obs.Close() })
	return obs, metrics{t: t, reader: reader}
}

func idle(ctx context.Context, _ *pgleader.Term) error {
	<-ctx.Done()
	return nil
}

// TestObserver drives an elector on the in-memory backend through every way
// a term ends but expiring, on synctest's clock, and reads each instrument.
//
// Every backend operation takes 10ms. Term 1 (t=0) is refused by Claim;
// term 2 (t=0.52s) renews at 2.52s and finishes at 3.53s; term 3 (t=4.04s)
// renews at 6.04s, but the lease data was dropped at 5s, so it is lost.
// The counter went with the data: the campaigns from 6.55s on draw tokens 1
// to 3 again, and the elector ends each at once without leading it (it
// never leads a token at or below the last it led); term 4 draws token 4
// at about 8.1s and is stopped at 8.5s.
func TestObserver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs, m := newObserver(t)
		b := pgleadertest.NewBackend()
		b.SetLatency(10 * time.Millisecond)
		terms := 0
		claim := func(context.Context, *pgleader.Term) (bool, error) {
			terms++
			return terms > 1, nil
		}
		lead := func(ctx context.Context, t *pgleader.Term) error {
			if t.Token() == 2 {
				time.Sleep(3 * time.Second)
				return nil
			}
			return idle(ctx, t)
		}
		el, err := pgleader.New(b, recipeSpec("k"), pgleader.Options{
			Owner: "a", Lead: lead, Claim: claim, Logger: quiet, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx) }()

		key, owner := otelpgleader.AttrKey.String("k"), otelpgleader.AttrOwner.String("a")
		reason := func(r pgleader.EndReason) attribute.KeyValue {
			return otelpgleader.AttrReason.String(r.String())
		}
		outcome := otelpgleader.AttrOutcome.String

		if _, ok := m.int64Value(otelpgleader.MetricLeader, key, owner); ok {
			t.Error("the leader gauge reports an elector before it was observed")
		}

		time.Sleep(5 * time.Second)
		synctest.Wait()
		m.expect(otelpgleader.MetricLeader, 1, key, owner)
		m.expect(otelpgleader.MetricToken, 3, key, owner)
		m.expect(otelpgleader.MetricTermsStarted, 2, key, owner) // the refused term never started
		m.expect(otelpgleader.MetricTermsEnded, 1, key, owner, reason(pgleader.ReasonRefused))
		m.expect(otelpgleader.MetricTermsEnded, 1, key, owner, reason(pgleader.ReasonFinished))
		m.expect(otelpgleader.MetricClaimsRefused, 1, key, owner)
		if n, sum := m.renewals(key, owner, outcome("ok")); n != 1 || sum != 0.01 {
			t.Errorf("ok renewals: count %d sum %v, want 1 and 0.01s", n, sum)
		}

		b.DropData()
		time.Sleep(1300 * time.Millisecond) // t=6.3s: term 3 lost at 6.05s
		synctest.Wait()
		m.expect(otelpgleader.MetricLeader, 0, key, owner)
		m.expect(otelpgleader.MetricToken, 3, key, owner)
		m.expect(otelpgleader.MetricTermsEnded, 1, key, owner, reason(pgleader.ReasonLost))
		if n, _ := m.renewals(key, owner, outcome("lost")); n != 1 {
			t.Errorf("lost renewals: count %d, want 1", n)
		}
		if n, _ := m.renewals(key, owner, outcome("ok")); n != 1 {
			t.Errorf("ok renewals: count %d, want still 1", n)
		}

		time.Sleep(2200 * time.Millisecond) // t=8.5s
		synctest.Wait()
		m.expect(otelpgleader.MetricLeader, 1, key, owner)
		m.expect(otelpgleader.MetricToken, 4, key, owner)
		m.expect(otelpgleader.MetricTermsStarted, 3, key, owner)

		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		m.expect(otelpgleader.MetricLeader, 0, key, owner)
		m.expect(otelpgleader.MetricToken, 4, key, owner)
		m.expect(otelpgleader.MetricTermsEnded, 1, key, owner, reason(pgleader.ReasonStopped))
		m.expect(otelpgleader.MetricClaimsRefused, 1, key, owner)
		if _, ok := m.int64Value(otelpgleader.MetricTermsEnded, key, owner, reason(pgleader.ReasonExpiring)); ok {
			t.Error("a term ended as expiring")
		}
	})
}

// TestWithoutOwner runs two electors of one key in one process: the gauges
// merge them under the key alone, and the counters add up.
func TestWithoutOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs, m := newObserver(t, otelpgleader.WithoutOwner())
		b := pgleadertest.NewBackend()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 2)
		for _, owner := range []string{"a", "b"} {
			lead := func(ctx context.Context, t *pgleader.Term) error {
				select {
				case <-ctx.Done():
				case <-time.After(time.Second): // hand over to the other
				}
				return nil
			}
			el, err := pgleader.New(b, recipeSpec("k"), pgleader.Options{Owner: owner, Lead: lead, Logger: quiet, Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			go func() { done <- el.Run(ctx) }()
			time.Sleep(10 * time.Millisecond) // a wins the first term
		}
		key := otelpgleader.AttrKey.String("k")

		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		m.expect(otelpgleader.MetricLeader, 1, key)
		m.expect(otelpgleader.MetricToken, 2, key)
		m.expect(otelpgleader.MetricTermsStarted, 2, key)
		m.expect(otelpgleader.MetricTermsEnded, 1, key, otelpgleader.AttrReason.String("finished"))

		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		m.expect(otelpgleader.MetricLeader, 0, key)
		if _, ok := m.int64Value(otelpgleader.MetricLeader, key, otelpgleader.AttrOwner.String("a")); ok {
			t.Error("an owner attribute was recorded")
		}
	})
}

func TestClose(t *testing.T) {
	obs, m := newObserver(t)
	obs.Observe(pgleader.Observation{Kind: pgleader.ObserveTermStarted, Key: "k", Owner: "a", Token: 7})
	m.expect(otelpgleader.MetricToken, 7, otelpgleader.AttrKey.String("k"), otelpgleader.AttrOwner.String("a"))
	if err := obs.Close(); err != nil {
		t.Fatal(err)
	}
	if err := obs.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, ok := m.int64Value(otelpgleader.MetricToken, otelpgleader.AttrKey.String("k"), otelpgleader.AttrOwner.String("a")); ok {
		t.Error("the token gauge still reports after Close")
	}
	m.expect(otelpgleader.MetricTermsStarted, 1, otelpgleader.AttrKey.String("k"), otelpgleader.AttrOwner.String("a"))
}

// TestKeysHeld: a Set's terms are counted in pgleader.keys.held per owner.
func TestKeysHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs, m := newObserver(t)
		b := pgleadertest.NewBackend()
		s, err := pgleader.NewSet(b, recipeSpec("set"), []string{"a", "b", "c"},
			pgleader.SetOptions{Owner: "o", Lead: idle, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- s.Run(ctx) }()
		time.Sleep(time.Second)
		synctest.Wait()
		m.expect(otelpgleader.MetricKeysHeld, 3, otelpgleader.AttrOwner.String("o"))
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		m.expect(otelpgleader.MetricKeysHeld, 0, otelpgleader.AttrOwner.String("o"))
	})
}

// TestObserverJobs: a job runner's observations count runs by outcome and
// skips by why.
func TestObserverJobs(t *testing.T) {
	obs, m := newObserver(t)
	run := func(err error) pgleader.Observation {
		return pgleader.Observation{Kind: pgleader.ObserveJobRun, Key: "report", Owner: "a", Err: err, Took: time.Second}
	}
	skip := func(missed bool) pgleader.Observation {
		return pgleader.Observation{Kind: pgleader.ObserveJobSkipped, Key: "report", Owner: "a", Missed: missed}
	}
	for _, o := range []pgleader.Observation{run(nil), run(nil), run(errors.New("no")), skip(false), skip(false), skip(false), skip(true)} {
		obs.Observe(o)
	}
	key, owner := otelpgleader.AttrKey.String("report"), otelpgleader.AttrOwner.String("a")
	m.expect(otelpgleader.MetricJobRuns, 2, key, owner, otelpgleader.AttrOutcome.String("ok"))
	m.expect(otelpgleader.MetricJobRuns, 1, key, owner, otelpgleader.AttrOutcome.String("failed"))
	m.expect(otelpgleader.MetricJobSkips, 3, key, owner, otelpgleader.AttrWhy.String("elsewhere"))
	m.expect(otelpgleader.MetricJobSkips, 1, key, owner, otelpgleader.AttrWhy.String("missed"))
}
