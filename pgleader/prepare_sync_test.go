package pgleader

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var _ Backend = (*preparing)(nil)

// preparing is a backend that grants every campaign a new term, renews
// every term, and records when its hand-off is prepared.
type preparing struct {
	mu       sync.Mutex
	token    int64
	prepared []time.Time
}

func (b *preparing) grant(key, owner string, ttl time.Duration) (Lease, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.token++
	now := time.Now()
	return Lease{Key: key, Holder: owner, Token: b.token, AcquiredAt: now, ExpiresAt: now.Add(ttl), Now: now}, true, nil
}

func (b *preparing) Release(context.Context, string, string, int64) (bool, error) { return true, nil }

func (b *preparing) Lease(context.Context, string) (Lease, error) {
	return Lease{}, errors.New("unused")
}

func (b *preparing) RenewTerm(_ context.Context, _, _ string, _ int64, ttl, _ time.Duration) (time.Time, bool, error) {
	return time.Now().Add(ttl), false, nil
}

func (b *preparing) Resign(context.Context, string, int64) (Lease, bool, error) {
	return Lease{}, false, nil
}

func (b *preparing) Campaign(_ context.Context, key string, c Candidate, ttl time.Duration, _ int64) (Lease, bool, error) {
	return b.grant(key, c.Owner, ttl)
}

func (b *preparing) HandOff(context.Context, string, string, int64, string) (bool, string, error) {
	return true, "", nil
}

func (b *preparing) Transfer(context.Context, string, string) (Lease, bool, error) {
	return Lease{}, false, nil
}

func (b *preparing) Candidates(context.Context, string) ([]Candidate, error) { return nil, nil }

func (b *preparing) Withdraw(context.Context, string, string) error { return nil }

func (b *preparing) Abilities() Abilities {
	return Abilities{Values: true, Candidates: true, Steer: b, PrepareHandOff: b.prepare}
}

func (b *preparing) Advance(context.Context, string, int64) (bool, int64, error) { return true, 0, nil }

func (b *preparing) prepare(context.Context, time.Duration) error {
	b.mu.Lock()
	b.prepared = append(b.prepared, time.Now())
	b.mu.Unlock()
	return nil
}

// TestHandOffPreparedAfterFirstWrites: a term rehearses its hand-off
// rehearseAfter after it starts (half of RenewEvery when that is shorter),
// after Claim, so the rehearsal does not compete with the term's first
// writes; a term that ends sooner is not rehearsed at all.
func TestHandOffPreparedAfterFirstWrites(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		name       string
		renewEvery time.Duration
		wait       time.Duration
	}{
		{"default", 2 * time.Second, rehearseAfter},
		{"short RenewEvery", 50 * time.Millisecond, 25 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &preparing{}
				var claimed time.Time
				terms := 0
				spec := Spec{Key: "k", TTL: 6 * time.Second, RenewEvery: c.renewEvery}
				el, err := New(b, spec, Options{Owner: "a", Logger: quiet,
					Claim: func(context.Context, *Term) (bool, error) {
						claimed = time.Now()
						return true, nil
					},
					Lead: func(ctx context.Context, term *Term) error {
						terms++
						if terms == 1 {
							return nil // ends at once: nothing to rehearse for
						}
						<-ctx.Done()
						return nil
					}})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- el.Run(ctx) }()
				time.Sleep(time.Second)
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				b.mu.Lock()
				defer b.mu.Unlock()
				if terms != 2 || len(b.prepared) != 1 {
					t.Fatalf("%d terms, %d rehearsals; want 2 terms and 1 rehearsal (none for the term that ended at once)", terms, len(b.prepared))
				}
				if got := b.prepared[0].Sub(claimed); got != c.wait {
					t.Fatalf("the rehearsal came %v after the second term's Claim; want %v", got, c.wait)
				}
			})
		})
	}
}
