// Package tcpproxy is a loopback TCP proxy for tests that cut a client off
// from PostgreSQL or degrade its path: it can drop every connection and
// refuse new ones, swallow traffic while keeping connections open, delay
// it, or let it through a few bytes at a time, and let it through again.
package tcpproxy

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Mode is what a Proxy does with the traffic of its connections.
type Mode int

// The modes of a Proxy.
const (
	// Pass forwards traffic as it comes.
	Pass Mode = iota
	// Drop closes every connection and refuses new ones (Cut).
	Drop
	// Blackhole keeps connections open, accepts new ones, and forwards
	// nothing: what is sent is lost. When the proxy leaves Blackhole, the
	// connections that lost traffic are closed, as after a partition long
	// enough for TCP to give up; idle ones carry on.
	Blackhole
	// Delay forwards each chunk of traffic, in order, a fixed delay after
	// it was read.
	Delay
	// Drip forwards at most a few bytes per tick, in order.
	Drip
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Drop:
		return "drop"
	case Blackhole:
		return "blackhole"
	case Delay:
		return "delay"
	case Drip:
		return "drip"
	}
	return "unknown"
}

// Proxy forwards connections accepted on Addr to a target address. It is
// safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	mode      Mode
	delay     time.Duration // Delay
	dripBytes int           // Drip: bytes per tick
	dripEvery time.Duration // Drip: the tick
	links     map[*link]struct{}
	wg        sync.WaitGroup
	closed    bool
	accepts   int
}

// link is one client connection and its connection to the target.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed when the link is torn down
	lost           bool          // traffic was swallowed by a blackhole; guarded by Proxy.mu
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		if l.server != nil {
			l.server.Close()
		}
	})
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the proxy's port.
func (p *Proxy) Port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

// Accepted returns how many client connections were let through.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

// ServerPorts returns the local ports of the proxy's open connections to
// its target: the client ports the target sees (pg_stat_activity's
// client_port), by which a server can tell the connections that came
// through this proxy.
func (p *Proxy) ServerPorts() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ports []int
	for l := range p.links {
		if a, ok := l.server.LocalAddr().(*net.TCPAddr); ok {
			ports = append(ports, a.Port)
		}
	}
	return ports
}

// Mode returns the proxy's current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Cut closes every open connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = Drop
	for l := range p.links {
		l.close()
	}
}

// Blackhole swallows all traffic, in both directions, until Restore or
// another mode; connections stay open and new ones are accepted.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = Blackhole
}

// Delay forwards traffic d after it was read, until Restore or another
// mode. Traffic already read keeps the delay it was read with.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.delay = Delay, d
}

// Drip forwards at most n bytes every tick, in each direction of each
// connection, until Restore or another mode.
func (p *Proxy) Drip(n int, every time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.dripBytes, p.dripEvery = Drip, max(n, 1), every
}

// Restore lets connections and traffic through again. Connections that
// lost traffic to a blackhole are closed.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = Pass
	for l := range p.links {
		if l.lost {
			l.close()
		}
	}
}

// Retarget closes every open connection and forwards new ones to target:
// the address clients know moves to another server, as after a failover.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for l := range p.links {
		l.close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for l := range p.links {
		l.close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		if p.mode == Drop || p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.accepts++
		p.mu.Unlock()
		p.wg.Add(1)
		go p.forward(c)
	}
}

func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	server, err := net.Dial("tcp", target)
	if err != nil {
		client.Close()
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}
	if !p.track(l, target) {
		l.close()
		return
	}
	defer p.untrack(l)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, server, client) }()
	go func() { defer wg.Done(); p.pipe(l, client, server) }()
	wg.Wait()
}

// chunk is traffic read from one side, to be written to the other at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst through the proxy's current mode. A reader
// queues chunks stamped with their delay; a writer delivers them, so a
// delayed or dripping direction still reads (and can be closed) promptly.
// When src ends, what is queued is still delivered, as TCP would, and then
// the link is torn down.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	queue := make(chan chunk, 256)
	go func() {
		defer close(queue)
		buf := make([]byte, 32*1024)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				c := chunk{data: append([]byte(nil), buf[:n]...), due: time.Now()}
				p.mu.Lock()
				if p.mode == Delay {
					c.due = c.due.Add(p.delay)
				}
				p.mu.Unlock()
				select {
				case queue <- c:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer l.close()
	for c := range queue {
		if !p.deliver(l, dst, c) {
			// Drain so the reader is not stuck on a full queue.
			for range queue {
			}
			return
		}
	}
}

// deliver writes one chunk to dst according to the mode, and reports
// whether the link is still up.
func (p *Proxy) deliver(l *link, dst net.Conn, c chunk) bool {
	if !wait(l, time.Until(c.due)) {
		return false
	}
	for data := c.data; len(data) > 0; {
		p.mu.Lock()
		mode, n, every := p.mode, len(data), time.Duration(0)
		if mode == Blackhole {
			l.lost = true
		}
		if mode == Drip {
			n, every = min(n, p.dripBytes), p.dripEvery
		}
		p.mu.Unlock()
		if mode == Blackhole {
			return true
		}
		if _, err := dst.Write(data[:n]); err != nil {
			return false
		}
		data = data[n:]
		if len(data) > 0 && !wait(l, every) {
			return false
		}
	}
	return true
}

// wait sleeps d, and reports false if the link was torn down meanwhile.
func wait(l *link, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-l.done:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.done:
		return false
	case <-t.C:
		return true
	}
}

// track registers l, dialled to target, unless the proxy no longer lets it
// through (cut, closed, or retargeted while it dialled).
func (p *Proxy) track(l *link, target string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == Drop || p.closed || target != p.target {
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.links, l)
}
