package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Cluster is a throwaway PostgreSQL cluster of the chaos run's own, in a
// temporary directory, so the run may restart the server. It is never the
// machine's main server. Root cannot run PostgreSQL, so as root the cluster
// runs as the OS user postgres (through runuser).
type Cluster struct {
	dir, bin string
	port     int
	asUser   string // run the server binaries as this user; "" for the current one
	opts     ClusterOptions
	mu       sync.Mutex
}

// ClusterOptions change how a cluster's server runs.
type ClusterOptions struct {
	// Settings are extra server settings, name=value, passed as -c.
	Settings []string
	// Env is added to the server's environment (e.g. LD_PRELOAD and
	// FAKETIME for libfaketime).
	Env []string
}

// FindPostgresBin returns the directory of initdb and pg_ctl: the newest
// /usr/lib/postgresql/*/bin, or the PATH's.
func FindPostgresBin() (string, error) {
	if found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(found) > 0 {
		slices.SortFunc(found, func(a, b string) int { return versionOf(a) - versionOf(b) })
		return filepath.Dir(found[len(found)-1]), nil
	}
	p, err := exec.LookPath("initdb")
	if err != nil {
		return "", fmt.Errorf("chaos: no PostgreSQL server binaries (initdb) found")
	}
	return filepath.Dir(p), nil
}

func versionOf(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

// StartCluster creates a cluster with the binaries in bin (initdb into a
// temporary directory) and starts it on a free loopback port, with fsync
// off and commit timestamps tracked. Stop it with Stop, which also deletes
// it.
func StartCluster(ctx context.Context, bin string) (*Cluster, error) {
	return StartClusterWith(ctx, bin, ClusterOptions{})
}

// StartClusterWith is StartCluster with options.
func StartClusterWith(ctx context.Context, bin string, opts ClusterOptions) (*Cluster, error) {
	c, err := newCluster(bin, opts)
	if err != nil {
		return nil, err
	}
	if err := c.run(ctx, "initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(c.dir)
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// newCluster makes the directory and picks the port of a cluster not yet
// created.
func newCluster(bin string, opts ClusterOptions) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "pgleader-chaos-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bin: bin, opts: opts}
	if os.Geteuid() == 0 {
		c.asUser = "postgres"
		u, err := user.Lookup(c.asUser)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("chaos: as root the cluster runs as the user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if c.port, err = freePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// StartStandby makes an asynchronous streaming standby of c with
// pg_basebackup and starts it on a port of its own. It streams from
// source, a host:port that reaches c (c's Addr, or a proxy in front of it,
// so that a test can cut replication).
func (c *Cluster) StartStandby(ctx context.Context, source string, opts ClusterOptions) (*Cluster, error) {
	host, port, err := net.SplitHostPort(source)
	if err != nil {
		return nil, err
	}
	s, err := newCluster(c.bin, opts)
	if err != nil {
		return nil, err
	}
	if err := s.run(ctx, "pg_basebackup", "-h", host, "-p", port, "-U", "postgres", "-D", s.data(),
		"-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Addr is the server's host:port.
func (c *Cluster) Addr() string { return fmt.Sprintf("127.0.0.1:%d", c.port) }

// Kill stops the server at once, as a crash, and leaves it down.
func (c *Cluster) Kill(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run(ctx, "pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop")
}

// Promote ends a standby's recovery and waits until it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run(ctx, "pg_ctl", "-D", c.data(), "-w", "-t", "60", "promote")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }

// URL connects to the cluster's database postgres as the user postgres.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Dir is the cluster's temporary directory.
func (c *Cluster) Dir() string { return c.dir }

func (c *Cluster) run(ctx context.Context, tool string, args ...string) error {
	argv := append([]string{filepath.Join(c.bin, tool)}, args...)
	if c.asUser != "" {
		argv = append([]string{"runuser", "-u", c.asUser, "--"}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = c.dir
	if len(c.opts.Env) > 0 {
		cmd.Env = append(os.Environ(), c.opts.Env...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("chaos: %s: %w\n%s", tool, err, out)
	}
	return nil
}

func (c *Cluster) start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off "+
		"-c synchronous_commit=on -c track_commit_timestamp=on -c max_connections=200", c.port, c.dir)
	for _, kv := range c.opts.Settings {
		opts += " -c " + kv
	}
	return c.run(ctx, "pg_ctl", "-D", c.data(), "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "60", "-o", opts, "start")
}

// Restart stops the server (immediately, as a crash, or fast, as a clean
// shutdown), waits down, and starts it again.
func (c *Cluster) Restart(ctx context.Context, immediate bool, down time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	mode := "fast"
	if immediate {
		mode = "immediate"
	}
	if err := c.run(ctx, "pg_ctl", "-D", c.data(), "-m", mode, "-w", "stop"); err != nil {
		return err
	}
	time.Sleep(down)
	return c.start(ctx)
}

// Stop stops the server and deletes the cluster.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if _, statErr := os.Stat(filepath.Join(c.data(), "postmaster.pid")); statErr == nil {
		err = c.run(context.Background(), "pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop")
	}
	if rmErr := os.RemoveAll(c.dir); err == nil {
		err = rmErr
	}
	return err
}
