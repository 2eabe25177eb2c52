package pgtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Pgbouncer starts a pgbouncer in transaction pooling mode on a free
// loopback port in front of d's server, stopped when the test ends, and
// returns a URL for d through it. Clients must not use named prepared
// statements through it (pgx: QueryExecModeExec or SimpleProtocol).
//
// If pgbouncer is not installed (Debian: apt-get install pgbouncer) the
// test is skipped with a message saying so, unless the environment
// variable RequirePgbouncer is set, as .ci/run sets it: then it fails.
//
// users are more roles that may log in through it (d's own user always
// may); a client connects as one of them with the URL's user replaced,
// and pgbouncer logs in to the server as that same role.
func (d *DB) Pgbouncer(t testing.TB, users ...string) string {
	t.Helper()
	via, _ := d.PgbouncerWithLog(t, users...)
	return via
}

// PgbouncerWithLog is Pgbouncer, and also returns a function that reads
// pgbouncer's log so far.
func (d *DB) PgbouncerWithLog(t testing.TB, users ...string) (string, func() string) {
	t.Helper()
	return d.pgbouncer(t, "transaction", users)
}

// PgbouncerSession is Pgbouncer in session pooling mode: each client has a
// server session of its own while it stays connected, and pgbouncer keeps
// that session for the next client when it leaves.
func (d *DB) PgbouncerSession(t testing.TB, users ...string) string {
	t.Helper()
	via, _ := d.pgbouncer(t, "session", users)
	return via
}

func (d *DB) pgbouncer(t testing.TB, mode string, users []string) (string, func() string) {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		for _, p := range pgbouncerPaths {
			if _, statErr := os.Stat(p); statErr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		if os.Getenv(RequirePgbouncer) != "" {
			t.Fatalf("pgtest: pgbouncer is not installed (apt-get install pgbouncer) and %s is set: %v", RequirePgbouncer, err)
		}
		t.Skipf("pgtest: SKIPPED, pgbouncer is not installed (apt-get install pgbouncer to run this test; CI sets %s=1 and runs it)", RequirePgbouncer)
	}
	target, err := url.Parse(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	// Not t.TempDir: its parent is private to root, and pgbouncer runs as
	// postgres when the tests run as root.
	dir, err := os.MkdirTemp("", "pgleader-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	username := target.User.Username()
	conf := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,application_name
logfile = %s
pidfile = %s
`, target.Hostname(), target.Port(), port, filepath.Join(dir, "users.txt"), mode,
		filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	if os.Geteuid() == 0 {
		// pgbouncer refuses to run as root; it switches to this user.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: running as root and there is no user postgres for pgbouncer: %v", err)
		}
		conf += "user = postgres\n"
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	var list strings.Builder
	for _, u := range append([]string{username}, users...) {
		fmt.Fprintf(&list, "%q \"\"\n", u)
	}
	must(os.WriteFile(filepath.Join(dir, "users.txt"), []byte(list.String()), 0o644))
	must(os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(conf), 0o644))

	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	out := &Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("pgtest: start pgbouncer: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // fast exit; SIGINT would wait for clients
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	via := *target
	via.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if err := ping(ctx, via.String()); err == nil {
			return via.String(), func() string {
				b, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
				return string(b)
			}
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgtest: pgbouncer exited: %v\n%s\n%s", err, out.String(), log)
		case <-ctx.Done():
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgtest: pgbouncer does not answer on port %d\n%s\n%s", port, out.String(), log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pgbouncerPaths are where pgbouncer is looked for when it is not on the
// PATH (Debian installs it in /usr/sbin).
var pgbouncerPaths = []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"}

// RequirePgbouncer names the environment variable that turns a missing
// pgbouncer from a skip into a failure.
const RequirePgbouncer = "PGLEADER_REQUIRE_PGBOUNCER"

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
