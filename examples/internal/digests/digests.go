// Package digests is the recipe's fenced store in PostgreSQL, shared by the
// example programs: a row per publisher key in the table digests, whose
// fence column holds the highest token that wrote it, and the table
// published, a log of every unit a write was accepted for.
//
// The fence is sqlfence's column fence (strength 1). Each unit's log row is
// inserted in the same transaction as the fenced write of the digest, so a
// refused write logs nothing and the log holds only accepted units.
package digests

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/sqlfence"
)

// Schema creates the two tables if they are absent.
const Schema = `
CREATE TABLE IF NOT EXISTS digests (
    name  text   PRIMARY KEY,
    body  text,
    fence bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS published (
    id           bigserial   PRIMARY KEY,
    name         text        NOT NULL,
    token        bigint      NOT NULL,
    seq          int         NOT NULL,
    owner        text        NOT NULL,
    published_at timestamptz NOT NULL DEFAULT clock_timestamp()
);`

// column is the fence: the recipe's claim and write statements.
var column = sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence"}

// Store is one digest: the row named Name. It is safe for concurrent use.
type Store struct {
	// DB is the pool the store writes through.
	DB *pgxpool.Pool
	// Name is the digest's row, normally the leadership key.
	Name string
}

// Setup creates the tables if they are absent and the store's row if it is
// missing. Replicas starting together may all call it: an advisory lock
// serializes them, because concurrent CREATE TABLE IF NOT EXISTS of one table
// can fail.
func (s Store) Setup(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('pgleader examples: digests'))`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, Schema); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO digests (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, s.Name)
		return err
	})
	if err != nil {
		return fmt.Errorf("create the tables digests and published: %w", err)
	}
	return nil
}

// Claim is a term's first write: it raises the fence to token if the stored
// fence is lower, and reports whether it did. It is the Claim hook of the
// publisher's elector.
func (s Store) Claim(ctx context.Context, token int64) (bool, error) {
	err := column.Claim(ctx, s.DB, s.Name, token)
	if errors.Is(err, sqlfence.ErrFenced) {
		return false, nil
	}
	return err == nil, err
}

// Floor returns the highest token that wrote the digest. It is the
// FenceFloor hook of the publisher's elector.
func (s Store) Floor(ctx context.Context) (int64, error) {
	return column.Floor(ctx, s.DB, s.Name)
}

// Publish writes unit seq of the term token as the digest's body and logs
// it, in one transaction. If a higher token has written the digest, it
// returns a [*sqlfence.StaleError] (matching [sqlfence.ErrFenced]) and logs
// nothing.
func (s Store) Publish(ctx context.Context, token int64, seq int, owner string) error {
	return pgx.BeginFunc(ctx, s.DB, func(tx pgx.Tx) error {
		body := fmt.Sprintf("%s #%d", owner, seq)
		if err := column.Write(ctx, tx, s.Name, token, sqlfence.Assign("body", body)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO published (name, token, seq, owner) VALUES ($1, $2, $3, $4)`,
			s.Name, token, seq, owner)
		return err
	})
}

// Unit is one row of the log.
type Unit struct {
	// ID orders the log: units are numbered as their writes commit.
	ID int64
	// Token is the term that published the unit.
	Token int64
	// Seq numbers the unit within its term, from 1.
	Seq int
	// Owner is the replica that held the term.
	Owner string
	// PublishedAt is the database's clock when the unit was logged.
	PublishedAt time.Time
}

// Units returns the digest's log in the order it was written.
func (s Store) Units(ctx context.Context) ([]Unit, error) {
	rows, err := s.DB.Query(ctx,
		`SELECT id, token, seq, owner, published_at FROM published WHERE name = $1 ORDER BY id`, s.Name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Unit, error) {
		var u Unit
		err := r.Scan(&u.ID, &u.Token, &u.Seq, &u.Owner, &u.PublishedAt)
		return u, err
	})
}
