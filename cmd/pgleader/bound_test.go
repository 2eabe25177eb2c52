//go:build unix

package main_test

import (
	"bufio"
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/internal/tcpproxy"
)

// Process tests of session-bound leases (issue 30; docs/model.md,
// "Session-bound leases"): two `pgleader run --session-bound` replicas on
// one key, each running a command that records its term and makes fenced
// writes with psql, and one fault of the leader per test.
//
// The TTL is long (20s) so that a take-over "before the expiry" cannot be
// the expiry's on a loaded machine: the bounds asserted are functional
// (before the old lease's expiry less half a TTL; not before it), and the
// timings are printed, not asserted.

const (
	boundKey      = "bound"
	boundResource = "bound-res"
	boundTTL      = 20 * time.Second
)

// boundTiming is pgleader run's timing for these tests: renewals every 2s,
// so the lease of a leader that stops renewing expires 18 to 20s later.
var boundTiming = []string{"--ttl", boundTTL.String(), "--renew-every", "2s", "--campaign-every", "1s",
	"--margin", "1s", "--yield-grace", "1s", "--release-timeout", "1s"}

// boundScript is each replica's command. It records its term's token, its
// own pid (its process group: pgleader starts it in a group of its own)
// and the time it started, claims the fence resource with its token, then
// makes a fenced write every 200ms, recording each outcome: ok, refused
// (PF001, a stale token) or error.
const boundScript = `
tok=$PGLEADER_TOKEN
echo "$tok $$ $(date +%s.%N)" >> started
if out=$(psql "$FENCE_URL" -qAtX -v ON_ERROR_STOP=1 -v VERBOSITY=verbose \
	-c "SELECT pgleader.fence_claim('` + boundResource + `', $tok)" 2>&1); then
	echo "claimed $tok $(date +%s.%N)" >> writes
else
	echo "claim-refused $tok $(date +%s.%N) $out" | tr '\n' ' ' >> writes; echo >> writes
fi
while :; do
	if out=$(psql "$FENCE_URL" -qAtX -v ON_ERROR_STOP=1 -v VERBOSITY=verbose \
		-c "SELECT pgleader.fence_write('` + boundResource + `', $tok); INSERT INTO bound_writes (token) VALUES ($tok)" 2>&1); then
		echo "ok $tok $(date +%s.%N)" >> writes
	else
		case $out in
		*PF001*) echo "refused $tok $(date +%s.%N)" >> writes ;;
		*) echo "error $tok $(date +%s.%N) $out" | tr '\n' ' ' >> writes; echo >> writes ;;
		esac
	fi
	sleep 0.2
done
`

// boundReplica is one `pgleader run --session-bound` process and the
// directory its command writes to.
type boundReplica struct {
	name, dir string
	p         *process
}

// startBound starts replica name on db's key boundKey, connecting with
// dbURL and its command's psql with fenceURL.
func startBound(t *testing.T, bin, name, dbURL, fenceURL string) *boundReplica {
	t.Helper()
	dir := t.TempDir()
	script := writeScript(t, dir, boundScript)
	args := append([]string{"run", "--database", dbURL, "--key", boundKey, "--owner", name, "--session-bound"}, boundTiming...)
	p := start(t, bin, dir, []string{"FENCE_URL=" + fenceURL}, append(args, "--", script)...)
	r := &boundReplica{name: name, dir: dir, p: p}
	t.Cleanup(func() {
		// Kill what is left of the command's groups (a replica whose
		// pgleader was SIGKILLed, or that a test failed in the middle).
		for _, s := range r.starts(t) {
			_ = syscall.Kill(-s.pgid, syscall.SIGKILL)
		}
		if t.Failed() || os.Getenv("PGLEADER_BOUND_LOGS") != "" {
			t.Logf("replica %s stderr:\n%s", name, p.errors(t))
			t.Logf("replica %s writes:\n%s", name, readFile(t, filepath.Join(dir, "writes")))
		}
	})
	return r
}

// boundStart is one start of a replica's command: a term.
type boundStart struct {
	token int64
	pgid  int
	at    time.Time
}

func (r *boundReplica) starts(t *testing.T) []boundStart {
	t.Helper()
	var out []boundStart
	for _, line := range strings.Split(readFile(t, filepath.Join(r.dir, "started")), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		tok, err1 := strconv.ParseInt(f[0], 10, 64)
		pid, err2 := strconv.Atoi(f[1])
		at, err3 := parseEpoch(f[2])
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out = append(out, boundStart{token: tok, pgid: pid, at: at})
	}
	return out
}

// waitStart waits for the replica's command to start in a term and
// returns its first start.
func (r *boundReplica) waitStart(t *testing.T) boundStart {
	t.Helper()
	var s []boundStart
	eventually(t, r.name+"'s command started", func() bool { s = r.starts(t); return len(s) > 0 })
	return s[0]
}

// boundWrite is one outcome the command recorded.
type boundWrite struct {
	outcome string // claimed, claim-refused, ok, refused, error
	token   int64
	at      time.Time
}

func (r *boundReplica) writes(t *testing.T) []boundWrite {
	t.Helper()
	var out []boundWrite
	sc := bufio.NewScanner(strings.NewReader(readFile(t, filepath.Join(r.dir, "writes"))))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		tok, err1 := strconv.ParseInt(f[1], 10, 64)
		at, err2 := parseEpoch(f[2])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, boundWrite{outcome: f[0], token: tok, at: at})
	}
	return out
}

// firstWrite returns the first outcome recorded of kind outcome with
// token, and whether there is one.
func (r *boundReplica) firstWrite(t *testing.T, outcome string, token int64) (boundWrite, bool) {
	t.Helper()
	for _, w := range r.writes(t) {
		if w.outcome == outcome && w.token == token {
			return w, true
		}
	}
	return boundWrite{}, false
}

func parseEpoch(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	secs, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	var nanos int64
	if frac != "" {
		frac = (frac + "000000000")[:9]
		if nanos, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, err
		}
	}
	return time.Unix(secs, nanos), nil
}

var logTimeRe = regexp.MustCompile(`^time=(\S+) `)

// logAt returns the time of the first line of the replica's log that
// matches re, and whether there is one.
func (r *boundReplica) logAt(t *testing.T, re string) (time.Time, bool) {
	t.Helper()
	match := regexp.MustCompile(re)
	for _, line := range strings.Split(r.p.errors(t), "\n") {
		if !match.MatchString(line) {
			continue
		}
		m := logTimeRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("the time of log line %q: %v", line, err)
		}
		return at, true
	}
	return time.Time{}, false
}

// waitLog waits for a line of the replica's log matching re and returns
// its time.
func (r *boundReplica) waitLog(t *testing.T, what, re string) time.Time {
	t.Helper()
	var at time.Time
	eventually(t, r.name+" logged "+what, func() bool {
		var ok bool
		at, ok = r.logAt(t, re)
		return ok
	})
	return at
}

// stop ends the replica with SIGTERM and waits for it.
func (r *boundReplica) stop(t *testing.T) {
	t.Helper()
	select {
	case <-r.p.done:
		return
	default:
	}
	r.p.signal(t, syscall.SIGTERM)
	r.p.wait(t)
}

// boundLease is the lease row of boundKey.
type boundLease struct {
	holder            string // "" if none
	token             int64
	acquired, expires time.Time
	now               time.Time // the database's clock_timestamp()
}

func readBoundLease(t *testing.T, pool *pgxpool.Pool) boundLease {
	t.Helper()
	var l boundLease
	var acquired, expires *time.Time
	err := pool.QueryRow(context.Background(),
		`SELECT coalesce(holder, ''), token, acquired_at, expires_at, clock_timestamp() FROM pgleader.lease WHERE key = $1`, boundKey).
		Scan(&l.holder, &l.token, &acquired, &expires, &l.now)
	if err != nil {
		t.Fatalf("read lease %q: %v", boundKey, err)
	}
	if acquired != nil {
		l.acquired = *acquired
	}
	if expires != nil {
		l.expires = *expires
	}
	return l
}

// boundDB returns a migrated database with the table the commands write
// to.
func boundDB(t *testing.T) *pgtest.DB {
	t.Helper()
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(context.Background(),
		`CREATE TABLE bound_writes (token bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	return db
}

// leadBound starts the replica named leader, waits for its command to
// start in a term that is bound to its session and to make a fenced write,
// then starts the replica named candidate and waits until it is blocked on
// the leader's session lock. leaderURL is the leader's database URL (and
// its command's), db.URL the candidate's.
func leadBound(t *testing.T, bin string, db *pgtest.DB, leaderURL string) (a, b *boundReplica, first boundStart) {
	t.Helper()
	a = startBound(t, bin, "a", leaderURL, leaderURL)
	first = a.waitStart(t)
	eventually(t, "a's term is bound to its session", func() bool {
		var n int
		_ = db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pgleader.lease_binding WHERE key = $1 AND token = $2 AND holder = 'a'`, boundKey, first.token).Scan(&n)
		return n == 1
	})
	eventually(t, "a's command made a fenced write", func() bool { _, ok := a.firstWrite(t, "ok", first.token); return ok })
	b = startBound(t, bin, "b", db.URL, db.URL)
	eventually(t, "b waits on a's session lock", func() bool { return waitingOnLock(t, db.Pool) })
	return a, b, first
}

// waitingOnLock reports whether a session waits for an advisory lock in
// the database: a candidate blocked on the holder's session lock.
func waitingOnLock(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
		  WHERE d.datname = current_database() AND l.locktype = 'advisory' AND NOT l.granted`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// assertFenced asserts that a fenced write with token is refused (PF001).
func assertFenced(t *testing.T, pool *pgxpool.Pool, token int64) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `SELECT pgleader.fence_write($1, $2)`, boundResource, token)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "PF001" {
		t.Errorf("a fenced write with the old token %d: %v, want PF001", token, err)
	} else {
		t.Logf("a fenced write with the old token %d is refused: %s", token, pgErr.Message)
	}
}

// assertWritesOrdered asserts P2 on the rows the commands wrote: every
// write of the old token committed before the first write of the new one.
func assertWritesOrdered(t *testing.T, pool *pgxpool.Pool, old, next int64) {
	t.Helper()
	var lastOld, firstNew *time.Time
	var nOld, nNew int
	err := pool.QueryRow(context.Background(),
		`SELECT max(at) FILTER (WHERE token = $1), min(at) FILTER (WHERE token = $2),
		        count(*) FILTER (WHERE token = $1), count(*) FILTER (WHERE token = $2)
		   FROM bound_writes`, old, next).Scan(&lastOld, &firstNew, &nOld, &nNew)
	if err != nil {
		t.Fatal(err)
	}
	if nOld == 0 || nNew == 0 {
		t.Fatalf("bound_writes: %d writes of token %d, %d of token %d; want some of each", nOld, old, nNew, next)
	}
	if !lastOld.Before(*firstNew) {
		t.Errorf("a write of the old token %d at %v is not before the first of token %d at %v", old, *lastOld, next, *firstNew)
	}
	var other int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM bound_writes WHERE token NOT IN ($1, $2)`, old, next).Scan(&other); err != nil {
		t.Fatal(err)
	}
	t.Logf("bound_writes: %d of token %d, the last at %s; %d of token %d, the first at %s (%v later); %d of other tokens",
		nOld, old, lastOld.Format(time.RFC3339Nano), nNew, next, firstNew.Format(time.RFC3339Nano), firstNew.Sub(*lastOld), other)
}

// watchHeld polls the lease row until another term than token holds it,
// and returns the last expiry of token's term seen and the row that
// replaced it. Polling every 50ms, it sees each renewal's expiry: a term
// taken over before its expiry shows as acquired before that expiry.
func watchHeld(t *testing.T, pool *pgxpool.Pool, token int64, within time.Duration) (lastExpiry time.Time, next boundLease) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l := readBoundLease(t, pool)
		if l.token == token {
			if l.expires.After(lastExpiry) {
				lastExpiry = l.expires
			}
		} else if l.holder != "" {
			return lastExpiry, l
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the lease is still %+v", within, l)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// boundBackend returns the pid of the backend token's term is bound to.
func boundBackend(t *testing.T, pool *pgxpool.Pool, token int64) int32 {
	t.Helper()
	var pid int32
	if err := pool.QueryRow(context.Background(),
		`SELECT pid FROM pgleader.lease_binding WHERE key = $1 AND token = $2`, boundKey, token).Scan(&pid); err != nil {
		t.Fatalf("the binding of token %d: %v", token, err)
	}
	return pid
}

// backendAlive reports whether backend pid still runs.
func backendAlive(t *testing.T, pool *pgxpool.Pool, pid int32) bool {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// TestBoundProcesses runs the process tests of session-bound leases, one
// fault of the leader each.
func TestBoundProcesses(t *testing.T) {
	t.Parallel()
	bin := build(t)
	for _, tc := range []struct {
		name string
		test func(t *testing.T, bin string)
	}{
		{"SIGKILL", testBoundSIGKILL},
		{"SIGSTOP", testBoundSIGSTOP},
		{"Partition", testBoundPartition},
		{"Terminate", testBoundTerminate},
		{"EveryRefused", testBoundEveryRefused},
		{"SessionPooler", testBoundSessionPooler},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t, bin)
		})
	}
}

// testBoundSIGKILL: the leader's pgleader and its command's group are
// SIGKILLed, as when the pod dies. The kernel closes the bound session's
// socket, the candidate blocked on its session lock wakes, lapses the dead
// term and leads with a higher token long before the old lease's expiry;
// the old token's writes are refused.
func testBoundSIGKILL(t *testing.T, bin string) {
	db := boundDB(t)
	a, b, first := leadBound(t, bin, db, db.URL)
	old := readBoundLease(t, db.Pool)
	if old.holder != "a" || old.token != first.token {
		t.Fatalf("lease before the kill: %+v, want a's token %d", old, first.token)
	}

	killed := time.Now()
	if err := a.p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(-first.pgid, syscall.SIGKILL)
	<-a.p.done
	eventually(t, "a's command is gone", func() bool { return !alive(first.pgid) })

	next := b.waitStart(t)
	l := readBoundLease(t, db.Pool)
	if l.holder != "b" || l.token <= first.token || l.token != next.token {
		t.Fatalf("lease after the kill: %+v; b's command started with token %d; want b's, above %d", l, next.token, first.token)
	}
	// Functional bound: long before the old lease's expiry (its renewals
	// came every 2s of a 20s TTL, so it had at least 18s left).
	if bound := old.expires.Add(-boundTTL / 2); !l.acquired.Before(bound) {
		t.Errorf("b acquired at %v, not before the old lease's expiry %v less half a TTL", l.acquired, old.expires)
	}
	if !strings.Contains(b.p.errors(t), "took it over before its expiry") {
		t.Errorf("b's log does not say it took the bound term over:\n%s", b.p.errors(t))
	}
	leading := b.waitLog(t, "leading", `msg=leading .*token=`+strconv.FormatInt(next.token, 10))
	written, ok := time.Time{}, false
	eventually(t, "b's command made a fenced write", func() bool {
		var w boundWrite
		w, ok = b.firstWrite(t, "ok", next.token)
		written = w.at
		return ok
	})
	claimed, _ := b.firstWrite(t, "claimed", next.token)
	t.Logf("SIGKILL → b leading %v (pgleader's log), → b's command started %v, → claim committed %v, → first fenced write committed %v; "+
		"b acquired %v before the old lease's expiry (database clock)",
		leading.Sub(killed), next.at.Sub(killed), claimed.at.Sub(killed), written.Sub(killed), old.expires.Sub(l.acquired))

	assertFenced(t, db.Pool, first.token)
	assertWritesOrdered(t, db.Pool, first.token, next.token)
	b.stop(t)
}

// testBoundSIGSTOP: the leader's pgleader is stopped (its command runs
// on). Its session lives, so nothing takes the lease before its expiry; b
// leads after it and its claim fences the stopped leader's command. On
// SIGCONT the stopped pgleader ends its term: its command is killed, and
// it does not lead again.
func testBoundSIGSTOP(t *testing.T, bin string) {
	db := boundDB(t)
	a, b, first := leadBound(t, bin, db, db.URL)

	stopped := time.Now()
	a.p.signal(t, syscall.SIGSTOP)
	contDone := false
	t.Cleanup(func() {
		if !contDone {
			_ = a.p.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	lastExpiry, l := watchHeld(t, db.Pool, first.token, 2*boundTTL)
	took := time.Now()
	if l.holder != "b" || l.token <= first.token {
		t.Fatalf("lease after the stop: %+v, want b's above token %d", l, first.token)
	}
	if l.acquired.Before(lastExpiry) {
		t.Errorf("b acquired at %v, before a's lease expired at %v: an early take-over of a live session", l.acquired, lastExpiry)
	}
	next := b.waitStart(t)
	if next.token != l.token {
		t.Errorf("b's command started with token %d, the lease is at %d", next.token, l.token)
	}
	if strings.Contains(b.p.errors(t), "took it over before its expiry") {
		t.Errorf("b's log says it took over before the expiry:\n%s", b.p.errors(t))
	}
	t.Logf("SIGSTOP → b took over (seen) %v; b acquired %v after a's last expiry (database clock)",
		took.Sub(stopped), l.acquired.Sub(lastExpiry))

	// a's command runs on while its pgleader is stopped: once b claims,
	// its writes are refused.
	var refused boundWrite
	eventually(t, "a's command's writes are refused after b's claim", func() bool {
		var ok bool
		refused, ok = a.firstWrite(t, "refused", first.token)
		return ok
	})
	claimed, _ := b.firstWrite(t, "claimed", next.token)
	t.Logf("b's claim committed (b's command's clock) %v after the stop; a's command's first refused write %v after it",
		claimed.at.Sub(stopped), refused.at.Sub(claimed.at))

	cont := time.Now()
	if err := a.p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	contDone = true
	eventually(t, "a's command is gone after SIGCONT", func() bool { return !alive(first.pgid) })
	gone := time.Now()
	ended := a.waitLog(t, "the term's end", `msg="term ended" .*token=`+strconv.FormatInt(first.token, 10)+` `)
	if ended.Before(cont.Truncate(time.Millisecond)) {
		t.Errorf("a's term ended at %v, before SIGCONT at %v", ended, cont)
	}
	endLine := regexp.MustCompile(`msg="term ended" .*token=` + strconv.FormatInt(first.token, 10) + ` .*`).FindString(a.p.errors(t))
	t.Logf("SIGCONT → a's command seen gone %v, → a's term ended %v (a's log: %s); a's command, its pgleader stopped, ran on %v after b's command started (until the test's SIGCONT)",
		gone.Sub(cont), ended.Sub(cont), endLine, gone.Sub(next.at))

	assertFenced(t, db.Pool, first.token)
	assertWritesOrdered(t, db.Pool, first.token, next.token)
	// a campaigns again and does not lead: b's term holds.
	time.Sleep(2 * time.Second)
	if l := readBoundLease(t, db.Pool); l.holder != "b" || l.token != next.token {
		t.Errorf("lease 2s after SIGCONT: %+v, want b's token %d", l, next.token)
	}
	if n := len(a.starts(t)); n != 1 {
		t.Errorf("a's command started %d times, want once", n)
	}
	// b's term, won while a's stopped session held the lock, is bound
	// once a lets go of it.
	eventually(t, "b's term is bound to its session", func() bool {
		var n int
		_ = db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pgleader.lease_binding WHERE key = $1 AND token = $2 AND holder = 'b'`, boundKey, next.token).Scan(&n)
		return n == 1
	})
	a.stop(t)
	b.stop(t)
}

// testBoundPartition: the leader reaches PostgreSQL through a proxy that
// goes into a blackhole (connections stay open, nothing passes). Its
// session lives on the server, so nothing takes the lease before its
// expiry; b leads after it, once a's term has ended.
func testBoundPartition(t *testing.T, bin string) {
	db := boundDB(t)
	proxy, err := tcpproxy.Start(db.HostPort())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = proxy.Addr()
	a, b, first := leadBound(t, bin, db, u.String())
	boundPID := boundBackend(t, db.Pool, first.token)

	cut := time.Now()
	proxy.Blackhole()
	lastExpiry, l := watchHeld(t, db.Pool, first.token, 2*boundTTL)
	took := time.Now()
	// The server did not hear of the partition: a's bound session lives
	// on (until its TCP keepalive, hours by default).
	if !backendAlive(t, db.Pool, boundPID) {
		t.Errorf("a's bound session (backend %d) ended during the partition", boundPID)
	}
	if l.holder != "b" || l.token <= first.token {
		t.Fatalf("lease after the partition: %+v, want b's above token %d", l, first.token)
	}
	if l.acquired.Before(lastExpiry) {
		t.Errorf("b acquired at %v, before a's lease expired at %v: an early take-over of a live session", l.acquired, lastExpiry)
	}
	if strings.Contains(b.p.errors(t), "took it over before its expiry") {
		t.Errorf("b's log says it took over before the expiry:\n%s", b.p.errors(t))
	}
	next := b.waitStart(t)
	// a's term ended by its own timeline, before b's began.
	tok := strconv.FormatInt(first.token, 10)
	exited := a.waitLog(t, "its command's exit", `msg="command exited" .*token=`+tok+` `)
	leading := b.waitLog(t, "leading", `msg=leading .*token=`+strconv.FormatInt(next.token, 10))
	if !exited.Before(leading) {
		t.Errorf("a's command exited at %v, not before b led at %v", exited, leading)
	}
	t.Logf("partition → b took over (seen) %v; b acquired %v after a's last expiry (database clock); "+
		"a's command exited %v after the partition, %v before b led",
		took.Sub(cut), l.acquired.Sub(lastExpiry), exited.Sub(cut), leading.Sub(exited))
	if n, ok := a.logAt(t, `session-bound lease connection's session ended`); ok {
		t.Logf("a's log: the bound session ended %v after the partition", n.Sub(cut))
	}

	proxy.Restore()
	eventually(t, "b's command made a fenced write", func() bool { _, ok := b.firstWrite(t, "ok", next.token); return ok })
	assertFenced(t, db.Pool, first.token)
	assertWritesOrdered(t, db.Pool, first.token, next.token)
	time.Sleep(2 * time.Second)
	if l := readBoundLease(t, db.Pool); l.holder != "b" || l.token != next.token {
		t.Errorf("lease 2s after the partition healed: %+v, want b's token %d", l, next.token)
	}
	a.stop(t)
	b.stop(t)
}

// testBoundTerminate: an administrator terminates the holder's bound
// session with pg_terminate_backend while its process lives. The holder's
// pending read ends its term as lost (its command is killed); b leads
// early. The overlap of belief, from b's start to the end of a's term as
// each pgleader logs them, is printed.
func testBoundTerminate(t *testing.T, bin string) {
	db := boundDB(t)
	a, b, first := leadBound(t, bin, db, db.URL)
	old := readBoundLease(t, db.Pool)
	var pid int32
	var app string
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT b.pid, a.application_name FROM pgleader.lease_binding b JOIN pg_stat_activity a ON a.pid = b.pid
		  WHERE b.key = $1 AND b.token = $2`, boundKey, first.token).Scan(&pid, &app); err != nil {
		t.Fatal(err)
	}
	if app != "pgleader bound lease" {
		t.Errorf("the bound session's application_name is %q", app)
	}

	terminated := time.Now()
	var ok bool
	if err := db.Pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
	next := b.waitStart(t)
	eventually(t, "a's command is gone", func() bool { return !alive(first.pgid) })
	l := readBoundLease(t, db.Pool)
	if l.holder != "b" || l.token <= first.token || l.token != next.token {
		t.Fatalf("lease after the termination: %+v; b's command started with token %d; want b's, above %d", l, next.token, first.token)
	}
	if bound := old.expires.Add(-boundTTL / 2); !l.acquired.Before(bound) {
		t.Errorf("b acquired at %v, not before the old lease's expiry %v less half a TTL", l.acquired, old.expires)
	}
	tok := strconv.FormatInt(first.token, 10)
	sessionEnded := a.waitLog(t, "its session's end", `session-bound lease connection's session ended`)
	killed := a.waitLog(t, "the SIGKILL of its command", `msg="term cancelled; SIGKILL to the command's process group" .*token=`+tok+` .*reason=lost`)
	ended := a.waitLog(t, "its term's end", `msg="term ended" .*token=`+tok+` .*reason=lost`)
	leading := b.waitLog(t, "leading", `msg=leading .*token=`+strconv.FormatInt(next.token, 10))
	t.Logf("pg_terminate_backend → a read its session's end %v, → a SIGKILLed its command %v, → a's term ended %v; → b leading %v, → b's command started %v",
		sessionEnded.Sub(terminated), killed.Sub(terminated), ended.Sub(terminated), leading.Sub(terminated), next.at.Sub(terminated))
	t.Logf("overlap of belief (a's SIGKILL of its command − b leading, both logs; negative: none): %v; to a's \"term ended\": %v; b acquired %v before the old lease's expiry",
		killed.Sub(leading), ended.Sub(leading), old.expires.Sub(l.acquired))

	eventually(t, "b's command made a fenced write", func() bool { _, ok := b.firstWrite(t, "ok", next.token); return ok })
	assertFenced(t, db.Pool, first.token)
	assertWritesOrdered(t, db.Pool, first.token, next.token)
	// a lives on as a candidate and does not lead: b's term holds.
	if l := readBoundLease(t, db.Pool); l.holder != "b" || l.token != next.token {
		t.Errorf("lease at the end: %+v, want b's token %d", l, next.token)
	}
	if n := len(a.starts(t)); n != 1 {
		t.Errorf("a's command started %d times, want once", n)
	}
	a.stop(t)
	b.stop(t)
}

// testBoundSessionPooler: a leader connected through pgbouncer in session
// mode runs TTL-bound (its log says so, and no term is bound); when it is
// SIGKILLed, pgbouncer keeps its server session for the next client, and
// the other replica leads only after the dead term's expiry.
func testBoundSessionPooler(t *testing.T, bin string) {
	db := boundDB(t)
	via := db.PgbouncerSession(t)
	a := startBound(t, bin, "a", via, via)
	first := a.waitStart(t)
	a.waitLog(t, "the fallback to the TTL", `cannot bind terms to a pooler's sessions`)
	eventually(t, "a's command made a fenced write", func() bool { _, ok := a.firstWrite(t, "ok", first.token); return ok })
	b := startBound(t, bin, "b", db.URL, db.URL)
	var bindings int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pgleader.lease_binding WHERE key = $1`, boundKey).Scan(&bindings); err != nil {
		t.Fatal(err)
	}
	if bindings != 0 {
		t.Errorf("%d bindings of the key through a session-mode pooler, want none", bindings)
	}

	killed := time.Now()
	if err := a.p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(-first.pgid, syscall.SIGKILL)
	<-a.p.done
	lastExpiry, l := watchHeld(t, db.Pool, first.token, 2*boundTTL)
	if l.holder != "b" || l.token <= first.token {
		t.Fatalf("lease after the kill: %+v, want b's above token %d", l, first.token)
	}
	if l.acquired.Before(lastExpiry) {
		t.Errorf("b acquired at %v, %v before a's lease expired at %v: an early take-over through a session-mode pooler",
			l.acquired, lastExpiry.Sub(l.acquired), lastExpiry)
	}
	t.Logf("SIGKILL → b acquired %v later, %v after the dead term's expiry", time.Since(killed).Round(time.Millisecond),
		l.acquired.Sub(lastExpiry).Round(time.Millisecond))
	next := b.waitStart(t)
	eventually(t, "b's command claimed the resource", func() bool { _, ok := b.firstWrite(t, "claimed", next.token); return ok })
	assertFenced(t, db.Pool, first.token)
	b.stop(t)
}

// testBoundEveryRefused: --session-bound does not go with a schedule.
func testBoundEveryRefused(t *testing.T, bin string) {
	for _, sched := range [][]string{{"--every", "1s"}, {"--cron", "@hourly"}} {
		args := append([]string{"run", "--key", "k", "--session-bound"}, sched...)
		code, _, stderr := runCLI(t, bin, nil, append(args, "--", "true")...)
		if want := "--session-bound does not go with --every or --cron"; code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("pgleader %q: status %d, stderr:\n%s\nwant 2 and %q", args, code, stderr, want)
		}
	}
}
