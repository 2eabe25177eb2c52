// Package pgtest gives each test its own migrated PostgreSQL database.
//
// Where the server comes from, in order:
//
//  1. PGLEADER_TEST_DATABASE_URL, if set: a URL whose role may CREATE DATABASE;
//  2. PostgreSQL on 127.0.0.1:5432 as user postgres, if it answers;
//  3. a throwaway testcontainers-go PostgreSQL, if a Docker engine answers;
//  4. a throwaway PostgreSQL of the test process's own (package embedpg),
//     from binaries on the machine or embedded-postgres's;
//  5. otherwise the test fails and says how to provide one.
//
// PGLEADER_POSTGRES=local, docker or embedded, when PGLEADER_TEST_DATABASE_URL
// is unset, takes step 2, 3 or 4 alone. The container's image is
// PGLEADER_POSTGRES_IMAGE, by default postgres:16-alpine.
//
// Once per test process, a template database is created and migrated; each
// test then gets CREATE DATABASE … TEMPLATE it, dropped in t.Cleanup, so tests
// run in parallel. Every database it creates has the prefix "pgleader_test_"
// and a random suffix; it never drops a database it did not create.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"go.uber.org/goleak"

	"github.com/pgleader/pgleader/internal/embedpg"
	"github.com/pgleader/pgleader/migrations"
)

// EnvURL names the environment variable that points the tests at a server.
const EnvURL = "PGLEADER_TEST_DATABASE_URL"

// EnvPostgres names the environment variable that, when EnvURL is unset,
// picks where the server comes from: "local", "docker" or "embedded"; unset,
// the first of them that works.
const EnvPostgres = "PGLEADER_POSTGRES"

// EnvImage names the environment variable that overrides the container
// image of the docker path.
const EnvImage = "PGLEADER_POSTGRES_IMAGE"

const (
	localURL  = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	prefix    = "pgleader_test_"
	howToFix  = "no PostgreSQL for the tests: set " + EnvURL + " to a URL whose role may CREATE DATABASE, start PostgreSQL on 127.0.0.1:5432 with user postgres, start a Docker engine for testcontainers, or install PostgreSQL's server binaries (initdb, pg_ctl, postgres; or set " + embedpg.EnvBin + ")"
	container = "postgres:16-alpine"
)

var server struct {
	once     sync.Once
	err      error
	admin    *pgxpool.Pool // connected to the server's maintenance database
	baseURL  *url.URL
	template string
	stop     func()
}

// DB is one test's database.
type DB struct {
	// Name is the database's name.
	Name string
	// URL connects to it.
	URL string
	// Pool is a pool on it, closed when the test ends.
	Pool *pgxpool.Pool
}

// New returns a fresh database with pgleader's migrations applied.
func New(t testing.TB) *DB {
	t.Helper()
	start(t)
	return create(t, server.template)
}

// NewEmpty returns a fresh database without pgleader's migrations.
func NewEmpty(t testing.TB) *DB {
	t.Helper()
	start(t)
	return create(t, "template0")
}

// ServerURL returns a URL of the tests' server's maintenance database,
// finding or starting the server as New does; for code that cannot take a
// testing.TB, such as an Example's set-up. The server is stopped by Main.
func ServerURL() (string, error) {
	server.once.Do(func() { server.err = connectServer() })
	if server.err != nil {
		return "", fmt.Errorf("pgtest: %w", server.err)
	}
	u := *server.baseURL
	return u.String(), nil
}

// HostPort is the host and port of d's server, as in d.URL.
func (d *DB) HostPort() string {
	u, err := url.Parse(d.URL)
	if err != nil {
		panic("pgtest: " + err.Error())
	}
	return u.Host
}

// NewPool opens another pool on d (separate connections), closed when the
// test ends.
func (d *DB) NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return openPool(t, d.URL, nil)
}

// NewPoolConfig is NewPool with a chance to change the configuration.
func (d *DB) NewPoolConfig(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	return openPool(t, d.URL, configure)
}

// Conn opens a single connection on d, closed when the test ends.
func (d *DB) Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		t.Fatalf("pgtest: connect %s: %v", d.Name, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// Main runs the tests, drops the template database, stops any server it started,
// fails the run if a goroutine outlives the tests, and exits.
func Main(m *testing.M, leakOptions ...goleak.Option) {
	code := m.Run()
	if server.stop != nil {
		server.stop()
	}
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func start(t testing.TB) {
	t.Helper()
	server.once.Do(func() { server.err = connectServer() })
	if server.err != nil {
		t.Fatalf("pgtest: %v", server.err)
	}
}

func connectServer() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	adminURL, err := findServer(ctx)
	if err != nil {
		return err
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return fmt.Errorf("parse server URL: %w", err)
	}
	server.baseURL = u
	server.admin, err = pgxpool.New(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", u.Redacted(), err)
	}

	server.template = prefix + "tpl_" + randomSuffix()
	if _, err := server.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{server.template}.Sanitize()); err != nil {
		return fmt.Errorf("create template database: %w", err)
	}
	prevStop := server.stop
	server.stop = func() {
		dropDatabase(server.template)
		server.admin.Close()
		if prevStop != nil {
			prevStop()
		}
	}
	if err := migrations.UpURL(ctx, databaseURL(server.template)); err != nil {
		return fmt.Errorf("migrate template database: %w", err)
	}
	return nil
}

// findServer returns the URL of a server's maintenance database.
func findServer(ctx context.Context) (string, error) {
	if v := os.Getenv(EnvURL); v != "" {
		if err := ping(ctx, v); err != nil {
			return "", fmt.Errorf("%s is set but does not answer: %w", EnvURL, err)
		}
		return v, nil
	}
	switch mode := os.Getenv(EnvPostgres); mode {
	case "local":
		if err := ping(ctx, localURL); err != nil {
			return "", fmt.Errorf("%s=local, and 127.0.0.1:5432 does not answer: %w", EnvPostgres, err)
		}
		return localURL, nil
	case "docker":
		u, err := startContainer(ctx)
		if err != nil {
			return "", fmt.Errorf("%s=docker: testcontainers: %w", EnvPostgres, err)
		}
		return u, nil
	case "embedded":
		u, err := startEmbedded(ctx)
		if err != nil {
			return "", fmt.Errorf("%s=embedded: %w", EnvPostgres, err)
		}
		return u, nil
	case "":
	default:
		return "", fmt.Errorf("%s=%q: want local, docker, embedded or nothing", EnvPostgres, mode)
	}
	if err := ping(ctx, localURL); err == nil {
		return localURL, nil
	}
	u, containerErr := startContainer(ctx)
	if containerErr == nil {
		return u, nil
	}
	u, embeddedErr := startEmbedded(ctx)
	if embeddedErr == nil {
		return u, nil
	}
	return "", fmt.Errorf("%s (testcontainers: %v; embedded: %v)", howToFix, containerErr, embeddedErr)
}

// startEmbedded starts a server of the test process's own.
func startEmbedded(ctx context.Context) (string, error) {
	srv, err := embedpg.Start(ctx, "")
	if err != nil {
		return "", err
	}
	server.stop = func() { _ = srv.Stop() }
	return srv.URL(), nil
}

func ping(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

func startContainer(ctx context.Context) (u string, err error) {
	// No reaper container (its image would have to be pulled; the harness
	// terminates its container itself), and the container's ports are on
	// this machine, not at an address testcontainers guesses.
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	if h := os.Getenv("DOCKER_HOST"); os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" && (h == "" || strings.HasPrefix(h, "unix://")) {
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	image := container
	if v := os.Getenv(EnvImage); v != "" {
		image = v
	}
	defer func() {
		// testcontainers panics when it finds no Docker configuration at all.
		if r := recover(); r != nil {
			err = fmt.Errorf("no Docker engine: %v", r)
		}
	}()
	provider, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return "", fmt.Errorf("no Docker engine: %w", err)
	}
	if err := provider.Health(ctx); err != nil {
		_ = provider.Close()
		return "", fmt.Errorf("no Docker engine: %w", err)
	}
	_ = provider.Close()

	c, err := tcpostgres.Run(ctx, image,
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		return "", err
	}
	server.stop = func() { _ = testcontainers.TerminateContainer(c) }
	return c.ConnectionString(ctx, "sslmode=disable")
}

func create(t testing.TB, template string) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := prefix + randomSuffix()
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		// Concurrent CREATE DATABASE from one template can briefly see the
		// template in use (55006); try again.
		var pgErr *pgconn.PgError
		if _, err = server.admin.Exec(ctx, sql); !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() { dropDatabase(name) })
	d := &DB{Name: name, URL: databaseURL(name)}
	d.Pool = d.NewPool(t)
	return d
}

func openPool(t testing.TB, u string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func dropDatabase(name string) {
	if !strings.HasPrefix(name, prefix) {
		panic("pgtest: refusing to drop " + name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = server.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

func databaseURL(name string) string {
	u := *server.baseURL
	u.Path = "/" + name
	return u.String()
}

func randomSuffix() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
