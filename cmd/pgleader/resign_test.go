//go:build unix

package main_test

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
	"github.com/pgleader/pgleader/pgleader"
)

// testResign runs two replicas as processes and asks the leader to resign
// from a third: the leader's command is told to stop, the other replica
// takes over, and the resigned replica keeps campaigning. A resign meant
// for a stale token, or of a key nobody holds, asks nobody and says so.
func testResign(t *testing.T, bin string) {
	db := pgtest.New(t)
	script := `trap 'echo term > got-term; exit 0' TERM
sleep 300 & wait
`
	dirA, dirB := t.TempDir(), t.TempDir()
	run := func(dir, owner, value string) *process {
		args := append([]string{"run", "--database", db.URL, "--key", "job", "--owner", owner, "--value", value}, fast...)
		return start(t, bin, dir, nil, append(args, "--", writeScript(t, dir, script))...)
	}
	a := run(dirA, "replica-a", "10.0.0.1:8080")
	eventually(t, "replica-a leads", func() bool {
		code, stdout, _ := runCLI(t, bin, nil, "status", "--database", db.URL, "job")
		return code == 0 && strings.Contains(stdout, "replica-a")
	})
	b := run(dirB, "replica-b", "10.0.0.2:8080")

	if code, stdout, _ := runCLI(t, bin, nil, "status", "--database", db.URL, "job"); code != 0 || !strings.Contains(stdout, `replica-a  1      `) || !strings.Contains(stdout, `"10.0.0.1:8080"`) {
		t.Errorf("status: %d\n%s", code, stdout)
	}
	code, stdout, _ := runCLI(t, bin, nil, "resign", "--database", db.URL, "--token", "7", "job")
	if want := "not asked: key \"job\" is held by term 1 of replica-a, not 7\n"; code != 1 || stdout != want {
		t.Errorf("resign of a stale token: status %d, stdout %q, want 1 and %q", code, stdout, want)
	}
	code, stdout, _ = runCLI(t, bin, nil, "resign", "--database", db.URL, "nobody-holds-this")
	if want := "not asked: nobody holds key \"nobody-holds-this\" (last token 0)\n"; code != 1 || stdout != want {
		t.Errorf("resign of a free key: status %d, stdout %q, want 1 and %q", code, stdout, want)
	}
	code, stdout, _ = runCLI(t, bin, nil, "resign", "--database", db.URL, "job")
	if want := "asked: key \"job\" term 1 of replica-a will end at its next renewal\n"; code != 0 || stdout != want {
		t.Errorf("resign: status %d, stdout %q, want 0 and %q", code, stdout, want)
	}
	eventually(t, "replica-b leads with token 2", func() bool {
		l := readLease(t, db.Pool, "job")
		return l.holder != nil && *l.holder == "replica-b" && l.token == 2
	})
	if readFile(t, filepath.Join(dirA, "got-term")) != "term\n" {
		t.Error("replica-a's command was not told to stop")
	}
	if !strings.Contains(a.errors(t), "reason=resigned") {
		t.Errorf("replica-a's logs do not say the term resigned:\n%s", a.errors(t))
	}
	select {
	case <-a.done:
		t.Fatalf("replica-a exited after resigning; it should campaign again:\n%s", a.errors(t))
	default:
	}
	for _, p := range []*process{a, b} {
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Errorf("exit status %d after SIGTERM:\n%s", code, p.errors(t))
		}
	}
}

// testResignTokenGiven: a --token that was given must be a positive whole
// number. An empty one ("$TOKEN" with TOKEN unset) or a negative one is bad
// usage, and the live term is not asked to end; nor is it when an empty
// --database would fall back to $DATABASE_URL.
func testResignTokenGiven(t *testing.T, bin string) {
	db := pgtest.New(t)
	ctx := context.Background()
	if _, won, err := pgleader.NewPostgres(db.Pool, pgleader.PollOnly()).Acquire(ctx, "job", "replica-a", 5*time.Minute); err != nil || !won {
		t.Fatalf("acquire: won %v, %v", won, err)
	}
	for _, tc := range []struct {
		args   []string
		env    []string
		stderr string
	}{
		{[]string{"--database", db.URL, "--token", "", "job"}, nil, `--token must be a positive whole number, got ""`},
		{[]string{"--database", db.URL, "--token=", "job"}, nil, `--token must be a positive whole number, got ""`},
		{[]string{"--database", db.URL, "--token", "-1", "job"}, nil, `--token must be a positive whole number, got "-1"`},
		{[]string{"--database", db.URL, "--token=-1", "job"}, nil, `--token must be a positive whole number, got "-1"`},
		{[]string{"--database", db.URL, "job", "--token", "-1"}, nil, `--token must be a positive whole number, got "-1"`},
		{[]string{"--database", db.URL, "--token", "0", "job"}, nil, `--token must be a positive whole number, got "0"`},
		{[]string{"--database", db.URL, "--token", " 1", "job"}, nil, `--token must be a positive whole number, got " 1"`},
		{[]string{"--database", "", "job"}, []string{"DATABASE_URL=" + db.URL}, `--database was given an empty value`},
	} {
		code, stdout, stderr := runCLI(t, bin, tc.env, append([]string{"resign"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.stderr) || stdout != "" {
			t.Errorf("pgleader resign %q: status %d, stdout %q, stderr:\n%s\nwant status 2, no output and %q", tc.args, code, stdout, stderr, tc.stderr)
		}
		var resign *int64
		if err := db.Pool.QueryRow(ctx, `SELECT resign_token FROM pgleader.lease WHERE key = 'job'`).Scan(&resign); err != nil {
			t.Fatal(err)
		}
		if resign != nil {
			t.Fatalf("pgleader resign %q asked term %d to end", tc.args, *resign)
		}
	}
	if l := readLease(t, db.Pool, "job"); l.holder == nil || *l.holder != "replica-a" || l.token != 1 {
		t.Errorf("lease after the refused resigns: %+v, want replica-a's term 1", l)
	}
}
