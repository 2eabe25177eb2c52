//go:build unix

package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// A jobLine is one line a test's scheduled command appended:
// "$PGLEADER_INSTANT $PGLEADER_TOKEN $PGLEADER_ATTEMPT $PGLEADER_OWNER".
type jobLine struct {
	instant time.Time
	raw     string // the instant as the command got it
	token   int64
	attempt int
	owner   string
}

// appendLine is the shell command that appends a jobLine to the file name.
func appendLine(name string) string {
	return `echo "$PGLEADER_INSTANT $PGLEADER_TOKEN $PGLEADER_ATTEMPT $PGLEADER_OWNER" >> ` + name + "\n"
}

func readLines(t *testing.T, name string) []jobLine {
	t.Helper()
	var out []jobLine
	for line := range strings.Lines(readFile(t, name)) {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("%s: line %q is not INSTANT TOKEN ATTEMPT OWNER", name, line)
		}
		instant, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			t.Fatalf("%s: PGLEADER_INSTANT %q: %v", name, f[0], err)
		}
		token, err1 := strconv.ParseInt(f[1], 10, 64)
		attempt, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: line %q: PGLEADER_TOKEN or PGLEADER_ATTEMPT is not a number", name, line)
		}
		out = append(out, jobLine{instant: instant, raw: f[0], token: token, attempt: attempt, owner: f[3]})
	}
	return out
}

// waitLines waits until the file name has at least n lines.
func waitLines(t *testing.T, name string, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d runs in %s", n, name), func() bool {
		return strings.Count(readFile(t, name), "\n") >= n
	})
}

// A jobRunRow is a row of pgleader.job_run.
type jobRunRow struct {
	state, owner string
	token        int64
	attempt      int
}

func jobRuns(t *testing.T, db *pgtest.DB, job string) map[time.Time]jobRunRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT instant, state, owner, token, attempt FROM pgleader.job_run WHERE job = $1`, job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[time.Time]jobRunRow{}
	for rows.Next() {
		var instant time.Time
		var r jobRunRow
		if err := rows.Scan(&instant, &r.state, &r.owner, &r.token, &r.attempt); err != nil {
			t.Fatal(err)
		}
		out[instant.UTC()] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkOncePerInstant checks the lines of a scheduled command against the
// job's runs: each instant was run once (one line), on a whole second in
// UTC, by a term of its own (with rising, by a token that rises with the
// instant), and each line is a run the database recorded with that token;
// each run recorded done has its line. It returns the runs.
//
// Tokens rise with the instants only without --at-least-once: with it, a
// replica may still claim an instant, for up to --retry-within, after
// another claimed a later one.
func checkOncePerInstant(t *testing.T, db *pgtest.DB, job string, lines []jobLine, rising bool) map[time.Time]jobRunRow {
	t.Helper()
	seen := map[time.Time]jobLine{}
	for _, l := range lines {
		if prev, ok := seen[l.instant]; ok {
			t.Errorf("instant %s ran twice: tokens %d and %d", l.raw, prev.token, l.token)
		}
		seen[l.instant] = l
		if !strings.HasSuffix(l.raw, "Z") || l.instant.Nanosecond() != 0 {
			t.Errorf("PGLEADER_INSTANT %q is not a whole second in UTC", l.raw)
		}
	}
	sorted := slices.SortedFunc(func(yield func(jobLine) bool) {
		for _, l := range seen {
			if !yield(l) {
				return
			}
		}
	}, func(a, b jobLine) int { return a.instant.Compare(b.instant) })
	for i := 1; rising && i < len(sorted); i++ {
		if sorted[i].token <= sorted[i-1].token {
			t.Errorf("instant %s ran with token %d, instant %s before it with %d: tokens must rise",
				sorted[i].raw, sorted[i].token, sorted[i-1].raw, sorted[i-1].token)
		}
	}
	runs := jobRuns(t, db, job)
	for _, l := range lines {
		r, ok := runs[l.instant]
		if !ok || r.token != l.token || r.owner != l.owner || r.attempt != l.attempt {
			t.Errorf("instant %s ran with token %d (%s, attempt %d); pgleader.job_run has %+v (found: %v)",
				l.raw, l.token, l.owner, l.attempt, r, ok)
		}
	}
	for instant, r := range runs {
		if _, ok := seen[instant]; !ok && r.state == "done" {
			t.Errorf("pgleader.job_run has instant %s done by token %d, and the command did not run for it", instant, r.token)
		}
		if r.state == "failed" {
			t.Errorf("pgleader.job_run has instant %s failed: %+v", instant, r)
		}
	}
	return runs
}

// testRunEvery runs a job every second on three replicas, one of them
// SIGKILLed and started again, another stopped with SIGTERM, over at least
// twelve instants: each instant runs once.
func testRunEvery(t *testing.T, bin string) {
	db := pgtest.New(t)
	shared := t.TempDir()
	runs := filepath.Join(shared, "runs")
	script := writeScript(t, shared, appendLine(runs))
	replica := func(owner string) *process {
		args := append([]string{"run", "--database", db.URL, "--key", "every-job", "--every", "1s", "--owner", owner}, fast...)
		return start(t, bin, t.TempDir(), nil, append(args, "--", script)...)
	}
	a, b, c := replica("replica-a"), replica("replica-b"), replica("replica-c")

	waitLines(t, runs, 3)
	a.signal(t, syscall.SIGKILL)
	a.wait(t)
	restarted := replica("replica-a2")
	waitLines(t, runs, len(readLines(t, runs))+3)
	b.signal(t, syscall.SIGTERM)
	if code := b.wait(t); code != 0 {
		t.Errorf("exit status after SIGTERM %d, want 0; stderr:\n%s", code, b.errors(t))
	}
	waitLines(t, runs, max(12, len(readLines(t, runs))+3))
	for _, p := range []*process{c, restarted} {
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Errorf("exit status after SIGTERM %d, want 0; stderr:\n%s", code, p.errors(t))
		}
	}

	lines := readLines(t, runs)
	recorded := checkOncePerInstant(t, db, "every-job", lines, true)
	for _, l := range lines {
		if l.attempt != 1 {
			t.Errorf("instant %s ran as attempt %d; without --at-least-once every run is the first", l.raw, l.attempt)
		}
	}
	// A run is left running only by a replica killed or stopped in it: its
	// last.
	last := map[string]time.Time{}
	for instant, r := range recorded {
		if instant.After(last[r.owner]) {
			last[r.owner] = instant
		}
	}
	for instant, r := range recorded {
		if r.state == "running" && !instant.Equal(last[r.owner]) {
			t.Errorf("instant %s was left running by %s, which ran %s after it", instant, r.owner, last[r.owner])
		}
	}
	t.Logf("%d instants, %d recorded runs", len(lines), len(recorded))
}

// testRunEveryAtLeastOnce: with --at-least-once, once the replicas run in
// step, a run's command hangs and its pgleader is SIGKILLed; another replica
// runs that instant, once, as attempt 2 with a higher token, and the other
// instants run once.
//
// The period (5s) leaves the replicas that lost an instant the time to wait
// out the winner's lease (TTL 3s) and try the next instant too: a replica
// takes over only the instant it is trying, so the hanging run must be of
// one every replica tries, not, say, the instant before the others started.
func testRunEveryAtLeastOnce(t *testing.T, bin string) {
	db := pgtest.New(t)
	shared := t.TempDir()
	runs := filepath.Join(shared, "runs")
	armed := filepath.Join(shared, "armed")
	first := filepath.Join(shared, "first")
	// The first run once armed records itself and hangs; every other run
	// appends its line.
	script := writeScript(t, shared, `
if [ -e `+armed+` ] && mkdir `+first+` 2>/dev/null; then
	echo "$PGLEADER_INSTANT $PGLEADER_TOKEN $PGLEADER_ATTEMPT $PGLEADER_OWNER" > `+first+`/run.tmp && mv `+first+`/run.tmp `+first+`/run
	echo $PPID > `+first+`/pgleader.tmp && mv `+first+`/pgleader.tmp `+first+`/pgleader.pid
	echo $$ > `+first+`/child.tmp && mv `+first+`/child.tmp `+first+`/child.pid
	exec sleep 300
fi
`+appendLine(runs))
	var procs []*process
	for _, owner := range []string{"replica-a", "replica-b", "replica-c"} {
		args := append([]string{"run", "--database", db.URL, "--key", "once-job", "--every", "5s", "--at-least-once",
			"--retry-within", "1m", "--owner", owner}, fast...)
		procs = append(procs, start(t, bin, t.TempDir(), nil, append(args, "--", script)...))
	}
	waitLines(t, runs, 2)
	writeFile(t, armed)
	pid := waitPID(t, filepath.Join(first, "pgleader.pid"))
	child := waitPID(t, filepath.Join(first, "child.pid"))
	eventually(t, "the first run wrote its line", func() bool { return readFile(t, filepath.Join(first, "run")) != "" })
	firstRun := readLines(t, filepath.Join(first, "run"))[0]
	var killed *process
	for _, p := range procs {
		if p.cmd.Process.Pid == pid {
			killed = p
		}
	}
	if killed == nil {
		t.Fatalf("the first run's parent %d is none of the pgleader processes", pid)
	}
	killed.signal(t, syscall.SIGKILL)
	killed.wait(t)
	eventually(t, "the hanging command died with its pgleader", func() bool { return !alive(child) })

	// The instant is taken over once the killed replica's lease lapsed.
	for deadline := time.Now().Add(hang); !slices.ContainsFunc(readLines(t, runs), func(l jobLine) bool { return l.instant.Equal(firstRun.instant) }); {
		if time.Now().After(deadline) {
			var logs []string
			for _, p := range procs {
				logs = append(logs, p.errors(t))
			}
			t.Fatalf("after %v: the first instant %s did not run again; the runs: %+v; the logs:\n%s",
				hang, firstRun.raw, jobRuns(t, db, "once-job"), strings.Join(logs, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitLines(t, runs, len(readLines(t, runs))+1)
	for _, p := range procs {
		if p == killed {
			continue
		}
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Errorf("exit status after SIGTERM %d, want 0; stderr:\n%s", code, p.errors(t))
		}
	}

	lines := readLines(t, runs)
	recorded := checkOncePerInstant(t, db, "once-job", lines, false)
	for _, l := range lines {
		switch {
		case l.instant.Equal(firstRun.instant):
			if l.attempt != 2 || l.token <= firstRun.token || l.owner == firstRun.owner {
				t.Errorf("the killed run's instant %s ran again as %+v; want attempt 2 by another replica with a token above %d",
					l.raw, l, firstRun.token)
			}
		case l.attempt != 1:
			t.Errorf("instant %s ran as attempt %d; only the killed run's instant is retried", l.raw, l.attempt)
		}
	}
	if r := recorded[firstRun.instant]; r.state != "done" || r.attempt != 2 {
		t.Errorf("pgleader.job_run for the killed run's instant: %+v, want done as attempt 2", r)
	}
}

// testStatusJobs lists jobs with no run, a run going on, a run done and one
// failed, all of them or one.
func testStatusJobs(t *testing.T, bin string) {
	db := pgtest.New(t)
	ctx := context.Background()
	header := "JOB +SCHEDULE +NEXT +LAST RUN +OWNER +TOKEN +STATE +ATTEMPT +TOOK +ERROR\n"
	code, stdout, stderr := runCLI(t, bin, nil, "status", "--jobs", "--database", db.URL)
	if !regexp.MustCompile("^"+header+"$").MatchString(stdout) || code != 0 {
		t.Fatalf("status --jobs without jobs: status %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}

	if _, err := db.Pool.Exec(ctx, `SELECT pgleader.job_schedule('a-never-ran', 'cron 0 3 * * *', NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, job := range []struct{ name, command string }{
		{"b-done", "true"},
		{"c-failed", "exit 3"},
		{"d-running", "exec sleep 300"},
	} {
		args := append([]string{"run", "--database", db.URL, "--key", job.name, "--every", "1s", "--owner", "pod-" + job.name}, fast...)
		p := start(t, bin, t.TempDir(), nil, append(args, "--", "sh", "-c", job.command)...)
		state := map[string]string{"b-done": "done", "c-failed": "failed", "d-running": "running"}[job.name]
		eventually(t, job.name+" has a run "+state, func() bool {
			return slices.ContainsFunc(slices.Collect(mapValues(jobRuns(t, db, job.name))), func(r jobRunRow) bool { return r.state == state })
		})
		if job.name == "d-running" {
			code, stdout, stderr = runCLI(t, bin, nil, "status", "--database", db.URL, "d-running", "--jobs")
			running := regexp.MustCompile("^" + header +
				`d-running +every 1s +\S+Z +\S+Z +pod-d-running +\d+ +running +1 +\d[\d.]*m?s so far +-\n$`)
			if code != 0 || !running.MatchString(stdout) {
				t.Errorf("status --jobs d-running: status %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
		}
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Errorf("%s: exit status after SIGTERM %d, want 0; stderr:\n%s", job.name, code, p.errors(t))
		}
	}

	code, stdout, stderr = runCLI(t, bin, nil, "status", "--database", db.URL, "--jobs")
	table := regexp.MustCompile("^" + header +
		`a-never-ran +cron 0 3 \* \* \* +- +- +- +- +- +- +- +-\n` +
		`b-done +every 1s +\S+Z +\S+Z +pod-b-done +\d+ +done +1 +\d[\d.]*[mµn]?s +-\n` +
		`c-failed +every 1s +\S+Z +\S+Z +pod-c-failed +\d+ +failed +1 +\d[\d.]*[mµn]?s +"command exited with status 3"\n` +
		// Stopped in its run, which its term's end left unrecorded.
		`d-running +every 1s +\S+Z +\S+Z +pod-d-running +\d+ +running +1 +\S+ so far +-\n$`)
	if code != 0 || !table.MatchString(stdout) {
		t.Errorf("status --jobs: status %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, bin, nil, "status", "--database", db.URL, "--jobs", "c-failed")
	if lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n"); code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], "c-failed ") {
		t.Errorf("status --jobs c-failed: status %d, stdout:\n%s", code, stdout)
	}
	code, stdout, _ = runCLI(t, bin, nil, "status", "--database", db.URL, "--jobs", "no-such-job")
	if !regexp.MustCompile("^"+header+"$").MatchString(stdout) || code != 0 {
		t.Errorf("status --jobs no-such-job: status %d, stdout:\n%s", code, stdout)
	}
}

// writeFile creates the file name, empty.
func writeFile(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(name, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// testJobsNotMigrated: on a schema before jobs (17), run --every and
// status --jobs say to migrate, with exit status 1.
func testJobsNotMigrated(t *testing.T, bin string) {
	db := pgtest.NewEmpty(t)
	env := []string{"DATABASE_URL=" + db.URL}
	if code, _, stderr := runCLI(t, bin, env, "migrate", "to", "17"); code != 0 {
		t.Fatalf("migrate to 17: status %d, stderr:\n%s", code, stderr)
	}
	for _, args := range [][]string{
		{"status", "--jobs"},
		append(append([]string{"run", "--key", "old-schema", "--every", "1s"}, fast...), "--", "true"),
	} {
		code, _, stderr := runCLI(t, bin, env, args...)
		if code != 1 || !strings.Contains(stderr, "run 'pgleader migrate up'") {
			t.Errorf("pgleader %q on schema 17: status %d, stderr:\n%s\nwant 1 and how to migrate", args, code, stderr)
		}
	}
}
