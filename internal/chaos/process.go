package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// ReplicaEnv names the environment variable that carries a replica
// process's ReplicaConfig as JSON. A program that the harness re-executes
// (Config.Command) must call ReplicaMain when it is set.
const ReplicaEnv = "PGLEADER_CHAOS_REPLICA"

var stderr io.Writer = os.Stderr

// ReplicaMain runs one replica process from the ReplicaConfig in the
// environment variable ReplicaEnv, writing its history as JSON lines to
// standard output, until SIGTERM or SIGINT (a graceful stop: the term ends
// as stopped and the lease is released) or until its standard input closes
// (the parent is gone). It returns the process's exit code.
func ReplicaMain() int {
	var cfg ReplicaConfig
	if err := json.Unmarshal([]byte(os.Getenv(ReplicaEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "chaos replica: bad %s: %v\n", ReplicaEnv, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := runReplica(ctx, cfg, &jsonSink{w: os.Stdout}, &gates{}); err != nil {
		fmt.Fprintf(os.Stderr, "chaos replica %s: %v\n", cfg.Owner, err)
		return 1
	}
	return 0
}

// handle is a running replica incarnation, in a goroutine or a process.
type handle interface {
	// stop ends the incarnation: gracefully (Run's context is cancelled,
	// the term ends as stopped and is released) or as a crash (nothing
	// more reaches the database; the lease is left to expire). It returns
	// when the incarnation is gone.
	stop(crash bool)
	// pause freezes the incarnation; inUnit (goroutine mode only) catches
	// the body after it has checked Live.
	pause(inUnit bool)
	resume()
}

// goHandle is a replica in a goroutine of the harness's process.
type goHandle struct {
	gates  *gates
	cut    func() // cuts the replica's proxies, killing its connections
	cancel context.CancelFunc
	done   chan error
}

func startGoroutine(cfg ReplicaConfig, sink Sink, cut func()) *goHandle {
	ctx, cancel := context.WithCancel(context.Background())
	h := &goHandle{gates: newGates(), cut: cut, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- runReplica(ctx, cfg, sink, h.gates) }()
	return h
}

func (h *goHandle) stop(crash bool) {
	if crash {
		// Kill the gates first so nothing the incarnation does from now on
		// is sent, then its connections, so nothing in flight completes
		// after the crash instant either.
		h.gates.kill()
		h.cut()
	} else {
		h.gates.resume()
	}
	h.cancel()
	<-h.done
}

func (h *goHandle) pause(inUnit bool) { h.gates.pause(inUnit) }
func (h *goHandle) resume()           { h.gates.resume() }

// procHandle is a replica in a child process, paused with SIGSTOP.
type procHandle struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and its output is read
}

func startProcess(command []string, cfg ReplicaConfig, sink Sink) (*procHandle, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(os.Environ(), ReplicaEnv+"="+string(b))
	cmd.Stderr = stderr
	// If the harness dies, so do its replicas.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &procHandle{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = readEvents(stdout, sink) // a line too long for the scanner ends the events of a broken process
		_ = cmd.Wait()
		_ = stdin.Close()
		close(h.done)
	}()
	return h, nil
}

func (h *procHandle) signal(s syscall.Signal) { _ = h.cmd.Process.Signal(s) }

func (h *procHandle) stop(crash bool) {
	if crash {
		h.signal(syscall.SIGKILL)
	} else {
		h.signal(syscall.SIGCONT)
		h.signal(syscall.SIGTERM)
	}
	select {
	case <-h.done:
	case <-time.After(30 * time.Second):
		h.signal(syscall.SIGKILL)
		<-h.done
	}
}

func (h *procHandle) pause(bool) { h.signal(syscall.SIGSTOP) }
func (h *procHandle) resume()    { h.signal(syscall.SIGCONT) }

func splitAddr(addr string) (string, uint16, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return host, uint16(p), err
}
