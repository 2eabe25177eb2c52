package sqlfence

import (
	"encoding/json"
	"errors"
	"fmt"
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
	// Err is the underlying error, usually a *pgconn.PgError; may be nil.
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
func FromError(err error) error {
	if e := fromPgError(err); e != nil {
		return e
	}
	return err
}

// fromPgError returns the refusal in err, or nil if err holds none.
func fromPgError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
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
	e.Claim = kind == "claim"
	e.Token, _ = strconv.ParseInt(token, 10, 64) // "NULL" reads as 0
	e.Stored, _ = strconv.ParseInt(stored, 10, 64)
	return e
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
