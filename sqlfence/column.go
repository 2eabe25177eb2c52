package sqlfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs statements. *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Column is strength 1: a fence column in an application table, one fence
// per row. Each operation is one conditional statement on the row whose
// KeyColumn equals the key; a NULL fence counts as lower than every token.
// The identifiers are always quoted, so they are used exactly as spelled
// (case included). A Column is a plain value, safe for concurrent use.
//
// The recipe's table works as it is:
//
//	CREATE TABLE digests (name text PRIMARY KEY, body text, fence bigint);
//
//	digests := sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence"}
type Column struct {
	// Table is the table, as {"table"} or {"schema", "table"}. A []string
	// literal converts to it.
	Table pgx.Identifier
	// KeyColumn names the column that identifies a row, normally its
	// primary key.
	KeyColumn string
	// FenceColumn names the integer column that holds the row's fence.
	FenceColumn string
	// Create makes Claim and Write create the row when no row has the key,
	// in the same statement (INSERT … ON CONFLICT (key) DO UPDATE … WHERE
	// the fence check), and Floor answer 0 for a missing row, as for a NULL
	// fence. The new row gets the key, the fence and the Write's
	// assignments; every other column its default, so a NOT NULL column
	// without one must be assigned. It needs a primary key or unique index
	// on KeyColumn alone. Of sessions that create one row at once, exactly
	// one inserts it and the others go through the fence check against it,
	// so two claims of one token still let exactly one through. Without
	// Create (the default), a missing row is [ErrNotFound].
	Create bool
}

// Assignment is one column = value pair of a [Column.Write]. The column is
// quoted; the value is a bind parameter.
type Assignment struct {
	// Column names the column to set.
	Column string
	// Value is its new value, encoded by pgx.
	Value any
}

// Assign returns the Assignment column = value.
func Assign(column string, value any) Assignment {
	return Assignment{Column: column, Value: value}
}

// Set is [Assign].
//
// Deprecated: use Assign; Set read as pgleader.Set, a set of keys.
func Set(column string, value any) Assignment { return Assign(column, value) }

// Claim is a term's first write to the row: it sets the fence to token if
// the stored fence is strictly lower, so of two holders of one token (the
// lease data was lost) exactly one claims. It runs
//
//	UPDATE table SET fence = $token WHERE key = $key AND (fence IS NULL OR fence < $token)
//
// It returns a [*StaleError] (matching [ErrFenced]) if the fence was not
// lower, and an error matching [ErrNotFound] if no row has the key (with
// [Column.Create], it inserts the row with the fence at token instead).
func (c Column) Claim(ctx context.Context, db Querier, key any, token int64) error {
	if err := c.check(key, token); err != nil {
		return err
	}
	sql := fmt.Sprintf(`UPDATE %s SET %s = $2 WHERE %s = $1 AND (%[2]s IS NULL OR %[2]s < $2)`,
		c.Table.Sanitize(), ident(c.FenceColumn), ident(c.KeyColumn))
	if c.Create {
		sql = c.upsert(nil, "<")
	}
	return c.exec(ctx, db, "claim", sql, []any{key, token}, true)
}

// Write sets the given columns and the fence to token if the stored fence
// is not higher than token: the recipe's
//
//	UPDATE digests SET body = $body, fence = $token WHERE name = $name AND fence <= $token
//
// is
//
//	digests.Write(ctx, db, name, token, sqlfence.Assign("body", body))
//
// With no assignments it only raises the fence. It returns a [*StaleError]
// (matching [ErrFenced]) if a higher token has written the row, and an error
// matching [ErrNotFound] if no row has the key (with [Column.Create], it
// inserts the row instead). An assignment to the fence column, or two to one
// column, is [ErrInvalid].
func (c Column) Write(ctx context.Context, db Querier, key any, token int64, set ...Assignment) error {
	if err := c.check(key, token); err != nil {
		return err
	}
	var b strings.Builder
	args := []any{key, token}
	seen := map[string]bool{c.FenceColumn: true, c.KeyColumn: c.Create}
	for _, a := range set {
		if err := checkName("column", a.Column, maxIdentLen); err != nil {
			return err
		}
		if seen[a.Column] {
			if c.Create && a.Column == c.KeyColumn {
				return invalidf("column %q is the key column, which Create sets", a.Column)
			}
			return invalidf("column %q is assigned twice, or is the fence column", a.Column)
		}
		seen[a.Column] = true
		args = append(args, a.Value)
		b.WriteString(ident(a.Column) + " = $" + strconv.Itoa(len(args)) + ", ")
	}
	sql := fmt.Sprintf(`UPDATE %s SET %s%s = $2 WHERE %s = $1 AND (%[3]s IS NULL OR %[3]s <= $2)`,
		c.Table.Sanitize(), b.String(), ident(c.FenceColumn), ident(c.KeyColumn))
	if c.Create {
		sql = c.upsert(set, "<=")
	}
	return c.exec(ctx, db, "write", sql, args, false)
}

// upsert is Claim's or Write's statement for [Column.Create]: insert the
// row, or, if one has the key, update it where the stored fence is lower
// than (op "<") or at most (op "<=") the token. Its arguments are the
// key, the token and then set's values.
func (c Column) upsert(set []Assignment, op string) string {
	cols := []string{ident(c.KeyColumn), ident(c.FenceColumn)}
	vals := []string{"$1", "$2"}
	updates := []string{ident(c.FenceColumn) + " = EXCLUDED." + ident(c.FenceColumn)}
	for i, a := range set {
		cols = append(cols, ident(a.Column))
		vals = append(vals, "$"+strconv.Itoa(i+3))
		updates = append(updates, ident(a.Column)+" = EXCLUDED."+ident(a.Column))
	}
	// The row's own alias keeps the WHERE unambiguous whatever the table
	// is called.
	return fmt.Sprintf(`INSERT INTO %s AS t (%s) VALUES (%s) ON CONFLICT (%s) DO UPDATE SET %s WHERE t.%s IS NULL OR t.%[6]s %s $2`,
		c.Table.Sanitize(), strings.Join(cols, ", "), strings.Join(vals, ", "), ident(c.KeyColumn),
		strings.Join(updates, ", "), ident(c.FenceColumn), op)
}

// Floor reads the row's fence, the highest token that claimed or wrote it
// (0 while it is NULL). Read while the lease is free, it is the floor to
// advance the lease's token counter past after the lease data was lost. It
// returns an error matching [ErrNotFound] if no row has the key, or 0 with
// [Column.Create].
func (c Column) Floor(ctx context.Context, db Querier, key any) (int64, error) {
	if err := c.checkNames(); err != nil {
		return 0, err
	}
	if err := checkKey(key); err != nil {
		return 0, err
	}
	sql := fmt.Sprintf(`SELECT %s FROM %s WHERE %s = $1`,
		ident(c.FenceColumn), c.Table.Sanitize(), ident(c.KeyColumn))
	var fence *int64
	if err := db.QueryRow(ctx, sql, key).Scan(&fence); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			if c.Create {
				return 0, nil
			}
			return 0, fmt.Errorf("%w: %s", ErrNotFound, c.resource(key))
		}
		return 0, userError("floor "+c.name(), err)
	}
	if fence == nil {
		return 0, nil
	}
	return *fence, nil
}

// exec runs a conditional UPDATE whose args begin with the key and the
// token; when it matches no row, it reads the fence to tell a stale token
// from a missing row.
func (c Column) exec(ctx context.Context, db Querier, op, sql string, args []any, claim bool) error {
	key, token := args[0], args[1].(int64)
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		var pgErr *pgconn.PgError
		if c.Create && errors.As(err, &pgErr) && pgErr.Code == "42P10" {
			return invalidf("%s %s: Create needs a primary key or unique index on %q alone: %s",
				op, c.name(), c.KeyColumn, pgErr.Message)
		}
		return userError(op+" "+c.name(), err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	stored, err := c.Floor(ctx, db, key)
	if err != nil {
		return err
	}
	return &StaleError{Resource: c.resource(key), Token: token, Stored: stored, Claim: claim}
}

func (c Column) check(key any, token int64) error {
	if err := c.checkNames(); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	return checkToken(token)
}

func (c Column) checkNames() error {
	if err := checkTable(c.Table); err != nil {
		return err
	}
	if err := checkName("key column", c.KeyColumn, maxIdentLen); err != nil {
		return err
	}
	if err := checkName("fence column", c.FenceColumn, maxIdentLen); err != nil {
		return err
	}
	if c.KeyColumn == c.FenceColumn {
		return invalidf("key column and fence column are both %q", c.KeyColumn)
	}
	return nil
}

func checkTable(table pgx.Identifier) error {
	if n := len(table); n < 1 || n > 2 {
		return invalidf("table must be {table} or {schema, table}, got %d parts", n)
	}
	for _, part := range table {
		if err := checkName("table", part, maxIdentLen); err != nil {
			return err
		}
	}
	return nil
}

// name is the table as people write it, for messages.
func (c Column) name() string { return tableName(c.Table) }

func (c Column) resource(key any) string { return fmt.Sprintf("%s/%v", c.name(), key) }

func tableName(table pgx.Identifier) string { return strings.Join(table, ".") }

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// userError wraps an error from a statement on an application table, where a
// fence trigger may have refused it.
func userError(op string, err error) error {
	if e := fromPgError(err); e != nil {
		return e
	}
	return fmt.Errorf("sqlfence: %s: %w", op, err)
}
