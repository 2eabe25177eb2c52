package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"
	"time"

	"github.com/pgleader/pgleader/examples/internal/digests"
	"github.com/pgleader/pgleader/internal/pgtest"
)

// TestHandoverBetweenProcesses runs the publisher as two OS processes on one
// database, stops the leader with SIGTERM as a deploy would, and reads what
// the table says happened.
func TestHandoverBetweenProcesses(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	bin := buildPublisher(t)
	ctx := context.Background()
	store := digests.Store{DB: db.Pool, Name: "digest-publisher"}
	if err := store.Setup(ctx); err != nil { // so the test can read the log before a replica has set up
		t.Fatal(err)
	}

	procs := map[string]*process{
		"replica-a": startPublisher(t, bin, db.URL, "replica-a"),
		"replica-b": startPublisher(t, bin, db.URL, "replica-b"),
	}
	units := waitForUnits(t, store, "the leader to publish five units", func(u []digests.Unit) bool { return len(u) >= 5 })
	leader := procs[units[0].Owner]
	var successor *process
	for _, p := range procs {
		if p != leader {
			successor = p
		}
	}

	var stopAt time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&stopAt); err != nil {
		t.Fatal(err)
	}
	leader.signal(t, syscall.SIGTERM)
	leader.waitExit(t, 10*time.Second)

	waitForUnits(t, store, "the successor to publish three units", func(u []digests.Unit) bool {
		n := 0
		for _, x := range u {
			if x.Owner == successor.owner {
				n++
			}
		}
		return n >= 3
	})
	successor.signal(t, syscall.SIGTERM)
	successor.waitExit(t, 10*time.Second)
	units, err := store.Units(ctx)
	if err != nil {
		t.Fatal(err)
	}

	checkLog(t, units)
	owners := map[int64]string{}
	first2 := -1
	for i, u := range units {
		owners[u.Token] = u.Owner
		if u.Token == 2 && first2 < 0 {
			first2 = i
		}
	}
	if len(owners) != 2 || owners[1] != leader.owner || owners[2] != successor.owner {
		t.Fatalf("tokens and owners: %v; want token 1 by %s, token 2 by %s", owners, leader.owner, successor.owner)
	}
	gap := units[first2].PublishedAt.Sub(stopAt)
	t.Logf("%s published %d units with token 1; SIGTERM; %s published its first unit with token 2 %v later (database clock)",
		leader.owner, first2, successor.owner, gap.Round(time.Millisecond))
	if gap > time.Second {
		t.Errorf("the successor's first unit came %v after the leader's SIGTERM; want within 1s", gap)
	}
}

// checkLog checks the log's invariants: each term numbers its units 1, 2,
// 3, ... without gaps, and tokens never go down, so no unit of a term is
// published after a newer term's first unit.
func checkLog(t *testing.T, units []digests.Unit) {
	t.Helper()
	for i, u := range units {
		if i == 0 || u.Token != units[i-1].Token {
			if u.Seq != 1 {
				t.Errorf("unit %d (token %d) is its term's first but has seq %d", u.ID, u.Token, u.Seq)
			}
		} else if u.Seq != units[i-1].Seq+1 {
			t.Errorf("gap in term %d: seq %d follows seq %d", u.Token, u.Seq, units[i-1].Seq)
		}
		if i > 0 && u.Token < units[i-1].Token {
			t.Errorf("unit %d with token %d was published after a unit with token %d", u.ID, u.Token, units[i-1].Token)
		}
	}
	if t.Failed() {
		t.Logf("log: %+v", units)
	}
}

// buildPublisher builds this package into a temporary directory, with the
// race detector if the test itself runs with it.
func buildPublisher(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "publisher")
	args := []string{"build", "-o", bin}
	if raceEnabled() {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func raceEnabled() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// process is one running publisher.
type process struct {
	owner string
	cmd   *exec.Cmd
	out   pgtest.Buffer
	done  chan struct{}
	err   error // set before done is closed
}

// startPublisher runs the publisher with the database and owner in the
// environment, as docker-compose.yml passes them. It is killed, if still
// running, when the test ends, and its output is logged if the test failed.
func startPublisher(t *testing.T, bin, databaseURL, owner string) *process {
	t.Helper()
	p := &process{owner: owner, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "-migrate", "-every", "50ms", "-key", "digest-publisher")
	p.cmd.Env = append(os.Environ(), "DATABASE_URL="+databaseURL, "PUBLISHER_OWNER="+owner)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s's output:\n%s", owner, p.out.String())
		}
	})
	return p
}

func (p *process) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s: %v", p.owner, err)
	}
}

// waitExit waits for the process to exit, and fails the test unless it
// exits 0 within timeout.
func (p *process) waitExit(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("%s exited: %v", p.owner, p.err)
		}
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v of SIGTERM", p.owner, timeout)
	}
}

func waitForUnits(t *testing.T, store digests.Store, what string, cond func([]digests.Unit) bool) []digests.Unit {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		units, err := store.Units(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if cond(units) {
			return units
		}
	}
	t.Fatalf("timed out waiting for %s", what)
	return nil
}
