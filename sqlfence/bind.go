package sqlfence

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/pgleader/pgleader/pgleader"
)

// BoundColumn is one row of a fenced [Column] with the database it lives
// in: Claim and Floor are an Elector's Options.Claim and Options.FenceFloor
// for that row, and Write writes it under a term's token. It is what the
// recipe's publisher needs, with no adapter of the user's own:
//
//	daily := digests.Bind(pool, "daily")
//	pgleader.Options{Claim: daily.Claim, FenceFloor: daily.Floor, Lead: ...}
type BoundColumn struct {
	Column Column
	DB     Querier
	Key    any
}

// Bind binds c's row key in db.
func (c Column) Bind(db Querier, key any) BoundColumn {
	return BoundColumn{Column: c, DB: db, Key: key}
}

// Claim claims the row for t's token ([Column.Claim]): false, with no
// error, if a term of that token or a later one has claimed or written it
// (the term then ends as refused), and false with the error if it failed.
func (b BoundColumn) Claim(ctx context.Context, t *pgleader.Term) (bool, error) {
	return claimed(b.Column.Claim(ctx, b.DB, b.Key, t.Token()))
}

// Floor is the row's fence ([Column.Floor]): the highest token that has
// claimed or written it.
func (b BoundColumn) Floor(ctx context.Context) (int64, error) {
	return b.Column.Floor(ctx, b.DB, b.Key)
}

// Write writes the row under t's token ([Column.Write]); it matches
// [ErrFenced] once a later term has claimed or written the row, and the
// body should then return.
func (b BoundColumn) Write(ctx context.Context, t *pgleader.Term, set ...Assignment) error {
	return b.Column.Write(ctx, b.DB, b.Key, t.Token(), set...)
}

// GuardDB is what a [BoundGuard] needs of its database: transactions for
// Claim and Write, a statement for Floor (a *pgxpool.Pool, a *pgx.Conn).
type GuardDB interface {
	Beginner
	Querier
}

// BoundGuard is a [Guard] with the database it lives in: Claim and Floor
// are an Elector's Options.Claim and Options.FenceFloor, and Write runs
// the caller's statements in a transaction that takes the guard under a
// term's token.
type BoundGuard struct {
	Guard Guard
	DB    GuardDB
}

// Bind binds g in db.
func (g Guard) Bind(db GuardDB) BoundGuard {
	return BoundGuard{Guard: g, DB: db}
}

// Claim claims the guard for t's token in a transaction of its own
// ([Guard.Claim]): false, with no error, if a term of that token or a
// later one has taken it, and false with the error if it failed.
func (b BoundGuard) Claim(ctx context.Context, t *pgleader.Term) (bool, error) {
	return claimed(b.Guard.Claim(ctx, b.DB, t.Token(), func(pgx.Tx) error { return nil }))
}

// Floor is the guard's fence ([Guard.Floor]).
func (b BoundGuard) Floor(ctx context.Context) (int64, error) {
	return b.Guard.Floor(ctx, b.DB)
}

// Write runs fn in a transaction that first takes the guard under t's
// token ([Guard.Write]), and commits it; it matches [ErrFenced] once a
// later term has taken the guard, and fn then does not run.
func (b BoundGuard) Write(ctx context.Context, t *pgleader.Term, fn func(pgx.Tx) error) error {
	return b.Guard.Write(ctx, b.DB, t.Token(), fn)
}

// claimed is a Claim hook's answer to a claim's error.
func claimed(err error) (bool, error) {
	if errors.Is(err, ErrFenced) {
		return false, nil
	}
	return err == nil, err
}
