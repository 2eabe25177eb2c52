package pgleader

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

var _ SetBackend = (*Postgres)(nil)

// AcquireSet implements [SetBackend] with one call of pgleader.set_acquire.
func (p *Postgres) AcquireSet(ctx context.Context, set, owner string, keys []string, floors []int64, ttl time.Duration, held, extra, total int, confirm []string) ([]Lease, int, error) {
	if err := CheckSetAcquire(set, owner, keys, floors, ttl, held, extra, total, confirm); err != nil {
		return nil, 0, err
	}
	if keys == nil {
		keys = []string{}
	}
	var (
		won      []string
		tokens   []int64
		expires  []time.Time
		acquired []time.Time
		members  int32
		now      time.Time
	)
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		return db.QueryRow(ctx,
			`SELECT keys, tokens, expires_at, acquired_at, members, db_now FROM pgleader.set_acquire($1, $2, $3, $4, $5, $6, $7, $8, $9)`, exec,
			set, owner, keys, interval(ttl), held, extra, floors, nullIfZero(total), confirm,
		).Scan(&won, &tokens, &expires, &acquired, &members, &now)
	})
	if err != nil {
		return nil, 0, sqlError("set_acquire", err)
	}
	leases := make([]Lease, len(won))
	for i, k := range won {
		leases[i] = Lease{Key: k, Holder: owner, Token: tokens[i], AcquiredAt: acquired[i], RenewedAt: now, ExpiresAt: expires[i], Now: now}
	}
	return leases, int(members), nil
}

// RenewSet implements [SetBackend] with one call of pgleader.set_tick: it
// answers with the keys lost, those asked to resign and the earliest new
// expiry, which it reports for every key renewed.
func (p *Postgres) RenewSet(ctx context.Context, set, owner string, keys []string, tokens []int64, ttl time.Duration, held int) (SetRenewal, error) {
	if err := CheckSetRenew(set, owner, keys, tokens, ttl, held); err != nil {
		return SetRenewal{}, err
	}
	if keys == nil {
		keys, tokens = []string{}, []int64{}
	}
	var (
		lost, resign []string
		first        pgtype.Timestamptz
		owners       []string
		counts       []int32
		lapse        []time.Time
		handed       int32
	)
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		return db.QueryRow(ctx,
			`SELECT lost, resign, expires_at, members, member_held, member_expires_at, handed FROM pgleader.set_tick($1, $2, $3, $4, $5, $6)`, exec,
			set, owner, keys, tokens, interval(ttl), held,
		).Scan(&lost, &resign, &first, &owners, &counts, &lapse, &handed)
	})
	if err != nil {
		return SetRenewal{}, sqlError("set_tick", err)
	}
	r := SetRenewal{Expires: make([]time.Time, len(keys)), Members: make([]SetMember, len(owners)), Handed: int(handed)}
	for i, gone := range among(keys, lost) {
		if !gone {
			r.Expires[i] = first.Time // no key renewed expires sooner
		}
	}
	if len(resign) > 0 {
		r.Resign = among(keys, resign)
	}
	for i, o := range owners {
		r.Members[i] = SetMember{Owner: o, Held: int(counts[i]), Expires: lapse[i]}
	}
	return r, nil
}

// ReleaseSet implements [SetBackend] with one call of pgleader.set_release.
func (p *Postgres) ReleaseSet(ctx context.Context, set, owner string, keys []string, tokens []int64, handOff []bool, leave bool) ([]bool, error) {
	if err := CheckSetRelease(set, owner, keys, tokens, handOff); err != nil {
		return nil, err
	}
	if keys == nil {
		keys, tokens = []string{}, []int64{}
	}
	var ended []string
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		var freed int
		err := db.QueryRow(ctx,
			`SELECT coalesce(array_agg(key), '{}'), count(*) - count(successor) FROM pgleader.set_release($1, $2, $3, $4, $5, $6)`, exec,
			set, owner, keys, tokens, leave, handOff,
		).Scan(&ended, &freed)
		if err == nil && len(ended) > 0 {
			// The other members confirm the keys handed to them, and
			// campaign for the keys freed, at their next campaign; this
			// hint, on the set's name, brings it forward (Set.Run):
			// "release" when keys were freed, "acquire" when all were
			// handed off.
			event := "acquire"
			if freed > 0 {
				event = "release"
			}
			setHint(ctx, db, set, event, p.logger(), "a set's release or hand-off")
		}
		return err
	})
	if err != nil {
		return nil, sqlError("set_release", err)
	}
	return among(keys, ended), nil
}

// setHint sends event on the set's name (Set.Run's loop listens for it, and
// campaigns or confirms at once) over db; after what, a failure is logged
// at Warn: the other members learn of it at their next tick instead.
func setHint(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, set, event string, log *slog.Logger, after string) {
	var none string
	if err := db.QueryRow(ctx, `SELECT pg_notify($1, $2)::text`, exec, channel, hintPayload(event, set)).Scan(&none); err != nil {
		log.Warn("the hint after "+after+" failed; the other members learn of it at their next tick", "set", set, "err", err)
	}
}

// nullIfZero is n, or NULL for 0.
func nullIfZero(n int) any {
	if n == 0 {
		return nil
	}
	return n
}

// among reports, for each of keys, whether it is one of some.
func among(keys, some []string) []bool {
	in := make(map[string]bool, len(some))
	for _, k := range some {
		in[k] = true
	}
	is := make([]bool, len(keys))
	for i, k := range keys {
		is[i] = in[k]
	}
	return is
}

// SetOwner is one owner in a [SetReport].
type SetOwner struct {
	// Owner names the replica; "" for the keys no live lease holds.
	Owner string
	// Member is whether it is a live member of the set; MemberHeld is the
	// count it reported at its last renewal.
	Member     bool
	MemberHeld int
	// Leases is how many of the keys asked about it holds live now.
	Leases int
}

// SetReport describes a set, for operators.
type SetReport struct {
	Set    string
	Owners []SetOwner
	Now    time.Time
}

// SetStatus reads set's live members and, for keys (which may be nil), how
// many each owner holds and how many are free. It changes nothing.
func (p *Postgres) SetStatus(ctx context.Context, set string, keys []string) (SetReport, error) {
	if err := CheckKey(set); err != nil {
		return SetReport{}, invalidf("set name: %v", err)
	}
	r := SetReport{Set: set}
	var (
		owners  []string
		member  []bool
		counts  []int32
		leases  []int32
		nowNull pgtype.Timestamptz
	)
	if keys == nil {
		keys = []string{}
	}
	err := p.with(ctx, func(db DB, _ *pgconn.PgConn) error {
		return db.QueryRow(ctx,
			`SELECT coalesce(array_agg(owner ORDER BY member DESC, owner), '{}'),
			        coalesce(array_agg(member ORDER BY member DESC, owner), '{}'),
			        coalesce(array_agg(coalesce(member_held, 0) ORDER BY member DESC, owner), '{}'),
			        coalesce(array_agg(leases ORDER BY member DESC, owner), '{}'),
			        max(db_now)
			   FROM pgleader.set_status($1, $2)`, exec, set, keys,
		).Scan(&owners, &member, &counts, &leases, &nowNull)
	})
	if err != nil {
		return SetReport{}, sqlError("set_status", err)
	}
	for i, o := range owners {
		r.Owners = append(r.Owners, SetOwner{Owner: o, Member: member[i], MemberHeld: int(counts[i]), Leases: int(leases[i])})
	}
	r.Now = nowNull.Time
	return r, nil
}
