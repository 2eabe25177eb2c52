package pgleader_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// recipeSpec is the recipe's spec: TTL 6s, renew 2s, campaign 500ms, margin
// 500ms, grace 1s, release 500ms.
func recipeSpec(key string) pgleader.Spec {
	return pgleader.Spec{
		Key: key, TTL: 6 * time.Second, RenewEvery: 2 * time.Second,
		CampaignEvery: 500 * time.Millisecond, Margin: 500 * time.Millisecond,
		YieldGrace: time.Second, ReleaseTimeout: 500 * time.Millisecond,
		RequireFenceAdvance: true,
	}
}

func TestSpecValid(t *testing.T) {
	t.Parallel()
	if err := recipeSpec("digest-publisher").Validate(); err != nil {
		t.Fatalf("the recipe's spec: %v", err)
	}
	// Defaults derived from the default TTL are the recipe's spec.
	el, err := pgleader.New(pgleadertest.NewBackend(), pgleader.Spec{Key: "k", RequireFenceAdvance: true},
		pgleader.Options{Owner: "a", Lead: idle, FenceFloor: zeroFloor})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := el.Spec(), recipeSpec("k"); got != want {
		t.Fatalf("defaults = %+v, want %+v", got, want)
	}
	// Just under the limit is valid.
	s := recipeSpec("k")
	s.Margin = 2500*time.Millisecond - time.Nanosecond
	if err := s.Validate(); err != nil {
		t.Fatalf("sum 1ns under TTL: %v", err)
	}
}

func TestSpecInvalid(t *testing.T) {
	t.Parallel()
	with := func(f func(*pgleader.Spec)) pgleader.Spec {
		s := recipeSpec("k")
		f(&s)
		return s
	}
	cases := []struct {
		name string
		spec pgleader.Spec
		want []string // every fragment must be in the error
	}{
		{"empty key", with(func(s *pgleader.Spec) { s.Key = "" }), []string{"Spec.Key", "must not be empty"}},
		{"long key", with(func(s *pgleader.Spec) { s.Key = strings.Repeat("x", 201) }), []string{"Spec.Key", "limit is 200"}},
		{"negative TTL", with(func(s *pgleader.Spec) { s.TTL = -time.Second }), []string{"Spec.TTL", "positive"}},
		{"sub-millisecond TTL", with(func(s *pgleader.Spec) { s.TTL = time.Microsecond }), []string{"Spec.TTL", "between 100ms and 24h0m0s"}},
		{"1ms TTL with defaults", pgleader.Spec{Key: "k", TTL: time.Millisecond}, []string{"Spec.TTL", "between 100ms and 24h0m0s, got 1ms"}},
		{"day-long TTL", with(func(s *pgleader.Spec) { s.TTL = 25 * time.Hour }), []string{"Spec.TTL", "got 25h0m0s"}},
		{"overflowing RenewEvery", with(func(s *pgleader.Spec) { s.RenewEvery = 2562047 * time.Hour }), []string{"Spec.RenewEvery must be at most 24h0m0s, got 2562047h0m0s"}},
		{"overflowing sum", with(func(s *pgleader.Spec) {
			s.TTL = 24 * time.Hour
			s.RenewEvery, s.YieldGrace, s.ReleaseTimeout, s.Margin = 1<<62, 1<<62, 1<<62, 1<<62
		}), []string{"Spec.RenewEvery must be at most", "Spec.YieldGrace must be at most", "Spec.ReleaseTimeout must be at most", "Spec.Margin must be at most"}},
		{"1ns RenewEvery", with(func(s *pgleader.Spec) { s.RenewEvery = 1 }), []string{"Spec.RenewEvery must be at least 5ms", "got 1ns"}},
		{"1ns CampaignEvery", with(func(s *pgleader.Spec) { s.CampaignEvery = 1 }), []string{"Spec.CampaignEvery must be at least 5ms", "got 1ns"}},
		{"CampaignEvery over TTL", with(func(s *pgleader.Spec) { s.CampaignEvery = time.Minute }), []string{"Spec.CampaignEvery (1m0s) must not exceed TTL (6s)"}},
		{"negative RenewEvery", with(func(s *pgleader.Spec) { s.RenewEvery = -1 }), []string{"Spec.RenewEvery", "positive"}},
		{"negative CampaignEvery", with(func(s *pgleader.Spec) { s.CampaignEvery = -time.Millisecond }), []string{"Spec.CampaignEvery", "positive"}},
		{"negative Margin", with(func(s *pgleader.Spec) { s.Margin = -time.Millisecond }), []string{"Spec.Margin", "positive"}},
		{"negative YieldGrace", with(func(s *pgleader.Spec) { s.YieldGrace = -time.Second }), []string{"Spec.YieldGrace", "positive"}},
		{"negative ReleaseTimeout", with(func(s *pgleader.Spec) { s.ReleaseTimeout = -time.Second }), []string{"Spec.ReleaseTimeout", "positive"}},
		{"sum equals TTL", with(func(s *pgleader.Spec) { s.Margin = 2500 * time.Millisecond }),
			[]string{"RenewEvery (2s) + YieldGrace (1s) + ReleaseTimeout (500ms) + Margin (2.5s) = 6s must be less than TTL (6s)"}},
		{"RenewEvery too long", with(func(s *pgleader.Spec) { s.RenewEvery = 5 * time.Second }), []string{"RenewEvery (5s)", "less than TTL"}},
		{"YieldGrace too long", with(func(s *pgleader.Spec) { s.YieldGrace = 4 * time.Second }), []string{"YieldGrace (4s)", "less than TTL"}},
		{"ReleaseTimeout too long", with(func(s *pgleader.Spec) { s.ReleaseTimeout = 10 * time.Second }), []string{"ReleaseTimeout (10s)", "less than TTL"}},
		{"TTL too short for defaults", pgleader.Spec{Key: "k", TTL: time.Second, RenewEvery: 2 * time.Second}, []string{"RenewEvery (2s)", "TTL (1s)"}},
		{"short TTL, rest default elsewhere", with(func(s *pgleader.Spec) { s.TTL = 3 * time.Second }), []string{"= 4s must be less than TTL (3s)"}},
		{"two rules at once", with(func(s *pgleader.Spec) { s.Key = ""; s.Margin = -1 }), []string{"Spec.Key", "Spec.Margin"}},
	}
	for _, c := range cases {
		err := c.spec.Validate()
		if !errors.Is(err, pgleader.ErrInvalid) {
			t.Errorf("%s: Validate() = %v, want ErrInvalid", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
		if _, err := pgleader.New(pgleadertest.NewBackend(), c.spec, pgleader.Options{Owner: "a", Lead: idle}); !errors.Is(err, pgleader.ErrInvalid) {
			t.Errorf("%s: New accepted the spec: %v", c.name, err)
		}
	}
}

func zeroFloor(context.Context) (int64, error) { return 0, nil }

func TestNewOptions(t *testing.T) {
	t.Parallel()
	b := pgleadertest.NewBackend()
	spec := recipeSpec("k")
	cases := []struct {
		name    string
		backend pgleader.Backend
		opts    pgleader.Options
		want    error
		text    string
	}{
		{"no Lead", b, pgleader.Options{Owner: "a"}, pgleader.ErrInvalid, "Options.Lead is required"},
		{"long owner", b, pgleader.Options{Owner: strings.Repeat("o", 201), Lead: idle}, pgleader.ErrInvalid, "Options.Owner"},
		{"nil backend", nil, pgleader.Options{Owner: "a", Lead: idle}, pgleader.ErrInvalid, "nil backend"},
		{"cannot advance", b.WithoutAdvance(), pgleader.Options{Owner: "a", Lead: idle, FenceFloor: zeroFloor}, pgleader.ErrAdvanceUnsupported, "RequireFenceAdvance"},
		{"advance without a floor", b, pgleader.Options{Owner: "a", Lead: idle}, pgleader.ErrInvalid, "Spec.RequireFenceAdvance is set but Options.FenceFloor is nil"},
	}
	for _, c := range cases {
		_, err := pgleader.New(c.backend, spec, c.opts)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: New() = %v; want %v containing %q", c.name, err, c.want, c.text)
		}
	}
	spec.RequireFenceAdvance = false
	el, err := pgleader.New(b.WithoutAdvance(), spec, pgleader.Options{Lead: idle})
	if err != nil {
		t.Fatalf("without RequireFenceAdvance a backend that cannot advance is accepted: %v", err)
	}
	if el.Status().Owner == "" {
		t.Fatal("default owner is empty")
	}
}
