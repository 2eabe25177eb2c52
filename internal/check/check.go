// Package check holds the input checks and error classes that pgleader and
// sqlfence share, so both refuse the same input in the same words. Each
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

// Class is what a PostgreSQL error from pgleader's schema means.
type Class int

// The classes.
const (
	// Other: any other error.
	Other Class = iota
	// NotMigrated: the schema, a table or a function is missing.
	NotMigrated
	// Invalid: pgleader's SQL functions refused an argument (22023).
	Invalid
)

// Classify returns the class of err and, for NotMigrated and Invalid, the
// server's message.
func Classify(err error) (Class, string) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return Other, ""
	}
	switch pgErr.Code {
	case "3F000", "42883", "42P01": // invalid_schema_name, undefined_function, undefined_table
		return NotMigrated, pgErr.Message
	case "22023": // invalid_parameter_value, raised by the SQL functions' own checks
		return Invalid, pgErr.Message
	}
	return Other, ""
}
