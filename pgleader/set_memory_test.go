package pgleader_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// TestSetBodyStartsOnSmallStack: a Set runs each body on a goroutine whose
// stack is still the runtime's smallest (2 KB) when Lead is called. A
// goroutine's stack that once grew stays grown while it is more than a
// quarter full, so anything deep the Set runs there before Lead (slog's
// Logger.log did, for a debug line that was not even written) costs 2 KB
// per held key for the whole term: most of what issue 27 measured.
//
// The probe is deterministic: Lead's first act is to use 1.5 KB more of
// its stack, which moves a 2 KB stack (its guard leaves about 1.1 KB of
// it to frames) and fits in a 4 KB one. The test runs in a process of its
// own with GODEBUG adaptivestackstart=0, so that goroutines start at 2 KB
// whatever other tests' goroutines did. Under the race detector, whose
// frames are larger, it is skipped.
func TestSetBodyStartsOnSmallStack(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector enlarges every frame")
	}
	if os.Getenv(stackProbeEnv) == "" {
		t.Parallel()
		cmd := exec.Command(os.Args[0], "-test.run=^TestSetBodyStartsOnSmallStack$", "-test.count=1")
		cmd.Env = append(os.Environ(), stackProbeEnv+"=1",
			"GODEBUG="+strings.Trim(os.Getenv("GODEBUG")+",adaptivestackstart=0", ","))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	synctest.Test(t, func(t *testing.T) {
		const n = 20
		var moved, grown atomic.Int32
		body := func(ctx context.Context, t *pgleader.Term) error {
			var here byte
			at := uintptr(unsafe.Pointer(&here))
			useStack(6)
			moved.Add(1)
			if uintptr(unsafe.Pointer(&here)) == at {
				grown.Add(1) // it had room for the probe: it was not 2 KB
			}
			select {
			case <-t.Ending():
			case <-ctx.Done():
			}
			return nil
		}
		r := startSet(t, pgleadertest.NewBackend(), setSpec("s"), keyNames("k", n), pgleader.SetOptions{Owner: "a", Lead: body})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		r.stop(t)
		if moved.Load() != n {
			t.Fatalf("%d of %d bodies ran", moved.Load(), n)
		}
		if g := grown.Load(); g > 0 {
			t.Fatalf("%d of %d bodies started Lead on a stack already grown past 2 KB", g, n)
		}
	})
}

// stackProbeEnv marks the process TestSetBodyStartsOnSmallStack runs in.
const stackProbeEnv = "PGLEADER_TEST_STACK_PROBE"

// useStack uses about 256 bytes of stack per level.
//
//go:noinline
func useStack(levels int) byte {
	var buf [224]byte
	buf[levels] = byte(levels)
	if levels == 0 {
		return buf[0]
	}
	return useStack(levels-1) + buf[levels]
}
