package chaos

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pgleader/pgleader/pgleader"
)

// errCrashed is what a crashed goroutine replica's calls return: nothing it
// does after the crash reaches the database.
var errCrashed = errors.New("chaos: the replica crashed")

// gate holds goroutines while a replica is paused, simulating a
// stop-the-world pause in goroutine mode. Waiting ignores contexts, as a
// paused process would. The zero gate is open.
type gate struct {
	mu      sync.Mutex
	paused  chan struct{} // non-nil while paused; closed on resume
	dead    chan struct{} // closed when the replica crashed
	waiters int           // goroutines held now
}

func newGate() *gate { return &gate{dead: make(chan struct{})} }

func (g *gate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused == nil {
		g.paused = make(chan struct{})
	}
}

// resume opens the gate and returns how many goroutines it held.
func (g *gate) resume() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused != nil {
		close(g.paused)
		g.paused = nil
	}
	return g.waiters
}

// kill makes every wait, now and later, return errCrashed.
func (g *gate) kill() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.dead:
	default:
		close(g.dead)
	}
}

// wait returns when the gate is open, or errCrashed once it is killed.
func (g *gate) wait() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	paused, dead := g.paused, g.dead
	if paused != nil {
		g.waiters++
	}
	g.mu.Unlock()
	if paused != nil {
		select {
		case <-paused:
		case <-dead:
		}
		g.mu.Lock()
		g.waiters--
		g.mu.Unlock()
	}
	select {
	case <-dead:
		return errCrashed
	default:
		return nil
	}
}

// gates are a goroutine replica's pause points: loop in front of every
// backend call (the elector's acquire, renew and release, and FenceFloor),
// unit at the top of each unit of the body, before Live is checked, and
// write between the Live check and the write. A pause anywhere closes all
// three; a pause inside a unit closes loop and write, so the body is caught
// after it has seen Live true. In process mode they are nil (always open):
// SIGSTOP pauses the process.
//
// On resume, a write held at its gate goes first, and the loop only once
// that write has returned (or after a second): the adversarial order, in
// which a paused leader's write lands before its renewal can learn the
// lease is lost.
type gates struct {
	loop, unit, write *gate
	wrote             chan struct{} // signalled by the body after each write
}

func newGates() *gates {
	return &gates{newGate(), newGate(), newGate(), make(chan struct{}, 1)}
}

// written tells resume that a write returned.
func (g *gates) written() {
	if g.wrote == nil {
		return
	}
	select {
	case g.wrote <- struct{}{}:
	default:
	}
}

func (g *gates) pause(inUnit bool) {
	g.loop.pause()
	g.write.pause()
	if !inUnit {
		g.unit.pause()
	}
}

func (g *gates) resume() {
	select {
	case <-g.wrote: // a signal from before the pause
	default:
	}
	if g.write.resume() > 0 {
		select {
		case <-g.wrote:
		case <-time.After(time.Second):
		}
	}
	g.unit.resume()
	g.loop.resume()
}

func (g *gates) kill() {
	g.loop.kill()
	g.unit.kill()
	g.write.kill()
}

// recorder wraps the PostgreSQL backend: it holds calls at the loop gate
// and records each acquire, renew and release with its outcome and the
// database's times. It implements every optional interface of Postgres so
// the elector behaves as it would without it.
type recorder struct {
	pg      *pgleader.Postgres
	sink    Sink
	replica int
	key     string // the elector's key, which every event carries
	owner   string
	ttl     time.Duration
	gate    *gate

	mu  sync.Mutex
	won Event // the last winning acquire: the current term's identity
}

var (
	_ pgleader.Backend = (*recorder)(nil)
	_ pgleader.Steerer = (*recorder)(nil)
	_ pgleader.Watcher = (*recorder)(nil)
)

// Abilities implements pgleader.Backend: the PostgreSQL backend's, with
// the recorder in its place.
func (r *recorder) Abilities() pgleader.Abilities {
	ab := r.pg.Abilities()
	ab.Steer = r
	if ab.Events != nil {
		ab.Events = r
	}
	return ab
}

func (r *recorder) event(kind Kind, sent time.Time, err error) Event {
	e := Event{Kind: kind, Replica: r.replica, Key: r.key, Owner: r.owner, Sent: sent, Result: OK}
	if err != nil {
		e.Result, e.Err = Failed, err.Error()
	}
	return e
}

// term returns the database time of the winning acquire of token, the
// current term's.
func (r *recorder) term(token int64) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.won.Token == token {
		return r.won.Term
	}
	return time.Time{}
}

// Release implements pgleader.Backend.
func (r *recorder) Release(ctx context.Context, key, owner string, token int64) (bool, error) {
	if err := r.gate.wait(); err != nil {
		return false, err
	}
	sent := time.Now()
	released, err := r.pg.Release(ctx, key, owner, token)
	e := r.event(KindRelease, sent, err)
	e.Token, e.Term = token, r.term(token)
	if err == nil && !released {
		e.Result = Refused
	}
	r.sink.Record(e)
	return released, err
}

// Lease implements pgleader.Backend.
func (r *recorder) Lease(ctx context.Context, key string) (pgleader.Lease, error) {
	if err := r.gate.wait(); err != nil {
		return pgleader.Lease{}, err
	}
	return r.pg.Lease(ctx, key)
}

// Advance implements pgleader.Steerer.
func (r *recorder) Advance(ctx context.Context, key string, floor int64) (bool, int64, error) {
	if err := r.gate.wait(); err != nil {
		return false, 0, err
	}
	return r.pg.Advance(ctx, key, floor)
}

// Watch implements pgleader.Watcher.
func (r *recorder) Watch(key string) (<-chan pgleader.Event, func()) { return r.pg.Watch(key) }

// Listening implements pgleader.Watcher.
func (r *recorder) Listening() bool { return r.pg.Listening() }

// Announce implements pgleader.Watcher.
func (r *recorder) Announce(ctx context.Context, key string) error { return r.pg.Announce(ctx, key) }
