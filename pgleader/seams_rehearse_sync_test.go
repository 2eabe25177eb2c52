package pgleader

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// failingRehearsal is a backend whose every hand-off rehearsal fails.
type failingRehearsal struct{ *preparing }

func (b failingRehearsal) Abilities() Abilities {
	ab := b.preparing.Abilities()
	ab.PrepareHandOff = func(context.Context, time.Duration) error { return errors.New("injected: the rehearsal failed") }
	return ab
}

// warnings passes the message of each log record at Warn or above to
// count.
type warnings struct {
	count func(string)
}

func (w warnings) Enabled(context.Context, slog.Level) bool { return true }

func (w warnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.count(r.Message)
	}
	return nil
}

func (w warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w warnings) WithGroup(string) slog.Handler      { return w }

// TestFailingRehearsalWarnsOnce: a hand-off rehearsal that fails in every
// term (the optimisation is off) says so once at Warn, not never and not
// once per term.
func TestFailingRehearsalWarnsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var warned []string
		log := slog.New(warnings{count: func(m string) {
			if strings.Contains(m, "rehears") || strings.Contains(m, "preparing the hand-off") {
				warned = append(warned, m)
			}
		}})
		terms := 0
		el, err := New(failingRehearsal{&preparing{}}, Spec{Key: "k", TTL: 6 * time.Second}, Options{Owner: "a", Logger: log,
			Lead: func(ctx context.Context, term *Term) error {
				terms++
				time.Sleep(time.Second) // long enough to rehearse
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx) }()
		time.Sleep(10 * time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if terms < 3 || len(warned) != 1 {
			t.Fatalf("%d terms, rehearsal warnings %q; want at least 3 terms and exactly one warning", terms, warned)
		}
	})
}
