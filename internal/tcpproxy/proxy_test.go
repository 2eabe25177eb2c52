package tcpproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pgleader/pgleader/internal/tcpproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo starts a server that echoes each line back.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func start(t *testing.T) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *tcpproxy.Proxy) *client {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c, bufio.NewReader(c)}
}

// roundTrip sends a line and returns the echo and how long it took, or an
// error if nothing came back within timeout.
func (c *client) roundTrip(line string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		return 0, err
	}
	_ = c.c.SetReadDeadline(time.Now().Add(timeout))
	got, err := c.r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if got != line+"\n" {
		return 0, errors.New("echo mismatch: " + got)
	}
	return time.Since(start), nil
}

func TestPassAndCut(t *testing.T) {
	t.Parallel()
	p := start(t)
	c := dial(t, p)
	if _, err := c.roundTrip("hello", time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if _, err := c.roundTrip("again", time.Second); err == nil {
		t.Fatal("a cut connection still echoes")
	}
	if p.Mode() != tcpproxy.Drop {
		t.Fatalf("mode %v after Cut", p.Mode())
	}
	p.Restore()
	if _, err := dial(t, p).roundTrip("back", time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Accepted() != 2 {
		t.Fatalf("Accepted = %d, want 2", p.Accepted())
	}
}

func TestBlackholeClosesOnlyConnectionsThatLostTraffic(t *testing.T) {
	t.Parallel()
	p := start(t)
	busy, idle := dial(t, p), dial(t, p)
	for _, c := range []*client{busy, idle} {
		if _, err := c.roundTrip("warm", time.Second); err != nil {
			t.Fatal(err)
		}
	}
	p.Blackhole()
	if _, err := busy.roundTrip("swallowed", 200*time.Millisecond); err == nil {
		t.Fatal("a blackholed connection echoes")
	}
	late := dial(t, p) // accepted, but its traffic goes nowhere
	if _, err := late.roundTrip("nothing", 200*time.Millisecond); err == nil {
		t.Fatal("a connection opened in the blackhole echoes")
	}
	p.Restore()
	if _, err := idle.roundTrip("still here", time.Second); err != nil {
		t.Fatalf("an idle connection did not survive the blackhole: %v", err)
	}
	for _, c := range []*client{busy, late} {
		_ = c.c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.r.ReadString('\n'); err == nil {
			t.Fatal("a connection that lost traffic was not closed on Restore")
		}
	}
}

func TestDelay(t *testing.T) {
	t.Parallel()
	p := start(t)
	c := dial(t, p)
	p.Delay(100 * time.Millisecond)
	took, err := c.roundTrip("slow", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took < 200*time.Millisecond { // delayed both ways
		t.Fatalf("round trip took %v through a 100ms delay", took)
	}
	p.Restore()
	if _, err := c.roundTrip("fast", time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestDrip(t *testing.T) {
	t.Parallel()
	p := start(t)
	c := dial(t, p)
	p.Drip(4, 20*time.Millisecond)
	// 17 bytes go in 5 pieces, 4 ticks apart; the echo streams back alongside.
	took, err := c.roundTrip("0123456789abcdef", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took < 80*time.Millisecond {
		t.Fatalf("17 bytes at 4 bytes per 20ms took %v", took)
	}
}

func TestRetarget(t *testing.T) {
	t.Parallel()
	p := start(t)
	old := dial(t, p)
	if _, err := old.roundTrip("hello", time.Second); err != nil {
		t.Fatal(err)
	}
	// The new target greets every connection with "B".
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("B\n"))
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })

	p.Retarget(ln.Addr().String())
	if _, err := old.roundTrip("again", time.Second); err == nil {
		t.Fatal("a connection to the old target still echoes after Retarget")
	}
	c := dial(t, p)
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := c.r.ReadString('\n'); err != nil || got != "B\n" {
		t.Fatalf("a new connection read %q, %v; want the new target's greeting", got, err)
	}
}
