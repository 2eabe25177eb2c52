package pgleadertest_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

func TestSemantics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := pgleadertest.NewBackend()

		l, ok, err := b.Acquire(ctx, "k", "a", time.Second)
		if err != nil || !ok || l.Token != 1 {
			t.Fatalf("acquire = %+v, %v, %v", l, ok, err)
		}
		if l, ok, _ := b.Acquire(ctx, "k", "b", time.Second); ok || l.Holder != "a" || l.Remaining() != time.Second {
			t.Fatalf("acquire while held = %+v, %v", l, ok)
		}
		if _, err := b.Renew(ctx, "k", "b", 1, time.Second); !errors.Is(err, pgleader.ErrLost) {
			t.Fatalf("renew by another owner: %v", err)
		}
		if ok, _ := b.Release(ctx, "k", "a", 2); ok {
			t.Fatal("release with a wrong token took effect")
		}
		time.Sleep(time.Second) // expiry is decided on the (fake) clock
		if _, err := b.Renew(ctx, "k", "a", 1, time.Second); !errors.Is(err, pgleader.ErrLost) {
			t.Fatalf("renew after expiry: %v", err)
		}
		if l, ok, _ := b.Acquire(ctx, "k", "b", time.Second); !ok || l.Token != 2 {
			t.Fatalf("acquire after expiry = %+v, %v; want token 2", l, ok)
		}

		if ok, n, _ := b.Advance(ctx, "k", 50); ok || n != 2 {
			t.Fatalf("advance while held = %v, %d", ok, n)
		}
		b.DropData()
		if l, _ := b.Lease(ctx, "k"); l.Held() || l.Token != 0 {
			t.Fatalf("after DropData: %+v", l)
		}
		if ok, n, _ := b.Advance(ctx, "k", 50); !ok || n != 50 {
			t.Fatalf("advance = %v, %d", ok, n)
		}
		if ok, n, _ := b.Advance(ctx, "k", 10); !ok || n != 50 {
			t.Fatalf("advance down = %v, %d; want 50 kept", ok, n)
		}
		if l, _, _ := b.Acquire(ctx, "k", "a", time.Second); l.Token != 51 {
			t.Fatalf("token after advance = %d, want 51", l.Token)
		}
		if b.WithoutAdvance().Abilities().Advance {
			t.Fatal("WithoutAdvance still claims Advance")
		}
		if len(b.History()) == 0 {
			t.Fatal("empty history")
		}
	})
}

func TestSwitches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := pgleadertest.NewBackend()
		down := errors.New("connection refused")
		b.SetFailure(down)
		if _, _, err := b.Acquire(ctx, "k", "a", time.Second); !errors.Is(err, down) {
			t.Fatalf("acquire during failure: %v", err)
		}
		b.SetFailure(nil)

		b.Block()
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		start := time.Now()
		if _, _, err := b.Acquire(tctx, "k", "a", time.Second); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("blocked acquire: %v", err)
		}
		if time.Since(start) != time.Second {
			t.Fatalf("blocked acquire returned after %v, want its context's 1s", time.Since(start))
		}
		done := make(chan bool)
		go func() { _, ok, _ := b.Acquire(ctx, "k", "a", time.Second); done <- ok }()
		synctest.Wait()
		b.Unblock()
		if !<-done {
			t.Fatal("acquire after Unblock failed")
		}

		b.SetLatency(300 * time.Millisecond)
		start = time.Now()
		l, _ := b.Lease(ctx, "k")
		if time.Since(start) != 300*time.Millisecond || !l.Now.Equal(start.Add(300*time.Millisecond)) {
			t.Fatalf("latency: took %v, decided at %v", time.Since(start), l.Now.Sub(start))
		}

		if _, _, err := b.Acquire(ctx, "", "a", time.Second); !errors.Is(err, pgleader.ErrInvalid) {
			t.Fatalf("empty key: %v", err)
		}
	})
}
