package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/embedpg"
	"github.com/pgleader/pgleader/internal/tcpproxy"
	"github.com/pgleader/pgleader/internal/wait"
)

// Cluster is a throwaway PostgreSQL cluster of the chaos run's own, in a
// temporary directory, so the run may restart the server, kill it, or
// promote a standby. It is never the machine's main server; as root it runs
// as the OS user postgres.
type Cluster = embedpg.Server

// ClusterOptions change how a cluster's server runs (extra settings, an
// environment such as libfaketime's).
type ClusterOptions = embedpg.Options

// FindPostgresBin returns the directory of initdb and pg_ctl (see
// [embedpg.FindBin]).
func FindPostgresBin() (string, error) { return embedpg.FindBin() }

// StartCluster creates a cluster with the binaries in bin and starts it on
// a free loopback port, with fsync off and commit timestamps tracked. Stop
// it with Stop, which also deletes it.
func StartCluster(ctx context.Context, bin string) (*Cluster, error) { return embedpg.Start(ctx, bin) }

// StartClusterWith is StartCluster with options.
func StartClusterWith(ctx context.Context, bin string, opts ClusterOptions) (*Cluster, error) {
	return embedpg.StartWith(ctx, bin, opts)
}

// Replicated is a primary of the run's own with an asynchronous streaming
// standby, for the failover fault. Its servers are named pg1, pg2, … in
// the setting chaos.server, which the store records with every row. Its
// methods are safe for concurrent use.
//
// The standby streams through a proxy, so that a failover can cut
// replication first and let the primary acknowledge what the standby will
// never have, as a lagging standby would.
//
// It keeps two invariants: at most one failover is in flight (Failover and
// Restart are serialized), and a failover happens only when a standby has
// caught up with the primary: after each one, a new standby is built from
// the new primary (pg_basebackup) in the background, and Failover does
// nothing until it has replayed what the primary had written when it
// started.
type Replicated struct {
	bin  string
	opts ClusterOptions
	ctx  context.Context // the background builds'; cancelled by Stop
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu      sync.Mutex
	primary *Cluster
	standby *Cluster        // nil until one has caught up
	repl    *tcpproxy.Proxy // the standby's replication path
	names   map[*Cluster]string
	n       int // servers created
}

// Failover is what Replicated.Failover did.
type Failover struct {
	// Old and New name the failed primary and the promoted standby; Addr is
	// the new primary's host:port.
	Old, New, Addr string
	// Killed is when the old primary's kill began (local clock); Promoted
	// is the new primary's clock_timestamp() once it accepted writes.
	Killed, Promoted time.Time
}

// StartReplicated starts a primary with the binaries in bin and, in the
// background, its first standby. Stop stops and deletes both.
func StartReplicated(ctx context.Context, bin string, opts ClusterOptions) (*Replicated, error) {
	r := &Replicated{bin: bin, opts: opts, names: map[*Cluster]string{}}
	p, err := embedpg.StartWith(ctx, bin, r.named(opts))
	if err != nil {
		return nil, err
	}
	r.primary = p
	r.names[p] = r.lastName()
	r.ctx, r.stop = context.WithCancel(context.WithoutCancel(ctx))
	r.mu.Lock()
	r.replace(p)
	r.mu.Unlock()
	return r, nil
}

func (r *Replicated) lastName() string { return fmt.Sprintf("pg%d", r.n) }

// named returns opts with the next server's name; r.mu held or no other
// goroutine yet.
func (r *Replicated) named(opts ClusterOptions) ClusterOptions {
	r.n++
	opts.Settings = append(slices.Clone(opts.Settings), "chaos.server="+r.lastName())
	return opts
}

// URL connects to the first primary's database postgres; after a failover
// it reaches nothing. The harness reaches the current primary through its
// proxies (Harness.Retarget).
func (r *Replicated) URL() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.primary.URL()
}

// Dir is the first primary's directory.
func (r *Replicated) Dir() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.primary.Dir()
}

// Primary names the current primary.
func (r *Replicated) Primary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.names[r.primary]
}

// Ready reports whether a standby has caught up, so that Failover would
// fail over.
func (r *Replicated) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.standby != nil
}

// Restart restarts the current primary (see Cluster.Restart). A standby
// streaming from it reconnects on its own.
func (r *Replicated) Restart(ctx context.Context, immediate bool, down time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.primary.Restart(ctx, immediate, down)
}

// Failover cuts replication, waits lag (the primary goes on acknowledging
// what the standby will not have), kills the primary (pg_ctl stop -m
// immediate), promotes the standby and waits until it accepts writes, and
// starts building the next standby from it. It returns ok = false and does
// nothing if no standby has caught up. Clients must be moved to the new
// primary's Addr by the caller.
func (r *Replicated) Failover(ctx context.Context, lag time.Duration) (f Failover, ok bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.standby == nil {
		return f, false, nil
	}
	old, next := r.primary, r.standby
	f = Failover{Old: r.names[old], New: r.names[next], Addr: next.Addr()}
	r.repl.Cut()
	wait.Sleep(ctx, lag)
	f.Killed = time.Now()
	if err := old.Kill(ctx); err != nil {
		return f, true, fmt.Errorf("chaos: kill %s: %w", f.Old, err)
	}
	_ = old.Stop() // deletes its directory
	delete(r.names, old)
	if err := next.Promote(ctx); err != nil {
		return f, true, fmt.Errorf("chaos: promote %s: %w", f.New, err)
	}
	r.primary, r.standby = next, nil
	r.repl.Close()
	conn, err := pgx.Connect(ctx, next.URL())
	if err != nil {
		return f, true, err
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&f.Promoted); err != nil {
		return f, true, err
	}
	r.replace(next)
	return f, true, nil
}

// replace builds a standby of primary in the background, retrying until it
// has caught up (a restart of the primary can break pg_basebackup), and
// installs it as the standby unless Stop was called. r.mu is held.
func (r *Replicated) replace(primary *Cluster) {
	opts := r.named(r.opts)
	name := r.lastName()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for r.ctx.Err() == nil {
			if st, repl, err := r.build(primary, opts); err == nil {
				r.mu.Lock()
				r.standby, r.repl, r.names[st] = st, repl, name
				r.mu.Unlock()
				return
			}
			wait.Sleep(r.ctx, time.Second)
		}
	}()
}

// build makes a standby of primary, streaming through a proxy of its own,
// and waits until it has replayed what the primary had written once the
// standby was running.
func (r *Replicated) build(primary *Cluster, opts ClusterOptions) (*Cluster, *tcpproxy.Proxy, error) {
	repl, err := tcpproxy.Start(primary.Addr())
	if err != nil {
		return nil, nil, err
	}
	st, err := primary.StartStandby(r.ctx, repl.Addr(), opts)
	if err == nil {
		if err = caughtUp(r.ctx, primary, st); err != nil {
			_ = st.Stop()
		}
	}
	if err != nil {
		repl.Close()
		return nil, nil, err
	}
	return st, repl, nil
}

func caughtUp(ctx context.Context, primary, standby *Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	p, err := pgx.Connect(ctx, primary.URL())
	if err != nil {
		return err
	}
	defer p.Close(context.WithoutCancel(ctx))
	var lsn string
	if err := p.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		return err
	}
	s, err := pgx.Connect(ctx, standby.URL())
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	for {
		var ok bool
		err := s.QueryRow(ctx, `SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)`, lsn).Scan(&ok)
		if err != nil || ok {
			return err
		}
		if !wait.Sleep(ctx, 100*time.Millisecond) {
			return fmt.Errorf("chaos: the standby did not replay %s: %w", lsn, ctx.Err())
		}
	}
}

// Stop stops building, and stops and deletes the primary and the standby.
func (r *Replicated) Stop() error {
	r.stop()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.repl != nil {
		r.repl.Close()
	}
	var errs []error
	for _, s := range []*Cluster{r.standby, r.primary} {
		if s != nil {
			errs = append(errs, s.Stop())
		}
	}
	return errors.Join(errs...)
}
