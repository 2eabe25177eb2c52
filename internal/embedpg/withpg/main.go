// Command withpg runs a command with a throwaway PostgreSQL server of its
// own (package embedpg): it starts the server, runs the command with
// DATABASE_URL and PGLEADER_TEST_DATABASE_URL pointing at it, then stops the
// server, deletes it, and exits with the command's status.
//
//	go run ./internal/embedpg/withpg [-bin DIR] [-if-needed] -- command [arg...]
//
// With -if-needed it starts a server only where the test harness would find
// none: when PGLEADER_POSTGRES is "embedded", or when PGLEADER_POSTGRES is
// unset, PGLEADER_TEST_DATABASE_URL is unset, nothing answers on
// 127.0.0.1:5432 and no Docker engine answers. Otherwise it runs the command
// as it is. The Makefile runs the tests through it, so that all packages
// share one server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/internal/embedpg"
)

const localURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func main() {
	bin := flag.String("bin", "", "`directory` of initdb, pg_ctl and postgres (default: embedpg.FindBin's, or embedded-postgres's)")
	ifNeeded := flag.Bool("if-needed", false, "start a server only if the tests would find none (see the package doc)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: withpg [-bin DIR] [-if-needed] -- command [arg...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(*bin, *ifNeeded, flag.Args()))
}

func run(bin string, ifNeeded bool, argv []string) int {
	ctx := context.Background()
	env := os.Environ()
	if ifNeeded {
		need, why, err := needed(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
			return 2
		}
		if !need {
			return command(argv, env)
		}
		fmt.Fprintf(os.Stderr, "withpg: %s; starting a throwaway PostgreSQL\n", why)
	}
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	srv, err := embedpg.Start(startCtx, bin)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return 1
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "withpg: stop the server: %v\n", err)
		}
	}()
	version, err := serverVersion(ctx, srv.URL())
	if err != nil {
		fmt.Fprintf(os.Stderr, "withpg: the server does not answer: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "withpg: PostgreSQL %s at %s (in %s)\n", version, srv.URL(), srv.Dir())
	env = append(env, "DATABASE_URL="+srv.URL(), "PGLEADER_TEST_DATABASE_URL="+srv.URL())
	return command(argv, env)
}

// needed reports whether the tests would find no server without one of
// ours, and why.
func needed(ctx context.Context) (bool, string, error) {
	switch mode := os.Getenv("PGLEADER_POSTGRES"); mode {
	case "embedded":
		return true, "PGLEADER_POSTGRES=embedded", nil
	case "docker", "local":
		return false, "", nil
	case "":
	default:
		return false, "", fmt.Errorf("PGLEADER_POSTGRES=%q: want embedded, docker, local or nothing", mode)
	}
	if os.Getenv("PGLEADER_TEST_DATABASE_URL") != "" {
		return false, "", nil
	}
	if _, err := serverVersion(ctx, localURL); err == nil {
		return false, "", nil
	}
	if dockerAnswers(ctx) {
		return false, "", nil
	}
	return true, "no PGLEADER_TEST_DATABASE_URL, no PostgreSQL on 127.0.0.1:5432 and no Docker engine", nil
}

func serverVersion(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	var v string
	err = c.QueryRow(ctx, "SHOW server_version").Scan(&v)
	return v, err
}

// dockerAnswers reports whether a Docker engine answers on DOCKER_HOST's
// Unix socket or the default one. A DOCKER_HOST that is not a Unix socket
// is taken at its word.
func dockerAnswers(ctx context.Context) bool {
	sock := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		if !strings.HasPrefix(h, "unix://") {
			return true
		}
		sock = strings.TrimPrefix(h, "unix://")
	}
	client := &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func command(argv []string, env []string) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = os.Stdin, os.Stdout, os.Stderr, env
	// The command decides what an interrupt means; the server outlives it
	// until it has exited.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	for waiting := true; waiting; {
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case err = <-done:
			waiting = false
		}
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if exit.ExitCode() < 0 {
			return 1 // killed by a signal
		}
		return exit.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return 1
	}
}
