package pgleader_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// releaseClock records when the first ReleaseSet was sent.
type releaseClock struct {
	*pgleadertest.Backend
	at atomic.Int64
}

func (c *releaseClock) ReleaseSet(ctx context.Context, set, owner string, keys []string, tokens []int64, handOff []bool, leave bool) ([]bool, error) {
	c.at.CompareAndSwap(0, time.Now().UnixNano())
	return c.Backend.ReleaseSet(ctx, set, owner, keys, tokens, handOff, leave)
}

// BenchmarkSetStopLogged: a Set of 33,333 keys (one replica's share of
// 100,000) with a text logger at info level, writing to io.Discard or to a
// file (as a service's stderr often is), from Run's cancellation to its
// release being sent, in memory (ms/stop-to-release).
func BenchmarkSetStopLogged(b *testing.B) {
	const n = 33333
	for _, to := range []string{"discard", "file"} {
		b.Run(to, func(b *testing.B) {
			var w io.Writer = io.Discard
			if to == "file" {
				f, err := os.Create(filepath.Join(b.TempDir(), "log"))
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				w = f
			}
			for b.Loop() {
				b.StopTimer()
				be := &releaseClock{Backend: pgleadertest.NewBackend()}
				stop := runHeld(b, be, n, slog.New(slog.NewTextHandler(w, nil)))
				b.StartTimer()
				t0 := time.Now()
				stop()
				b.ReportMetric(float64(time.Unix(0, be.at.Load()).Sub(t0).Microseconds())/1000, "ms/stop-to-release")
			}
		})
	}
}

// campaignClock records when the first AcquireSet that won returned.
type campaignClock struct {
	*pgleadertest.Backend
	at atomic.Int64
}

func (c *campaignClock) AcquireSet(ctx context.Context, set, owner string, keys []string, floors []int64, ttl time.Duration, held, extra, total int, confirm []string) ([]pgleader.Lease, int, error) {
	won, m, err := c.Backend.AcquireSet(ctx, set, owner, keys, floors, ttl, held, extra, total, confirm)
	if len(won) > 0 {
		c.at.CompareAndSwap(0, time.Now().UnixNano())
	}
	return won, m, err
}

// BenchmarkSetStart: a Set wins 16,667 keys in one campaign (a survivor's
// half of a dead member's 33,333); from the campaign's answer to the
// last body started, in memory (ms/won-to-last-body).
func BenchmarkSetStart(b *testing.B) {
	const n = 16667
	for b.Loop() {
		be := &campaignClock{Backend: pgleadertest.NewBackend()}
		stop := runHeld(b, be, n, slog.New(slog.NewTextHandler(io.Discard, nil)))
		b.ReportMetric(float64(time.Since(time.Unix(0, be.at.Load())).Microseconds())/1000, "ms/won-to-last-body")
		stop()
	}
}

// runHeld runs a Set of n keys on be until every key's body has started,
// and returns a function that cancels Run and waits for it to return.
func runHeld(b *testing.B, be pgleader.SetBackend, n int, log *slog.Logger) (stop func()) {
	var started atomic.Int64
	all := make(chan struct{})
	body := func(ctx context.Context, t *pgleader.Term) error {
		if started.Add(1) == int64(n) {
			close(all)
		}
		return untilEnding(ctx, t)
	}
	s, err := pgleader.NewSet(be, setSpec("s"), keyNames("k", n), pgleader.SetOptions{Owner: "a", Lead: body, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-all
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
