package pgleader_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// restoring is an in-memory backend whose next acquire, once armed, answers
// with the lease it was given, as won: what a campaign answers when a
// failover restored a row of a term this owner led before later terms that
// the lost rows recorded (a handed-off row the campaign confirms).
type restoring struct {
	*pgleadertest.Backend
	mu      sync.Mutex
	restore *pgleader.Lease
}

func (r *restoring) arm(l pgleader.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.restore = &l
}

func (r *restoring) Campaign(ctx context.Context, key string, c pgleader.Candidate, ttl time.Duration, floor int64) (pgleader.Lease, bool, error) {
	r.mu.Lock()
	l := r.restore
	r.restore = nil
	r.mu.Unlock()
	if l != nil {
		now := time.Now()
		l.AcquiredAt, l.RenewedAt, l.Now, l.ExpiresAt = now, now, now, now.Add(ttl)
		return *l, true, nil
	}
	return r.Backend.Campaign(ctx, key, c, ttl, floor)
}

// TestEarlierOwnTokenNotLedAgain: an elector that led tokens 1 and 2 is
// answered a win of token 1 again (a restored row, with its own start). It
// never leads a token at or below one it led already: it ends the term
// instead and leads next with a new token.
func TestEarlierOwnTokenNotLedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &restoring{Backend: pgleadertest.NewBackend()}
		var mu sync.Mutex
		var tokens []int64
		r := start(t, b, recipeSpec("k"), pgleader.Options{Owner: "c", Lead: func(ctx context.Context, term *pgleader.Term) error {
			mu.Lock()
			tokens = append(tokens, term.Token())
			n := len(tokens)
			mu.Unlock()
			if n == 2 {
				b.arm(pgleader.Lease{Key: "k", Holder: "c", Token: 1})
			}
			if n <= 2 {
				return nil // finished: the elector campaigns again
			}
			return untilEnding(ctx, term)
		}})
		time.Sleep(10 * time.Second)
		synctest.Wait()
		r.stop(t)

		mu.Lock()
		defer mu.Unlock()
		if len(tokens) < 3 {
			t.Fatalf("terms led: tokens %v; want at least 3", tokens)
		}
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("terms led: tokens %v; token %d led after %d", tokens, tokens[i], tokens[i-1])
			}
		}
	})
}
