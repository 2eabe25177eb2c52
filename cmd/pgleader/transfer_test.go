//go:build unix

package main_test

import (
	"strings"
	"testing"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// testTransfer runs two replicas as processes and transfers the lease from
// a third: status lists the waiting replica as a candidate, a transfer to
// an owner that is not one is refused with a clear message and changes
// nothing, and a transfer to the candidate hands it the lease.
func testTransfer(t *testing.T, bin string) {
	db := pgtest.New(t)
	script := "trap 'exit 0' TERM\nsleep 300 & wait\n"
	run := func(owner string) *process {
		dir := t.TempDir()
		args := append([]string{"run", "--database", db.URL, "--key", "job", "--owner", owner, "--priority", "3"}, fast...)
		return start(t, bin, dir, nil, append(args, "--", writeScript(t, dir, script))...)
	}
	run("replica-a")
	eventually(t, "replica-a leads", func() bool {
		code, stdout, _ := runCLI(t, bin, nil, "status", "--database", db.URL, "job")
		return code == 0 && strings.Contains(stdout, "replica-a")
	})
	run("replica-b")
	eventually(t, "status lists replica-b as a candidate", func() bool {
		code, stdout, _ := runCLI(t, bin, nil, "status", "--database", db.URL, "job")
		return code == 0 && strings.Contains(stdout, "CANDIDATE") && strings.Contains(stdout, "replica-b  3 ")
	})

	code, stdout, _ := runCLI(t, bin, nil, "transfer", "--database", db.URL, "job", "nobody")
	if want := "not asked: \"nobody\" is not a live candidate of key \"job\" (see 'pgleader status job')\n"; code != 1 || stdout != want {
		t.Errorf("transfer to a missing owner: status %d, stdout %q, want 1 and %q", code, stdout, want)
	}
	if l := readLease(t, db.Pool, "job"); l.holder == nil || *l.holder != "replica-a" || l.token != 1 {
		t.Fatalf("a refused transfer changed the lease: %+v", l)
	}
	code, stdout, _ = runCLI(t, bin, nil, "transfer", "--database", db.URL, "job", "replica-b")
	if want := "asked: key \"job\" term 1 of replica-a will end at its next renewal and hand off to replica-b\n"; code != 0 || stdout != want {
		t.Errorf("transfer: status %d, stdout %q, want 0 and %q", code, stdout, want)
	}
	eventually(t, "replica-b leads with token 2", func() bool {
		l := readLease(t, db.Pool, "job")
		return l.holder != nil && *l.holder == "replica-b" && l.token == 2
	})
}
