//go:build unix

package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
)

// TestCLI builds the command once and runs it, as an operator would,
// against PostgreSQL.
func TestCLI(t *testing.T) {
	t.Parallel()
	bin := build(t)
	for _, tc := range []struct {
		name string
		test func(t *testing.T, bin string)
	}{
		// The longest first, to start early: go test runs GOMAXPROCS
		// subtests at a time, and these wait more than they work.
		{"RunEveryAtMostOnce", testRunEveryAtMostOnce},
		{"RunEveryAtLeastOnce", testRunEveryAtLeastOnce},
		{"RunEveryAtLeastOnceShortPeriod", testRunEveryAtLeastOnceShortPeriod},
		{"Usage", testUsage},
		{"Migrate", testMigrate},
		{"MigrateTo", testMigrateTo},
		{"MigrateUnreleased", testMigrateUnreleased},
		{"MigrateConcurrently", testMigrateConcurrently},
		{"StatusAndAdvance", testStatusAndAdvance},
		{"AdvanceRange", testAdvanceRange},
		{"MigrateWithoutCreate", testMigrateWithoutCreate},
		{"Grant", testGrant},
		{"RunStop", testRunStop},
		{"RunLostLease", testRunLostLease},
		{"RunExitCode", testRunExitCode},
		{"RunCampaignsAgain", testRunCampaignsAgain},
		{"RunSecondSignal", testRunSecondSignal},
		{"Resign", testResign},
		{"ResignTokenGiven", testResignTokenGiven},
		{"Transfer", testTransfer},
		{"StatusJobs", testStatusJobs},
		{"JobsNotMigrated", testJobsNotMigrated},
		{"AppRole", testAppRole},
		{"Version", testVersion},
		{"Help", testHelp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t, bin)
		})
	}
}

type leaseRow struct {
	holder *string
	token  int64
}

func readLease(t *testing.T, pool *pgxpool.Pool, key string) leaseRow {
	t.Helper()
	var r leaseRow
	err := pool.QueryRow(context.Background(),
		`SELECT CASE WHEN expires_at > clock_timestamp() THEN holder END, token FROM pgleader.lease WHERE key = $1`, key).
		Scan(&r.holder, &r.token)
	if err != nil {
		t.Fatalf("read lease %q: %v", key, err)
	}
	return r
}

// shipped lists the schema versions this pgleader ships, as its usage
// errors name them: written out, so that a new migration fails the test
// until it is listed here (and in docs/cli.md).
const shipped = "1, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27"

func testUsage(t *testing.T, bin string) {
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{nil, 2, "no command given"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"migrate"}, 2, "want one of up, down, version or to VERSION"},
		{[]string{"migrate", "sideways"}, 2, `unknown action "sideways"`},
		{[]string{"migrate", "to"}, 2, "to needs a VERSION, one of " + shipped},
		{[]string{"migrate", "to", "0"}, 2, "VERSION must be one of the versions this pgleader ships, " + shipped + `, got "0"`},
		{[]string{"migrate", "to", fmt.Sprint(migrations.Latest + 1)}, 2, fmt.Sprintf(`VERSION must be one of the versions this pgleader ships, %s, got "%d"`, shipped, migrations.Latest+1)},
		{[]string{"migrate", "to", "2"}, 2, "ships, " + shipped + `, got "2"`},
		{[]string{"migrate", "to", "13"}, 2, "ships, " + shipped + `, got "13"`},
		{[]string{"migrate", "to", "-1"}, 2, "ships, " + shipped + `, got "-1"`},
		{[]string{"migrate", "to", "three"}, 2, "ships, " + shipped + `, got "three"`},
		{[]string{"migrate", "to", "2", "3"}, 2, "want one of up, down, version or to VERSION"},
		{[]string{"migrate", "down"}, 2, "add --yes to confirm"},
		{[]string{"status"}, 2, "no database: pass --database URL or set DATABASE_URL"},
		{[]string{"status", "a", "b"}, 2, "want at most one KEY"},
		{[]string{"status", "--nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"status", "--database", "postgres://%zz"}, 2, "--database:"},
		{[]string{"advance", "k"}, 2, "want KEY FLOOR"},
		{[]string{"advance", "k", "ten"}, 2, `FLOOR must be a whole number`},
		{[]string{"run", "--", "true"}, 2, "--key is required"},
		{[]string{"run", "--key", "k"}, 2, "no command"},
		{[]string{"run", "--key", "", "--", "true"}, 2, "--key was given an empty value"},
		{[]string{"run", "--key", "k", "--owner", "", "--", "true"}, 2, "--owner was given an empty value"},
		{[]string{"run", "--key", "k", "--health-addr", "", "--", "true"}, 2, "--health-addr was given an empty value"},
		{[]string{"run", "--database", "", "--key", "k", "--", "true"}, 2, "--database was given an empty value"},
		{[]string{"run", "--key", "k", "--priority", "-1", "--owner", "", "--", "true"}, 2, "--owner was given an empty value"},
		{[]string{"status", "--set", ""}, 2, "--set was given an empty value"},
		{[]string{"status", "--database=", "k"}, 2, "--database was given an empty value"},
		{[]string{"advance", "--database", "", "k", "-1"}, 2, "--database was given an empty value"},
		{[]string{"advance", "k", "-1", "--database", "postgres://%zz"}, 2, `FLOOR must be a whole number from 0 to`},
		{[]string{"run", "--key", "k", "--ttl", "1s", "--renew-every", "1s", "--", "true"}, 2,
			"--renew-every (1s) + --yield-grace (166.666666ms) + --release-timeout (83.333333ms) + --margin (83.333333ms) = 1.333333332s must be less than --ttl (1s)"},
		{[]string{"run", "--key", "k", "--ttl", "soon", "--", "true"}, 2, `invalid value "soon" for flag -ttl`},
		{[]string{"run", "--key", "k", "--", "/no/such/command"}, 127, "no such file"},
		{[]string{"run", "--key", "k", "--", "true"}, 2, "no database"},
		{[]string{"run", "--every", "1m", "--", "true"}, 2, "--key is required"},
		{[]string{"run", "--key", "k", "--every", "1s", "--cron", "@hourly", "--", "true"}, 2, "--every and --cron are exclusive"},
		{[]string{"run", "--key", "k", "--every", "500ms", "--", "true"}, 2, "--every must be at least 1s, got 500ms"},
		{[]string{"run", "--key", "k", "--every", "0s", "--", "true"}, 2, "--every must be at least 1s, got 0s"},
		{[]string{"run", "--key", "k", "--every", "-1m", "--", "true"}, 2, "--every must be at least 1s, got -1m0s"},
		{[]string{"run", "--key", "k", "--cron", "61 * * * *", "--", "true"}, 2, `--cron: cron expression "61 * * * *":`},
		{[]string{"run", "--key", "k", "--cron", "", "--", "true"}, 2, "--cron was given an empty value"},
		{[]string{"run", "--key", "k", "--cron", "@every 500ms", "--", "true"}, 2, "--cron: cron expression \"@every 500ms\": @every must be at least 1s"},
		{[]string{"run", "--key", "k", "--every", "1m", "--exit-with-child", "--", "true"}, 2, "--exit-with-child does not go with --every or --cron"},
		{[]string{"run", "--key", "k", "--cron", "@daily", "--health-addr", ":0", "--", "true"}, 2, "--health-addr does not go with --every or --cron"},
		{[]string{"run", "--key", "k", "--every", "1m", "--value", "x", "--", "true"}, 2, "--value does not go with --every or --cron"},
		{[]string{"run", "--key", "k", "--every", "1m", "--priority", "2", "--", "true"}, 2, "--priority does not go with --every or --cron"},
		{[]string{"run", "--key", "k", "--at-least-once", "--", "true"}, 2, "--at-least-once needs --every or --cron"},
		{[]string{"run", "--key", "k", "--missed", "latest", "--", "true"}, 2, "--missed needs --every or --cron"},
		{[]string{"run", "--key", "k", "--start-within", "5s", "--", "true"}, 2, "--start-within needs --every or --cron"},
		{[]string{"run", "--key", "k", "--every", "1m", "--missed", "never", "--", "true"}, 2, `--missed must be skip or latest, got "never"`},
		{[]string{"run", "--key", "k", "--every", "1m", "--retry-within", "5m", "--", "true"}, 2, "--retry-within needs --at-least-once"},
		{[]string{"run", "--key", "k", "--every", "1m", "--at-least-once", "--retry-within", "-5m", "--", "true"}, 2, "--retry-within must not be negative, got -5m0s"},
		{[]string{"run", "--key", "k", "--every", "1m", "--start-within", "-1s", "--", "true"}, 2, "--start-within must not be negative, got -1s"},
		{[]string{"run", "--key", "k", "--every", "1m", "--missed", "latest", "--start-within", "5s", "--", "true"}, 2, "--start-within goes with --missed skip"},
		{[]string{"run", "--key", "k", "--every", "1m", "--ttl", "1s", "--renew-every", "1s", "--", "true"}, 2, "must be less than --ttl (1s)"},
		{[]string{"run", "--key", "k", "--every", "1m", "--at-least-once", "--missed", "latest", "--", "true"}, 2, "no database"},
		{[]string{"run", "--key", "k", "--cron", "CRON_TZ=UTC 0 3 * * *", "--", "true"}, 2, "no database"},
		{[]string{"status", "--jobs", "--set", "s"}, 2, "--jobs and --set are exclusive"},
		{[]string{"status", "--jobs", "a", "b"}, 2, "want at most one KEY"},
		{[]string{"--help"}, 0, ""},
		{[]string{"help"}, 0, ""},
		{[]string{"run", "-h"}, 0, "Usage: pgleader run"},
		{[]string{"help", "run"}, 0, "Usage: pgleader run"},
		{[]string{"help", "version"}, 0, "Usage: pgleader version"},
		{[]string{"help", "frobnicate"}, 2, `unknown command "frobnicate" (want migrate, status, advance, resign, transfer, grant, run or version)`},
		{[]string{"help", "run", "status"}, 2, "help takes at most one COMMAND"},
		{[]string{"help-flags", "x"}, 2, "help-flags takes no arguments"},
		{[]string{"version", "x"}, 2, `version: takes no arguments, got ["x"]`},
		{[]string{"version", "--database", ""}, 2, "--database was given an empty value"},
		{[]string{"version", "--database", "postgres://%zz"}, 2, "--database:"},
	} {
		code, _, stderr := runCLI(t, bin, nil, tc.args...)
		if code != tc.status || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("pgleader %q: status %d, stderr:\n%s\nwant status %d and %q", tc.args, code, stderr, tc.status, tc.stderr)
		}
		if tc.status == 2 && !strings.Contains(stderr, "-h' for usage") {
			t.Errorf("pgleader %q: stderr does not point to the help:\n%s", tc.args, stderr)
		}
	}
}

// testMigrate migrates an empty database up and down, naming it by
// DATABASE_URL.
func testMigrate(t *testing.T, bin string) {
	db := pgtest.NewEmpty(t)
	env := []string{"DATABASE_URL=" + db.URL}
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "version"}, fmt.Sprintf("schema version %d (this pgleader ships %d)\n", 0, migrations.Latest)},
		{[]string{"migrate", "up"}, fmt.Sprintf("schema version %d (this pgleader ships %d)\n", migrations.Latest, migrations.Latest)},
		{[]string{"migrate", "up"}, fmt.Sprintf("schema version %d (this pgleader ships %d)\n", migrations.Latest, migrations.Latest)},
		{[]string{"migrate", "version"}, fmt.Sprintf("schema version %d (this pgleader ships %d)\n", migrations.Latest, migrations.Latest)},
		{[]string{"status"}, "KEY  HOLDER  TOKEN  EXPIRES IN  VALUE\n"},
		{[]string{"migrate", "--yes", "down"}, fmt.Sprintf("schema version %d (this pgleader ships %d)\n", 0, migrations.Latest)},
	} {
		code, stdout, stderr := runCLI(t, bin, env, step.args...)
		if code != 0 || stdout != step.want {
			t.Fatalf("pgleader %q: status %d, stdout %q, stderr:\n%s\nwant 0 and %q", step.args, code, stdout, stderr, step.want)
		}
	}
	code, _, stderr := runCLI(t, bin, env, "status")
	if code != 1 || !strings.Contains(stderr, "run 'pgleader migrate up'") {
		t.Fatalf("status without the schema: status %d, stderr:\n%s", code, stderr)
	}
}

// testMigrateTo migrates an empty database to the version this pgleader
// ships, and back with down: down only with --yes, a version out of range
// refused, and a refused step changes nothing.
func testMigrateTo(t *testing.T, bin string) {
	db := pgtest.NewEmpty(t)
	env := []string{"DATABASE_URL=" + db.URL}
	latest := fmt.Sprintf("schema version %d (this pgleader ships %d)\n", migrations.Latest, migrations.Latest)
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "to", fmt.Sprint(migrations.Latest)}, latest},
		{[]string{"migrate", "to", fmt.Sprint(migrations.Latest)}, latest},
		{[]string{"migrate", "--yes", "down"}, fmt.Sprintf("schema version 0 (this pgleader ships %d)\n", migrations.Latest)},
		{[]string{"migrate", "to", "1"}, fmt.Sprintf("schema version 1 (this pgleader ships %d)\n", migrations.Latest)},
		{[]string{"migrate", "up"}, latest},
	} {
		code, stdout, stderr := runCLI(t, bin, env, step.args...)
		if code != 0 || stdout != step.want {
			t.Fatalf("pgleader %q: status %d, stdout %q, stderr:\n%s\nwant 0 and %q", step.args, code, stdout, stderr, step.want)
		}
	}
	for _, bad := range []string{"0", "2", fmt.Sprint(migrations.Latest + 1)} {
		code, _, stderr := runCLI(t, bin, env, "migrate", "to", bad)
		if want := "VERSION must be one of the versions this pgleader ships, " + shipped; code != 2 || !strings.Contains(stderr, want) {
			t.Fatalf("migrate to %s: status %d, stderr:\n%s\nwant 2 and %q", bad, code, stderr, want)
		}
	}
	code, _, stderr := runCLI(t, bin, env, "migrate", "to", "1")
	if want := "to 1 reverts versions 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27 and drops what it added; add --yes to confirm"; code != 2 || !strings.Contains(stderr, want) {
		t.Fatalf("migrate to 1 without --yes: status %d, stderr:\n%s\nwant 2 and %q", code, stderr, want)
	}
	if code, stdout, _ := runCLI(t, bin, env, "migrate", "version"); code != 0 || stdout != latest {
		t.Fatalf("after the refused steps: status %d, %q; want %q", code, stdout, latest)
	}
}

// testMigrateUnreleased: on a database a development build left at one of
// the squashed versions, every migrate action fails (status 1) saying so
// and how to recover; version still prints the version.
func testMigrateUnreleased(t *testing.T, bin string) {
	db := pgtest.NewEmpty(t)
	env := []string{"DATABASE_URL=" + db.URL}
	if code, _, stderr := runCLI(t, bin, env, "migrate", "up"); code != 0 {
		t.Fatalf("migrate up: status %d, stderr:\n%s", code, stderr)
	}
	if _, err := db.Pool.Exec(context.Background(), `UPDATE `+migrations.HistoryTable+` SET version = 13`); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"migrate", "up"}, {"migrate", "to", "1"}, {"migrate", "--yes", "down"}, {"migrate", "version"}} {
		code, stdout, stderr := runCLI(t, bin, env, args...)
		if code != 1 || !strings.Contains(stderr, "unreleased development version") || !strings.Contains(stderr, "DROP SCHEMA pgleader CASCADE") {
			t.Errorf("pgleader %q at version 13: status %d, stderr:\n%s\nwant 1 and how to recover", args, code, stderr)
		}
		if args[1] == "version" && stdout != fmt.Sprintf("schema version 13 (this pgleader ships %d)\n", migrations.Latest) {
			t.Errorf("pgleader %q at version 13: stdout %q", args, stdout)
		}
	}
}

// testMigrateConcurrently has several processes migrate one empty database
// at once, three times over: every one succeeds and the schema is whole.
func testMigrateConcurrently(t *testing.T, bin string) {
	for round := 0; round < 3; round++ {
		db := pgtest.NewEmpty(t)
		env := []string{"DATABASE_URL=" + db.URL}
		var procs []*process
		for i := 0; i < 4; i++ {
			procs = append(procs, start(t, bin, t.TempDir(), env, "migrate", "up"))
		}
		for i, p := range procs {
			if code := p.wait(t); code != 0 || p.output(t) != fmt.Sprintf("schema version %d (this pgleader ships %d)\n", migrations.Latest, migrations.Latest) {
				t.Fatalf("round %d, process %d: status %d, stdout %q, stderr:\n%s", round, i, code, p.output(t), p.errors(t))
			}
		}
		pg := pgleader.NewPostgres(db.Pool, pgleader.PollOnly())
		if l, ok, err := pg.Acquire(context.Background(), "k", "a", time.Minute); err != nil || !ok || l.Token != 1 {
			t.Fatalf("round %d: acquire on the migrated database = %+v, %v, %v", round, l, ok, err)
		}
		var functions int
		if err := db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'pgleader'`).
			Scan(&functions); err != nil || functions == 0 {
			t.Fatalf("round %d: %d functions in schema pgleader, %v", round, functions, err)
		}
	}
}

func testStatusAndAdvance(t *testing.T, bin string) {
	db := pgtest.New(t)
	ctx := context.Background()
	pg := pgleader.NewPostgres(db.Pool, pgleader.PollOnly())

	code, stdout, stderr := runCLI(t, bin, nil, "advance", "--database", db.URL, "alpha", "41")
	if want := "advanced: key \"alpha\" counter 41; the next term draws 42\n"; code != 0 || stdout != want {
		t.Fatalf("advance: status %d, stdout %q, stderr:\n%s\nwant %q", code, stdout, stderr, want)
	}
	if l, ok, err := pg.Acquire(ctx, "alpha", "replica-a", time.Minute); err != nil || !ok || l.Token != 42 {
		t.Fatalf("acquire after advance: %+v %v %v, want token 42", l, ok, err)
	}
	if l, ok, err := pg.Acquire(ctx, "beta", "replica-b", time.Minute); err != nil || !ok {
		t.Fatalf("acquire beta: %+v %v %v", l, ok, err)
	} else if _, err := pg.Release(ctx, "beta", "replica-b", l.Token); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr = runCLI(t, bin, nil, "status", "--database", db.URL)
	table := regexp.MustCompile(`^KEY +HOLDER +TOKEN +EXPIRES IN +VALUE\n` +
		// The minute's lease, less however long acquiring and starting
		// the command took on a busy machine.
		`alpha +replica-a +42 +(5\d(\.\d+)?|60)s +-\n` +
		`beta +- +1 +- +-\n$`)
	if code != 0 || !table.MatchString(stdout) {
		t.Fatalf("status: status %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, bin, nil, "status", "beta", "--database", db.URL)
	if want := "KEY   HOLDER  TOKEN  EXPIRES IN  VALUE\nbeta  -       1      -           -\n"; code != 0 || stdout != want {
		t.Fatalf("status beta: status %d, stdout %q, want %q", code, stdout, want)
	}
	code, stdout, _ = runCLI(t, bin, nil, "status", "--database", db.URL, "never-seen")
	if want := "never-seen  -       0      -           -\n"; code != 0 || !strings.HasSuffix(stdout, want) {
		t.Fatalf("status never-seen: status %d, stdout %q, want a row %q", code, stdout, want)
	}

	code, stdout, _ = runCLI(t, bin, nil, "advance", "--database", db.URL, "alpha", "100")
	if want := "not advanced: key \"alpha\" is held; counter 42\n"; code != 1 || stdout != want {
		t.Fatalf("advance while held: status %d, stdout %q, want 1 and %q", code, stdout, want)
	}
	code, stdout, _ = runCLI(t, bin, nil, "advance", "--database", db.URL, "beta", "0")
	if want := "advanced: key \"beta\" counter 1; the next term draws 2\n"; code != 0 || stdout != want {
		t.Fatalf("advance below the counter: status %d, stdout %q, want %q", code, stdout, want)
	}
}

// testRunStop starts a leader, reads its health and the environment its
// command saw, then stops it with SIGTERM: the command gets SIGTERM, its
// grandchild dies with it, and the lease is free afterwards.
func testRunStop(t *testing.T, bin string) {
	db := pgtest.New(t)
	dir := t.TempDir()
	script := writeScript(t, dir, `
trap 'echo term > got-term; exit 0' TERM
echo "$PGLEADER_KEY $PGLEADER_TOKEN $PGLEADER_OWNER" > env.tmp && mv env.tmp env
sleep 300 & echo $! > grandchild.pid
wait
`)
	args := append([]string{"run", "--database", db.URL, "--key", "stop-job", "--owner", "replica-1",
		"--health-addr", "127.0.0.1:0"}, fast...)
	p := start(t, bin, dir, []string{"INHERITED=yes"}, append(args, "--", script)...)
	grandchild := waitPID(t, filepath.Join(dir, "grandchild.pid"))
	eventually(t, "the command wrote its environment", func() bool { return readFile(t, filepath.Join(dir, "env")) != "" })
	if env := readFile(t, filepath.Join(dir, "env")); env != "stop-job 1 replica-1\n" {
		t.Errorf("PGLEADER_KEY, _TOKEN, _OWNER = %q, want %q", env, "stop-job 1 replica-1\n")
	}
	if l := readLease(t, db.Pool, "stop-job"); l.holder == nil || *l.holder != "replica-1" || l.token != 1 {
		t.Errorf("lease while running: %+v", l)
	}

	var addr string
	eventually(t, "the health endpoint is logged", func() bool {
		m := regexp.MustCompile(`msg="health endpoint listening".* addr=(\S+)`).FindStringSubmatch(p.errors(t))
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var health []struct {
		Key     string `json:"key"`
		Owner   string `json:"owner"`
		Leading bool   `json:"leading"`
		Token   int64  `json:"token"`
	}
	err = json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(health) != 1 || !health[0].Leading || health[0].Token != 1 || health[0].Owner != "replica-1" {
		t.Errorf("healthz: %d %+v %v", resp.StatusCode, health, err)
	}

	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Errorf("exit status after SIGTERM %d, want 0; stderr:\n%s", code, p.errors(t))
	}
	if readFile(t, filepath.Join(dir, "got-term")) != "term\n" {
		t.Error("the command did not get SIGTERM")
	}
	if alive(grandchild) {
		t.Errorf("grandchild %d outlived pgleader", grandchild)
	}
	if l := readLease(t, db.Pool, "stop-job"); l.holder != nil || l.token != 1 {
		t.Errorf("lease after the stop: holder %v token %d, want free with token 1", l.holder, l.token)
	}
	logs := p.errors(t)
	for _, want := range []string{
		`msg="command started" key=stop-job owner=replica-1 token=1 pid=`,
		`msg="term ending; SIGTERM to the command's process group" key=stop-job owner=replica-1 token=1 reason=stopped`,
		`msg="term ended" key=stop-job owner=replica-1 token=1 reason=stopped`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs lack %q:\n%s", want, logs)
		}
	}
}

// testRunLostLease takes the lease away behind the leader's back: the next
// renewal finds it lost and the whole command, a grandchild and a process
// that left the group with setsid, is killed at once with SIGKILL.
func testRunLostLease(t *testing.T, bin string) {
	db := pgtest.New(t)
	dir := t.TempDir()
	script := writeScript(t, dir, `
trap 'echo term > got-term' TERM
echo $$ > child.tmp && mv child.tmp child.pid
sleep 300 & echo $! > grandchild.tmp && mv grandchild.tmp grandchild.pid
setsid sleep 300 & echo $! > stray.tmp && mv stray.tmp stray.pid
wait
wait
`)
	args := append([]string{"run", "--database", db.URL, "--key", "lost-job", "--exit-with-child"}, fast...)
	p := start(t, bin, dir, nil, append(args, "--", script)...)
	child := waitPID(t, filepath.Join(dir, "child.pid"))
	grandchild := waitPID(t, filepath.Join(dir, "grandchild.pid"))
	stray := waitPID(t, filepath.Join(dir, "stray.pid"))
	eventually(t, "the stray left the command's process group", func() bool {
		pgid, err := syscall.Getpgid(stray)
		return err == nil && pgid != child
	})

	_, err := db.Pool.Exec(context.Background(),
		`UPDATE pgleader.lease SET holder = 'intruder', token = token + 1, expires_at = clock_timestamp() + interval '1 minute' WHERE key = $1`,
		"lost-job")
	if err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit status %d, want %d (the command was killed by SIGKILL); stderr:\n%s", code, 128+int(syscall.SIGKILL), p.errors(t))
	}
	for name, pid := range map[string]int{"child": child, "grandchild": grandchild, "stray": stray} {
		if alive(pid) {
			t.Errorf("the %s %d outlived the lease", name, pid)
		}
	}
	if readFile(t, filepath.Join(dir, "got-term")) != "" {
		t.Error("the command got SIGTERM: a lost lease must kill at once")
	}
	if l := readLease(t, db.Pool, "lost-job"); l.holder == nil || *l.holder != "intruder" || l.token != 2 {
		t.Errorf("lease after the loss: %+v, want the intruder's with token 2", l)
	}
	logs := p.errors(t)
	for _, want := range []string{
		`msg="lease lost; cancelling the body" key=lost-job`,
		`msg="term cancelled; SIGKILL to the command's process group" key=lost-job owner=`,
		`reason=lost`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs lack %q:\n%s", want, logs)
		}
	}
}

// testRunExitCode passes the command's exit status through, after the
// grandchild it left behind is gone and the lease released.
func testRunExitCode(t *testing.T, bin string) {
	db := pgtest.New(t)
	dir := t.TempDir()
	args := append([]string{"run", "--database", db.URL, "--key", "exit-job", "--exit-with-child"}, fast...)
	p := start(t, bin, dir, nil, append(args, "--", "sh", "-c", "sleep 300 & echo $! > grandchild.pid; exit 7")...)
	if code := p.wait(t); code != 7 {
		t.Fatalf("exit status %d, want 7; stderr:\n%s", code, p.errors(t))
	}
	grandchild := waitPID(t, filepath.Join(dir, "grandchild.pid"))
	if alive(grandchild) {
		t.Errorf("the grandchild %d the command left behind outlived it", grandchild)
	}
	if !strings.Contains(p.errors(t), "the command left processes behind; SIGTERM to them") {
		t.Errorf("the logs do not say the leftovers were sent SIGTERM:\n%s", p.errors(t))
	}
	if l := readLease(t, db.Pool, "exit-job"); l.holder != nil || l.token != 1 {
		t.Errorf("lease after the exit: holder %v token %d, want free with token 1", l.holder, l.token)
	}
}

// testRunCampaignsAgain restarts the command in a new term each time it
// exits, without --exit-with-child.
func testRunCampaignsAgain(t *testing.T, bin string) {
	db := pgtest.New(t)
	dir := t.TempDir()
	args := append([]string{"run", "--database", db.URL, "--key", "again-job"}, fast...)
	p := start(t, bin, dir, nil, append(args, "--", "sh", "-c", `echo "$PGLEADER_TOKEN" >> tokens`)...)
	eventually(t, "the command ran in three terms", func() bool {
		return strings.HasPrefix(readFile(t, filepath.Join(dir, "tokens")), "1\n2\n3\n")
	})
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t); code != 0 {
		t.Errorf("exit status after SIGINT %d, want 0; stderr:\n%s", code, p.errors(t))
	}
	if l := readLease(t, db.Pool, "again-job"); l.holder != nil {
		t.Errorf("lease after the stop: held by %q", *l.holder)
	}
}

// testRunSecondSignal stops a leader whose command ignores SIGTERM and has a
// long yield grace: a second signal kills the command's group at once.
func testRunSecondSignal(t *testing.T, bin string) {
	db := pgtest.New(t)
	dir := t.TempDir()
	script := writeScript(t, dir, `
trap '' TERM
echo $$ > child.tmp && mv child.tmp child.pid
while :; do sleep 1; done
`)
	// The yield grace (40s) is longer than the hang detector (30s).
	p := start(t, bin, dir, nil, "run", "--database", db.URL, "--key", "stubborn", "--ttl", "2m",
		"--yield-grace", "40s", "--exit-with-child", "--", script)
	child := waitPID(t, filepath.Join(dir, "child.pid"))
	p.signal(t, syscall.SIGTERM)
	eventually(t, "the command was sent SIGTERM", func() bool {
		return strings.Contains(p.errors(t), "SIGTERM to the command's process group")
	})
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit status %d, want %d; stderr:\n%s", code, 128+int(syscall.SIGKILL), p.errors(t))
	}
	if alive(child) {
		t.Errorf("the command %d outlived pgleader", child)
	}
	if l := readLease(t, db.Pool, "stubborn"); l.holder != nil {
		t.Errorf("lease after the stop: held by %q", *l.holder)
	}
	if !strings.Contains(p.errors(t), `msg="second signal; killing the command's group now"`) {
		t.Errorf("the logs lack the second signal:\n%s", p.errors(t))
	}
}
