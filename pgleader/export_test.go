package pgleader

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ParseEvent exposes parseEvent to the tests.
var ParseEvent = parseEvent

// SetReprobe sets how long p's listener waits before probing again after a
// probe found no delivery (default reprobeAfter).
func SetReprobe(p *Postgres, d time.Duration) {
	p.listen.mu.Lock()
	defer p.listen.mu.Unlock()
	p.listen.reprobe = d
}

// Rehearse exposes rehearse to the tests.
var Rehearse = rehearse

// SetLinger sets how long p's lease connection stays open after its last
// holder lets go (default linger).
func SetLinger(p *Postgres, d time.Duration) {
	p.lease.mu.Lock()
	defer p.lease.mu.Unlock()
	p.lease.linger = d
}

// SetCampaignBudget sets the most keys one campaign of a Set sends, and
// returns a function that restores it.
func SetCampaignBudget(n int) (restore func()) {
	old := campaignBudget
	campaignBudget = n
	return func() { campaignBudget = old }
}

// With exposes Postgres.with to the tests.
func With(ctx context.Context, p *Postgres, fn func(DB) error) error {
	return p.with(ctx, func(db DB, _ *pgconn.PgConn) error { return fn(db) })
}

// HoldConnections exposes Postgres.holdConnections to the tests.
func HoldConnections(p *Postgres) (release func()) { return p.holdConnections() }

// MaxSpare is maxSpare.
const MaxSpare = maxSpare
