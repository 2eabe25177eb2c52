// Package racetest races candidates for one free lease and checks the
// round: the check that pgleader's backend suite (backendtest, one backend
// for every candidate) and its PostgreSQL tests (a session per candidate)
// share.
package racetest

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

// Owner is candidate i's owner name.
func Owner(i int) string { return fmt.Sprintf("c%d", i) }

type result struct {
	lease pgleader.Lease
	won   bool
	err   error
}

// Round has every candidate i acquire key, free when it is called, as
// Owner(i) on backends[i], all at once, with ttl, and checks the outcome.
// Exactly one candidate wins; when expiring says ttl may run out during
// the round (short leases on a busy machine), later candidates rightly win
// once the lease before theirs expired, each no earlier than that expiry.
// Every winner draws *next and the next ones in turn, so tokens are dense:
// a lost race consumes none. Every loser is told a winner of this round.
// Round advances *next and returns the last winner, for the caller to
// release or let expire.
func Round(t testing.TB, round int, backends []pgleader.Backend, key string, ttl time.Duration, expiring bool, next *int64) (string, pgleader.Lease) {
	t.Helper()
	ctx := t.Context()
	results := make([]result, len(backends))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, b := range backends {
		wg.Go(func() {
			<-start
			l, won, err := b.Campaign(ctx, key, pgleader.Candidate{Owner: Owner(i)}, ttl, 0)
			results[i] = result{l, won, err}
		})
	}
	close(start)
	wg.Wait()

	var winners []int
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("round %d, candidate %d: %v", round, i, r.err)
		}
		if r.won {
			winners = append(winners, i)
		}
	}
	if len(winners) == 0 {
		t.Fatalf("round %d: nobody won a free lease", round)
	}
	if len(winners) > 1 && !expiring {
		t.Fatalf("round %d: candidates %v all won a lease of %v", round, winners, ttl)
	}
	slices.SortFunc(winners, func(a, b int) int { return cmp.Compare(results[a].lease.Token, results[b].lease.Token) })
	byToken := map[int64]int{}
	for j, i := range winners {
		l := results[i].lease
		if l.Token != *next {
			t.Fatalf("round %d: a winner drew token %d, want %d (dense, strictly increasing)", round, l.Token, *next)
		}
		if j > 0 && l.AcquiredAt.Before(results[winners[j-1]].lease.ExpiresAt) {
			t.Fatalf("round %d: candidate %d won at %v, before the lease of candidate %d expired at %v",
				round, i, l.AcquiredAt, winners[j-1], results[winners[j-1]].lease.ExpiresAt)
		}
		byToken[l.Token] = i
		*next++
	}
	for i, r := range results {
		if w, ok := byToken[r.lease.Token]; !r.won && (!ok || r.lease.Holder != Owner(w)) {
			t.Fatalf("round %d: candidate %d was told holder %q, token %d; not a winner of this round",
				round, i, r.lease.Holder, r.lease.Token)
		}
	}
	last := winners[len(winners)-1]
	return Owner(last), results[last].lease
}
