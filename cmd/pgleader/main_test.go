//go:build unix

package main_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// raceEnabled is set by race_test.go: the binary is then built with -race
// too.
var raceEnabled bool

// hang bounds every wait in these tests. It detects a hang; it asserts no
// timing.
const hang = 30 * time.Second

// fast is a short timing for run: TTL 3s, renewals every 500ms.
var fast = []string{"--ttl", "3s", "--renew-every", "500ms", "--campaign-every", "250ms",
	"--margin", "250ms", "--yield-grace", "500ms", "--release-timeout", "250ms"}

// build compiles the command into a temporary directory of t, with the
// build tags given, if any.
func build(t *testing.T, tags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pgleader")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is one run of the binary, its output in files so that the
// processes it starts write to them directly.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr string
	done           chan struct{}
}

// start runs bin with args in dir, with the environment of the test less
// DATABASE_URL and PGLEADER_*, plus env. It is killed in t.Cleanup if still
// running.
func start(t *testing.T, bin, dir string, env []string, args ...string) *process {
	t.Helper()
	p := &process{stdout: filepath.Join(dir, "stdout"), stderr: filepath.Join(dir, "stderr"), done: make(chan struct{})}
	stdout, err := os.Create(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "PGLEADER_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit status.
func (p *process) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(hang):
		t.Fatalf("pgleader %v did not exit within %v; stderr:\n%s", p.cmd.Args[1:], hang, p.errors(t))
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func (p *process) output(t *testing.T) string { return readFile(t, p.stdout) }
func (p *process) errors(t *testing.T) string { return readFile(t, p.stderr) }

// runCLI runs bin to its end and returns its status, stdout and stderr.
func runCLI(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	p := start(t, bin, t.TempDir(), env, args...)
	code := p.wait(t)
	return code, p.output(t), p.errors(t)
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// eventually polls cond until it holds, failing the test after hang.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventuallyWithin(t, hang, what, cond)
}

// eventuallyWithin is eventually with a bound of its own.
func eventuallyWithin(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitPID waits for the file name, written by a test's script, and returns
// the pid in it. The process is killed in t.Cleanup if it is still there.
func waitPID(t *testing.T, name string) int {
	t.Helper()
	var pid int
	eventually(t, name+" holds a pid", func() bool {
		b, _ := os.ReadFile(name)
		var err error
		pid, err = strconv.Atoi(string(bytes.TrimSpace(b)))
		return err == nil
	})
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}

// alive reports whether pid is a process that has not exited: it exists and
// is not a zombie waiting for its parent.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil { // no /proc, or the process is gone since
		_, noProc := os.Stat("/proc/self")
		return noProc != nil
	}
	i := bytes.LastIndexByte(stat, ')')
	f := bytes.Fields(stat[i+1:])
	return len(f) == 0 || string(f[0]) != "Z"
}

// writeScript writes a shell script into dir and returns its path.
func writeScript(t *testing.T, dir, body string) string {
	t.Helper()
	name := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(name, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return name
}
