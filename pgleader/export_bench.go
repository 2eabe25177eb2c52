package pgleader

import (
	"time"

	"github.com/pgleader/pgleader/internal/speedup"
)

// The bench switches the hand-off's speed-ups off through internal/speedup.
func init() {
	speedup.Off = func(backend any, m speedup.Mechanisms) {
		p := backend.(*Postgres)
		p.off = m
		if p.lease != nil && m.Linger {
			p.lease.mu.Lock()
			p.lease.linger = time.Nanosecond
			p.lease.mu.Unlock()
		}
		if p.listen != nil {
			p.listen.life.Lock()
			p.listen.off = m
			p.listen.life.Unlock()
		}
	}
}
