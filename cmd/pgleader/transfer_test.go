//go:build unix

package main_test

import (
	"context"
	"fmt"
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
	var marked bool
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT transfer_to IS NOT NULL OR resign_token IS NOT NULL FROM pgleader.lease WHERE key = 'job'`).Scan(&marked); err != nil || marked {
		t.Fatalf("a refused transfer marked the lease (%v)", err)
	}

	// Transfer to whichever replica does not hold the lease now.
	l := readLease(t, db.Pool, "job")
	if l.holder == nil {
		t.Fatal("nobody holds the lease")
	}
	from, to := *l.holder, "replica-b"
	if from == to {
		to = "replica-a"
	}
	eventually(t, to+" to be a candidate", func() bool {
		_, stdout, _ := runCLI(t, bin, nil, "status", "--database", db.URL, "job")
		return strings.Contains(stdout, to+"  3 ")
	})
	code, stdout, _ = runCLI(t, bin, nil, "transfer", "--database", db.URL, "job", to)
	if want := fmt.Sprintf("asked: key \"job\" term %d of %s will end at its next renewal and hand off to %s\n", l.token, from, to); code != 0 || stdout != want {
		t.Errorf("transfer: status %d, stdout %q, want 0 and %q", code, stdout, want)
	}
	eventually(t, to+" leads with a later token", func() bool {
		n := readLease(t, db.Pool, "job")
		return n.holder != nil && *n.holder == to && n.token > l.token
	})
}
