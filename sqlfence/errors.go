package sqlfence

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgleader/pgleader/internal/check"
)

// SQLSTATEs raised by pgleader's SQL functions and fence triggers.
const (
	// CodeFenced is raised when a token is stale: by pgleader.fence_claim,
	// pgleader.fence_write and the fence triggers.
	CodeFenced = "PF001"
	// CodeLeaseNotHeld is raised by pgleader.lease_guard.
	CodeLeaseNotHeld = "PF002"
)

var (
	// ErrFenced is matched by every [*StaleError]: a token was refused
	// because the store has already seen a higher one (or, for a claim, the
	// same one).
	ErrFenced = errors.New("sqlfence: fenced")

	// ErrLeaseNotHeld is matched when a lease guard finds that the term no
	// longer holds its lease: it expired on the database clock, was
	// released, or a newer term took it.
	ErrLeaseNotHeld = errors.New("sqlfence: lease not held")

	// ErrNotFound is matched when a [Column] operation finds no row with
	// the key.
	ErrNotFound = errors.New("sqlfence: row not found")

	// ErrInvalid is matched by every error about bad input: an empty or
	// malformed identifier, resource or key, a token below 1 or above
	// [MaxToken].
	ErrInvalid = errors.New("sqlfence: invalid")

	// ErrForbidden is matched when PostgreSQL refused the call to the
	// connection's role (SQLSTATE 42501): the resource or key belongs to
	// another role (a fence resource is the role's that first claimed or
	// wrote it, a key the role's that first acquired it), or the role was not granted the use of pgleader. The PostgreSQL
	// error, which names the owning role, is wrapped too.
	ErrForbidden = errors.New("sqlfence: forbidden to this role")

	// ErrNotMigrated is matched when the database lacks the pgleader schema
	// (or the guard table or functions in it).
	ErrNotMigrated = errors.New("sqlfence: the pgleader schema is missing or outdated; " +
		"apply it with 'pgleader migrate up' (cmd/pgleader) or migrations.Up(ctx, pool) from github.com/pgleader/pgleader/migrations")
)

// StaleError is a refused token. It matches [ErrFenced] with errors.Is;
// Unwrap returns the PostgreSQL error behind it, if any.
type StaleError struct {
	// Resource names what was fenced: a guard resource, "table/key" for a
	// [Column], or "schema.table" for a fence trigger.
	Resource string
	// Token is the refused token (0 if a trigger saw the fence set to NULL).
	Token int64
	// Stored is the fence the store held when it refused Token.
	Stored int64
	// Claim reports whether the refused operation was a claim, which needs
	// Token to be strictly greater than Stored.
	Claim bool
	// Err is the underlying error, usually a *pgconn.PgError (with a
	// database/sql driver other than pgx's, one built from the driver's
	// error); may be nil.
	Err error
}

// Error implements error.
func (e *StaleError) Error() string {
	if e.Claim {
		return fmt.Sprintf("sqlfence: resource %q fenced: claim of token %d refused, stored fence is %d",
			e.Resource, e.Token, e.Stored)
	}
	return fmt.Sprintf("sqlfence: resource %q fenced: token %d is stale, stored fence is %d",
		e.Resource, e.Token, e.Stored)
}

// Is reports whether target is [ErrFenced].
func (e *StaleError) Is(target error) bool { return target == ErrFenced }

// Unwrap returns Err.
func (e *StaleError) Unwrap() error { return e.Err }

// FromError returns err with a refusal raised by pgleader's SQL functions or
// fence triggers turned into this package's errors: SQLSTATE [CodeFenced]
// becomes a [*StaleError] and [CodeLeaseNotHeld] an error matching
// [ErrLeaseNotHeld]. Any other error, and nil, is returned unchanged. Use it
// on errors from your own statements on a table with a fence trigger, or
// from calling the SQL functions directly.
//
// It reads the refusal from any driver: pgx's *pgconn.PgError (also through
// database/sql with pgx's stdlib), lib/pq's *pq.Error, and any other error
// in err's chain with a method SQLState() string. Of such an error it reads
// the string fields Message, Detail, Hint, Schema or SchemaName, Table or
// TableName, and Column or ColumnName where it is a struct that has them (as
// lib/pq's does); an error with the SQLSTATE alone is read from its text.
// The refusal's Unwrap then gives a *pgconn.PgError built from the driver's
// error, whatever the driver.
func FromError(err error) error {
	if e := fromPgError(err); e != nil {
		return e
	}
	return err
}

// fromPgError returns the refusal in err, or nil if err holds none.
func fromPgError(err error) error {
	pgErr := pgError(err)
	if pgErr == nil {
		return nil
	}
	switch pgErr.Code {
	case CodeFenced:
		resource := pgErr.TableName
		if pgErr.SchemaName != "" {
			resource = pgErr.SchemaName + "." + resource
		}
		if resource == "" {
			resource = resourceFromMessage(pgErr.Message)
		}
		return staleError(pgErr, resource)
	case CodeLeaseNotHeld:
		return &leaseError{pgErr}
	}
	return nil
}

// pgError returns the PostgreSQL error in err's chain as a
// *pgconn.PgError: pgx's own, or one built from another driver's error
// with a SQLState method (see [FromError]). It returns nil if err holds
// neither.
func pgError(err error) *pgconn.PgError {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr
	}
	var coded interface {
		error
		SQLState() string
	}
	if !errors.As(err, &coded) || coded.SQLState() == "" {
		return nil
	}
	pgErr = &pgconn.PgError{
		Code:           coded.SQLState(),
		Severity:       stringField(coded, "Severity"),
		Message:        stringField(coded, "Message"),
		Detail:         stringField(coded, "Detail"),
		Hint:           stringField(coded, "Hint"),
		SchemaName:     stringField(coded, "SchemaName", "Schema"),
		TableName:      stringField(coded, "TableName", "Table"),
		ColumnName:     stringField(coded, "ColumnName", "Column"),
		ConstraintName: stringField(coded, "ConstraintName", "Constraint"),
	}
	if pgErr.Message == "" {
		// The driver's text, from pgleader's message on if it has one.
		pgErr.Message = coded.Error()
		if i := strings.Index(pgErr.Message, "pgleader: "); i >= 0 {
			pgErr.Message = pgErr.Message[i:]
		}
	}
	return pgErr
}

// stringField returns the first of the exported string fields names that
// the struct v, or the struct v points to, has; "" if none.
func stringField(v any, names ...string) string {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface {
		if rv.IsNil() {
			return ""
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return ""
	}
	for _, name := range names {
		f, ok := rv.Type().FieldByName(name)
		if ok && f.IsExported() && f.Type.Kind() == reflect.String {
			return rv.FieldByIndex(f.Index).String()
		}
	}
	return ""
}

// sqlStateError is a driver's error with a SQLSTATE, other than pgx's,
// together with the *pgconn.PgError built from it: the package's own error
// mapping, and a caller's errors.As, find either one.
type sqlStateError struct {
	pgErr *pgconn.PgError
	err   error
}

func (e *sqlStateError) Error() string { return e.err.Error() }

func (e *sqlStateError) Unwrap() []error { return []error{e.pgErr, e.err} }

// withPgError returns err with a *pgconn.PgError in its chain if it holds
// another driver's PostgreSQL error, and err unchanged otherwise.
func withPgError(err error) error {
	var pgErr *pgconn.PgError
	if err == nil || errors.As(err, &pgErr) {
		return err
	}
	if pgErr = pgError(err); pgErr == nil {
		return err
	}
	return &sqlStateError{pgErr: pgErr, err: err}
}

// leaseError is a refusal of pgleader.lease_guard.
type leaseError struct{ pgErr *pgconn.PgError }

func (e *leaseError) Error() string {
	return "sqlfence: " + strings.TrimPrefix(e.pgErr.Message, "pgleader: ") + ": " + e.pgErr.Detail
}

func (e *leaseError) Is(target error) bool { return target == ErrLeaseNotHeld }

func (e *leaseError) Unwrap() error { return e.pgErr }

// staleError reads the token and the stored fence from the DETAIL of a
// PF001 error, '<claim|stale> token <n|NULL>, stored fence <n>'.
func staleError(pgErr *pgconn.PgError, resource string) *StaleError {
	e := &StaleError{Resource: resource, Err: pgErr}
	kind, rest, _ := strings.Cut(pgErr.Detail, " token ")
	token, stored, _ := strings.Cut(rest, ", stored fence ")
	if kind != "claim" && kind != "stale" {
		// No DETAIL (a driver that gave only the message): the message
		// says the same, '… claim of token <n> refused, stored fence is
		// <n>' or '… token <n> is stale, stored fence is <n>'.
		kind, token, stored = tokensFromMessage(pgErr.Message)
	}
	e.Claim = kind == "claim"
	e.Token, _ = strconv.ParseInt(token, 10, 64) // "NULL" reads as 0
	e.Stored, _ = strconv.ParseInt(stored, 10, 64)
	return e
}

// tokensFromMessage reads a PF001 message as staleError reads its DETAIL.
func tokensFromMessage(msg string) (kind, token, stored string) {
	head, rest, ok := strings.Cut(msg, ", stored fence is ")
	if !ok {
		return "", "", ""
	}
	stored, _, _ = strings.Cut(rest, " ")
	if before, ok := strings.CutSuffix(head, " refused"); ok {
		if i := strings.LastIndex(before, "claim of token "); i >= 0 {
			return "claim", before[i+len("claim of token "):], stored
		}
	}
	if before, ok := strings.CutSuffix(head, " is stale"); ok {
		if i := strings.LastIndex(before, "token "); i >= 0 {
			return "stale", before[i+len("token "):], stored
		}
	}
	return "", "", ""
}

// resourceFromMessage reads the JSON string after "pgleader: resource " in
// a message of pgleader._fence_take.
func resourceFromMessage(msg string) string {
	rest, ok := strings.CutPrefix(msg, "pgleader: resource ")
	if !ok {
		return ""
	}
	var resource string
	if err := json.NewDecoder(strings.NewReader(rest)).Decode(&resource); err != nil {
		return ""
	}
	return resource
}

// sqlError maps an error from a statement on pgleader's own tables and
// functions.
var sqlError = check.Sentinels{Prefix: "sqlfence", NotMigrated: ErrNotMigrated, Invalid: ErrInvalid, Forbidden: ErrForbidden}.SQLError

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// MaxToken is the largest token the fences accept, 2^62 - 1: the same limit
// as pgleader.MaxFloor, so that every stored fence can serve as a lease's
// floor and no write can leave a resource without higher tokens. The SQL
// functions refuse larger tokens too (SQLSTATE 22023).
const MaxToken int64 = 1<<62 - 1

// MaxResourceLen is the longest resource name, and lease key, in bytes.
const MaxResourceLen = 200

// maxIdentLen is PostgreSQL's NAMEDATALEN - 1; a longer identifier would be
// truncated by the server and could name another object.
const maxIdentLen = 63

func checkName(what, s string, limit int) error {
	if err := check.Name(what, s, limit); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func checkToken(token int64) error {
	if err := check.Token(token); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if token > MaxToken {
		return invalidf("token %d is above the limit %d (2^62 - 1)", token, MaxToken)
	}
	return nil
}

// checkKey refuses a [Column] key that PostgreSQL cannot receive as text: a
// string with a NUL byte or invalid UTF-8. Other types are left to the
// server, which knows the column's type.
func checkKey(key any) error {
	s, ok := key.(string)
	if !ok {
		return nil
	}
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return invalidf("key %q must be valid UTF-8 without NUL bytes", s)
	}
	return nil
}
