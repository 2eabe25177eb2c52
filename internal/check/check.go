// Package check holds the input checks and SQL error mapping that pgleader
// and sqlfence share, so both refuse the same input in the same words. Each
// package wraps the results in its own sentinels.
package check

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// Name returns an error unless s is 1 to limit bytes of UTF-8 without NUL
// bytes; what names s in the message.
func Name(what, s string, limit int) error {
	switch {
	case s == "":
		return fmt.Errorf("%s must not be empty", what)
	case len(s) > limit:
		return fmt.Errorf("%s is %d bytes; the limit is %d", what, len(s), limit)
	case !utf8.ValidString(s) || strings.ContainsRune(s, 0):
		return fmt.Errorf("%s must be valid UTF-8 without NUL bytes", what)
	}
	return nil
}

// Token returns an error unless token is positive, as every issued token is.
func Token(token int64) error {
	if token < 1 {
		return fmt.Errorf("token must be positive, got %d", token)
	}
	return nil
}

// Sentinels are the errors a package reports for the classes of SQL error,
// and the prefix of its other errors.
type Sentinels struct {
	Prefix      string // "pgleader" or "sqlfence"
	NotMigrated error  // the schema, a table or a function is missing
	Invalid     error  // pgleader's SQL functions refused an argument (22023)
	Forbidden   error  // the caller's role may not do it (42501): another role's key, or no grant
}

// SQLError maps err, from the operation op on pgleader's own tables and
// functions, onto the sentinels.
func (s Sentinels) SQLError(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// The server's hint says what to do; pgconn's message leaves it out.
		var hint string
		switch {
		case pgErr.Hint != "":
			hint = " (hint: " + pgErr.Hint + ")"
		case pgErr.Code == "42501":
			// PostgreSQL's own refusal: the role was never granted the use.
			hint = " (hint: the schema's owner grants a role the use of pgleader with 'pgleader grant ROLE' (cmd/pgleader) or SELECT pgleader.grant_usage('ROLE'))"
		}
		switch pgErr.Code {
		case "3F000", "42883", "42P01": // invalid_schema_name, undefined_function, undefined_table
			return fmt.Errorf("%w (%s: %s)%s", s.NotMigrated, op, pgErr.Message, hint)
		case "22023": // invalid_parameter_value, raised by the SQL functions' own checks
			return fmt.Errorf("%w: %s: %s%s", s.Invalid, op, pgErr.Message, hint)
		case "42501": // insufficient_privilege
			if s.Forbidden != nil {
				// Both wrapped: the sentinel, and the server's error with
				// its SQLSTATE and the key's role in its message.
				return fmt.Errorf("%w: %s: %w%s", s.Forbidden, op, err, hint)
			}
		}
		if hint != "" {
			return fmt.Errorf("%s: %s: %w%s", s.Prefix, op, err, hint)
		}
	}
	return fmt.Errorf("%s: %s: %w", s.Prefix, op, err)
}
