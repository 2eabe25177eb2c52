package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/pgleader/pgleader/internal/wait"
)

var (
	boundFailovers    = flag.Int("bound-failovers", 20, "SIGKILLs of the leading replica process with Options.SessionBound in the bound measurement (issue 30)")
	boundTTLFailovers = flag.Int("bound-ttl-failovers", 5, "SIGKILLs of the leading replica process without it (TTL-bound), interleaved with those; each takes about one TTL")
	boundTrace        = flag.Bool("bound-trace", false, "have the bound measurement's replica processes log their Electors at debug level to stderr, with microsecond times, and the server log their database's statements, connections and disconnections")
)

// crashPair is two replica processes of a key (this program re-executed
// with -api-child: the public API, a pool of the default configuration, a
// Claim and FenceFloor on the fenced row, a body that writes once), one
// leading and one waiting; at each round the leader is SIGKILLed and a new
// process replaces it as the candidate, as a restarted pod would.
type crashPair struct {
	b            *bench
	key          string
	bound        bool // Options.SessionBound in every process
	started      int  // processes started, for their owners' names
	leader, cand *process

	toLapse, toClaim, toLead, toWrote []time.Duration
	noLapse                           int // bound rounds whose successor's campaign did not report a lapse
}

func (b *bench) newCrashPair(ctx context.Context, key string, bound bool) (*crashPair, error) {
	if _, err := b.admin.Exec(ctx, `INSERT INTO digests (name, body) VALUES ($1, '') ON CONFLICT DO NOTHING`, key); err != nil {
		return nil, err
	}
	cp := &crashPair{b: b, key: key, bound: bound}
	var err error
	if cp.leader, err = cp.spawn(); err != nil {
		return cp, err
	}
	if err := cp.leader.send(cmdStart); err != nil {
		return cp, err
	}
	if _, err := cp.leader.await(evWrote, 10*time.Second); err != nil {
		return cp, err
	}
	if cp.cand, err = cp.spawn(); err != nil {
		return cp, err
	}
	return cp, cp.ready(ctx, cp.cand)
}

// spawn starts a replica process under a new owner name.
func (cp *crashPair) spawn() (*process, error) {
	cp.started++
	var flags []string
	if cp.bound {
		flags = append(flags, "-api-child-bound")
	}
	if *boundTrace {
		flags = append(flags, "-api-child-log")
	}
	return startProcess(cp.b.url, cp.key, fmt.Sprintf("%s-%d", cp.key, cp.started), flags...)
}

// ready starts p's Elector and waits until it listens and is a live
// candidate; session-bound, also until the leader's term is bound to its
// session and p waits on that session's lock.
func (cp *crashPair) ready(ctx context.Context, p *process) error {
	if err := p.send(cmdStart); err != nil {
		return err
	}
	if _, err := p.await(evListening, 10*time.Second); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ok bool
		err := cp.b.admin.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM pgleader.candidates($1) WHERE owner = $2)
			   AND (NOT $3 OR EXISTS (
			        SELECT 1 FROM pgleader.lease AS l JOIN pgleader.lease_binding AS b USING (key)
			         WHERE l.key = $1 AND b.token = l.token AND b.holder = l.holder)
			   AND EXISTS (
			        SELECT 1 FROM pg_locks AS k, pgleader._binding_lock($1) AS bl
			         WHERE k.locktype = 'advisory' AND NOT k.granted AND k.objsubid = 2
			           AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			           AND k.classid = bl.classid::oid AND k.objid = bl.objid::oid))`,
			cp.key, p.owner, cp.bound).Scan(&ok)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not a waiting candidate within 10s", p.owner)
		}
		if !wait.Sleep(ctx, time.Millisecond) {
			return ctx.Err()
		}
	}
}

// round SIGKILLs the leading process at a random point within a TTL of its
// successor-to-be being ready (so at any point of the leader's renewal
// cycle and of the candidate's wait), measures until the successor's
// campaign lapsed the dead term (session-bound only), its Claim was
// called, its body was entered and its first fenced write committed, then
// starts a new process as the candidate.
func (cp *crashPair) round(ctx context.Context) error {
	leader, cand := cp.leader, cp.cand
	cand.drain()
	if !wait.Sleep(ctx, rand.N(recipe("").TTL)) {
		return ctx.Err()
	}
	var watched chan struct{}
	if *boundTrace && cp.bound {
		var err error
		if watched, err = cp.watchEnd(ctx); err != nil {
			return err
		}
	}
	killAt := time.Now()
	if *boundTrace {
		fmt.Fprintf(os.Stderr, "%s bench: SIGKILL %s (pid %d)\n", killAt.Format("15:04:05.000000"), leader.owner, leader.cmd.Process.Pid)
	}
	if err := leader.cmd.Process.Kill(); err != nil { // SIGKILL
		return err
	}
	cp.leader = nil // never close it: it is gone
	var at [3]time.Time
	for i, ev := range []string{evClaim, evLead, evWrote} {
		var err error
		if at[i], err = cand.await(ev, 15*time.Second); err != nil {
			return err
		}
	}
	if cp.bound {
		select {
		case ns := <-cand.events[evLapsed]: // reported before evClaim
			cp.toLapse = append(cp.toLapse, time.Unix(0, ns).Sub(killAt))
		default:
			cp.noLapse++
		}
	}
	if watched != nil {
		<-watched
	}
	cp.toClaim = append(cp.toClaim, at[0].Sub(killAt))
	cp.toLead = append(cp.toLead, at[1].Sub(killAt))
	cp.toWrote = append(cp.toWrote, at[2].Sub(killAt))
	select {
	case <-leader.exited:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s: not reaped within 10s of its SIGKILL", leader.owner)
	}
	cp.leader, cp.cand = cand, nil
	next, err := cp.spawn()
	if err != nil {
		return err
	}
	cp.cand = next
	return cp.ready(ctx, next)
}

// watchEnd polls, on a connection of its own, for the end of the leader's
// bound backend and the grant of its session lock to the waiting
// candidate, and logs both to stderr (-bound-trace); it closes the channel
// it returns once both happened, or after 10 s.
func (cp *crashPair) watchEnd(ctx context.Context) (chan struct{}, error) {
	conn, err := cp.b.admin.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	var pid int32
	if err := conn.QueryRow(ctx, `SELECT b.pid FROM pgleader.lease AS l JOIN pgleader.lease_binding AS b USING (key)
		WHERE l.key = $1 AND b.token = l.token`, cp.key).Scan(&pid); err != nil {
		conn.Release()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Release()
		var gone, granted bool
		for start := time.Now(); time.Since(start) < 10*time.Second && !(gone && granted); {
			var g, w bool
			err := conn.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $2),
				EXISTS (SELECT 1 FROM pg_locks AS k, pgleader._binding_lock($1) AS bl
				         WHERE k.locktype = 'advisory' AND k.granted AND k.pid <> $2 AND k.objsubid = 2
				           AND k.classid = bl.classid::oid AND k.objid = bl.objid::oid)`, cp.key, pid).Scan(&g, &w)
			at := time.Now().Format("15:04:05.000000")
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s bench: watching %s's backend %d: %v\n", at, cp.key, pid, err)
				return
			}
			if g && !gone {
				fmt.Fprintf(os.Stderr, "%s bench: %s's bound backend %d is gone\n", at, cp.key, pid)
			}
			if w && !granted {
				fmt.Fprintf(os.Stderr, "%s bench: %s's session lock granted to another backend\n", at, cp.key)
			}
			gone, granted = gone || g, granted || w
		}
	}()
	return done, nil
}

func (cp *crashPair) close() {
	for _, p := range []*process{cp.leader, cp.cand} {
		if p != nil {
			p.close()
		}
	}
}

// boundTable SIGKILLs the leading replica process of a session-bound pair
// and of a TTL-bound pair, rounds interleaved, and prints both.
func (b *bench) boundTable(ctx context.Context) error {
	if *boundTrace {
		if err := trace(ctx, b.server, b.url); err != nil {
			return err
		}
	}
	var pairs []*crashPair
	defer func() {
		for _, cp := range pairs {
			cp.close()
		}
	}()
	for _, bound := range []bool{true, false} {
		key := "crash-ttl"
		if bound {
			key = "crash-bound"
		}
		cp, err := b.newCrashPair(ctx, key, bound)
		pairs = append(pairs, cp)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	counts := []int{*boundFailovers, *boundTTLFailovers}
	for i := 0; i < max(counts[0], counts[1]); i++ {
		order := []int{0, 1}
		rand.Shuffle(2, func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, j := range order {
			if i < counts[j] {
				if err := pairs[j].round(ctx); err != nil {
					return fmt.Errorf("%s, round %d: %w", pairs[j].key, i, err)
				}
			}
		}
	}
	bound, ttl := pairs[0], pairs[1]
	fmt.Printf("## Crash failover: SIGKILL of the leading replica process, session-bound against TTL-bound (%d and %d crashes, interleaved)\n\n",
		len(bound.toLead), len(ttl.toLead))
	fmt.Println("Each replica is an OS process of its own (this program with -api-child: the public API, a pool of the")
	fmt.Println("default configuration, Claim and FenceFloor on a sqlfence column, a body that writes once), the spec")
	fmt.Println("above. The leader is SIGKILLed at a random point 0–TTL after its successor-to-be was a waiting")
	fmt.Println("candidate (session-bound: waiting on the holder's session lock), and a new process replaces it as")
	fmt.Println("the candidate. Times from the SIGKILL (this process's clock) to the successor's events (its own clock:")
	fmt.Println("the same machine's wall clock), p50 / p90 / p99 / max.")
	fmt.Println()
	fmt.Println("| lease | crashes | SIGKILL → the successor's campaign lapsed the dead term | → its Claim called | (a) → its body entered (the term started) | (b) → its first fenced write committed |")
	fmt.Println("|---|---|---|---|---|---|")
	lapse := "–"
	if len(bound.toLapse) > 0 {
		lapse = summary(bound.toLapse)
	}
	if bound.noLapse > 0 {
		lapse += fmt.Sprintf(" (%d of %d not reported)", bound.noLapse, len(bound.toLead))
	}
	fmt.Printf("| session-bound (Options.SessionBound) | %d | %s | %s | %s | %s |\n", len(bound.toLead), lapse,
		summary(bound.toClaim), summary(bound.toLead), summary(bound.toWrote))
	fmt.Printf("| TTL-bound (the default) | %d | – | %s | %s | %s |\n\n", len(ttl.toLead),
		summary(ttl.toClaim), summary(ttl.toLead), summary(ttl.toWrote))
	fmt.Println("Anchors (docs/benchmarks.md, measured separately, crash failover p50 from the crash): etcd election 5.8 s (TTL 6 s),")
	fmt.Println("client-go leaderelection 6.0 s, River 13 s (TTL 15 s), a PostgreSQL advisory lock polled every 500 ms 188 ms (no lease, no fence).")
	fmt.Println()
	p50, p99 := percentile(bound.toLead, 50), percentile(bound.toLead, 99)
	fmt.Printf("Goal (issue 30): session-bound, SIGKILL → the successor leads, p50 ≤ 50 ms and p99 ≤ 200 ms: %s (p50 %s, p99 %s over %d; its first fenced write p50 %s, p99 %s; TTL-bound p50 %s)\n\n",
		verdict(p50 <= 50*time.Millisecond && p99 <= 200*time.Millisecond), ms(p50), ms(p99), len(bound.toLead),
		ms(percentile(bound.toWrote, 50)), ms(percentile(bound.toWrote, 99)), ms(percentile(ttl.toLead, 50)))
	return nil
}
