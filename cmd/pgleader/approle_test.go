//go:build unix

package main_test

import (
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// testAppRole runs the README's commands as an application role given
// 'pgleader grant', with --database naming that role: migrate up, two
// replicas under run, status (every key, and one key with its
// candidates), advance, resign and transfer. Another application role is
// refused on the first role's key, and changes nothing. Neither replica
// logs a refusal or a failed hand-off rehearsal.
func testAppRole(t *testing.T, bin string) {
	db := pgtest.New(t)
	role, app := db.NewRole(t, "")
	if code, stdout, stderr := runCLI(t, bin, nil, "grant", "--database", db.URL, role); code != 0 || !strings.Contains(stdout, "and SELECT on") {
		t.Fatalf("grant %s: status %d, stdout %q, stderr:\n%s", role, code, stdout, stderr)
	}
	other, otherURL := db.NewRole(t, "SELECT pgleader.grant_usage($1)")
	cli := func(url string, args ...string) (int, string, string) {
		return runCLI(t, bin, nil, append(args[:1:1], append([]string{"--database", url}, args[1:]...)...)...)
	}
	want := func(what string, code int, stdout, stderr string, wantCode int, wantOut *regexp.Regexp) {
		t.Helper()
		if code != wantCode || !wantOut.MatchString(stdout) {
			t.Fatalf("%s: status %d, stdout:\n%s\nstderr:\n%s\nwant status %d and stdout matching %s", what, code, stdout, stderr, wantCode, wantOut)
		}
	}

	code, stdout, stderr := cli(app, "migrate", "up")
	want("migrate up as the application role", code, stdout, stderr, 0, regexp.MustCompile(`^schema version \d+ \(this pgleader ships \d+\)\n$`))

	script := "trap 'exit 0' TERM\nsleep 300 & wait\n"
	run := func(owner, value string) *process {
		dir := t.TempDir()
		args := append([]string{"run", "--database", app, "--key", "nightly-report", "--owner", owner, "--value", value}, fast...)
		return start(t, bin, dir, nil, append(args, "--", writeScript(t, dir, script))...)
	}
	a := run("pod-a", "10.0.0.1:8080")
	eventually(t, "pod-a leads", func() bool {
		code, stdout, _ := cli(app, "status", "nightly-report")
		return code == 0 && strings.Contains(stdout, "pod-a")
	})
	b := run("pod-b", "10.0.0.2:8080")
	eventually(t, "status lists pod-b as a candidate", func() bool {
		code, stdout, _ := cli(app, "status", "nightly-report")
		return code == 0 && strings.Contains(stdout, "CANDIDATE") && strings.Contains(stdout, "\npod-b ")
	})

	code, stdout, stderr = cli(app, "advance", "outbox-relay", "1200")
	want("advance a free key", code, stdout, stderr, 0, regexp.MustCompile(`^advanced: key "outbox-relay" counter 1200; the next term draws 1201\n$`))
	code, stdout, stderr = cli(app, "status")
	want("status", code, stdout, stderr, 0, regexp.MustCompile(`^KEY +HOLDER +TOKEN +EXPIRES IN +VALUE\n`+
		`nightly-report +pod-a +1 +\S+s +"10\.0\.0\.1:8080"\n`+
		`outbox-relay +- +1200 +- +-\n$`))

	// Another role may not steer the first role's key, and asking changes
	// nothing.
	for _, args := range [][]string{
		{"resign", "nightly-report"},
		{"transfer", "nightly-report", "pod-b"},
		{"advance", "nightly-report", "5000"},
	} {
		code, stdout, stderr := cli(otherURL, args...)
		if code != 1 || stdout != "" || !strings.Contains(stderr, "belongs to role "+role+"; role "+other+" may not") {
			t.Errorf("pgleader %q as another role: status %d, stdout %q, stderr:\n%s\nwant 1 and the refusal", args, code, stdout, stderr)
		}
	}
	code, stdout, stderr = cli(app, "status", "nightly-report")
	want("status after the other role's attempts", code, stdout, stderr, 0, regexp.MustCompile(`(?s)^KEY +HOLDER +TOKEN +EXPIRES IN +VALUE\n`+
		`nightly-report +pod-a +1 +\S+s +"10\.0\.0\.1:8080"\n\nCANDIDATE .*\npod-b +0 `))

	// The application role steers its own key: resign hands it to pod-b,
	// transfer back to pod-a.
	code, stdout, stderr = cli(app, "resign", "--token", "7", "nightly-report")
	want("resign of a stale token", code, stdout, stderr, 1, regexp.MustCompile(`^not asked: key "nightly-report" is held by term 1 of pod-a, not 7\n$`))
	code, stdout, stderr = cli(app, "resign", "nightly-report")
	want("resign", code, stdout, stderr, 0, regexp.MustCompile(`^asked: key "nightly-report" term 1 of pod-a will end at its next renewal\n$`))
	eventually(t, "pod-b leads with token 2", func() bool {
		_, stdout, _ := cli(app, "status")
		return regexp.MustCompile(`\nnightly-report +pod-b +2 +\S+s +"10\.0\.0\.2:8080"\n`).MatchString(stdout)
	})
	eventually(t, "pod-a to be a candidate again", func() bool {
		_, stdout, _ := cli(app, "status", "nightly-report")
		return strings.Contains(stdout, "\npod-a ")
	})
	code, stdout, stderr = cli(app, "transfer", "nightly-report", "pod-a")
	want("transfer", code, stdout, stderr, 0, regexp.MustCompile(`^asked: key "nightly-report" term 2 of pod-b will end at its next renewal and hand off to pod-a\n$`))
	eventually(t, "pod-a leads with token 3", func() bool {
		_, stdout, _ := cli(app, "status")
		return regexp.MustCompile(`\nnightly-report +pod-a +3 +\S+s +"10\.0\.0\.1:8080"\n`).MatchString(stdout)
	})

	for _, p := range []*process{a, b} {
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Errorf("exit status %d after SIGTERM:\n%s", code, p.errors(t))
		}
		logs := p.errors(t)
		for _, bad := range []string{"level=ERROR", "42501", "permission denied", "preparing the hand-off failed", "rehearsing a hand-off"} {
			if strings.Contains(logs, bad) {
				t.Errorf("a replica run as the application role logged %q:\n%s", bad, logs)
			}
		}
		if !strings.Contains(logs, `msg="handed the lease off"`) {
			t.Errorf("a replica run as the application role never handed the lease off:\n%s", logs)
		}
	}
}
