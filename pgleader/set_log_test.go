package pgleader_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// TestSetLogsTermEndsByReason: a Set that stops logs its terms' ends at
// info level as counts per reason, never a line per key (a stop of 33,333
// keys wrote 33,333 lines before its release was sent); the line per key
// is at debug level.
func TestSetLogsTermEndsByReason(t *testing.T) {
	t.Parallel()
	const n = 2000
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var logs lockedLog
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: level}))
		r := startSet(t, pgleadertest.NewBackend(), setSpec("s"), keyNames("k", n),
			pgleader.SetOptions{Owner: "a", Lead: untilEnding, Logger: log})
		waitFor(t, "the set to hold its keys", func() bool { return r.set.Status().Held == n })
		r.stop(t)

		perKey, lines, keys := 0, 0, 0
		count := regexp.MustCompile(`msg="terms ended" .*keys=(\d+) reason=stopped`)
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `msg="term ended"`) {
				perKey++
			}
			if m := count.FindStringSubmatch(line); m != nil {
				k, _ := strconv.Atoi(m[1])
				lines, keys = lines+1, keys+k
			}
		}
		if keys != n {
			t.Errorf("level %v: %d info lines count %d keys ended as stopped; want %d", level, lines, keys, n)
		}
		want := 0
		if level == slog.LevelDebug {
			want = n
		}
		if perKey != want {
			t.Errorf("level %v: %d lines of one term ended; want %d", level, perKey, want)
		}
		t.Logf("level %v: %d keys ended in %d info lines", level, keys, lines)
	}
}

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
				var started atomic.Int64
				all := make(chan struct{})
				body := func(ctx context.Context, t *pgleader.Term) error {
					if started.Add(1) == n {
						close(all)
					}
					return untilEnding(ctx, t)
				}
				be := &releaseClock{Backend: pgleadertest.NewBackend()}
				log := slog.New(slog.NewTextHandler(w, nil))
				s, err := pgleader.NewSet(be, setSpec("s"), keyNames("k", n), pgleader.SetOptions{Owner: "a", Lead: body, Logger: log})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- s.Run(ctx) }()
				<-all
				b.StartTimer()
				t0 := time.Now()
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(time.Unix(0, be.at.Load()).Sub(t0).Microseconds())/1000, "ms/stop-to-release")
			}
		})
	}
}
