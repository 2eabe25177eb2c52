package sqlfence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// InstallTrigger makes table refuse every UPDATE that lowers its integer
// column (or sets it to NULL), by any statement or trigger, so a write path
// that forgot the fence condition cannot overwrite a newer term's row. The
// refusal is SQLSTATE [CodeFenced]; its message names the table and both
// tokens, and [FromError] turns it into a [*StaleError]. INSERT and DELETE
// are not checked.
//
// It calls pgleader.install_fence_trigger, is idempotent, and returns the
// trigger's name ("pgleader_fence_" and the column). Reverting the
// migrations (migrations.Down) drops the trigger. table is {"table"} or
// {"schema", "table"}; an unknown table or column, or a column that is not
// smallint, integer or bigint, is an error matching [ErrInvalid].
func InstallTrigger(ctx context.Context, db Querier, table pgx.Identifier, column string) (trigger string, err error) {
	if err := checkTable(table); err != nil {
		return "", err
	}
	if err := checkName("fence column", column, maxIdentLen); err != nil {
		return "", err
	}
	err = db.QueryRow(ctx, `SELECT pgleader.install_fence_trigger($1::regclass, $2)`,
		table.Sanitize(), column).Scan(&trigger)
	if err != nil {
		return "", installError(tableName(table), err)
	}
	return trigger, nil
}

func installError(table string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "42883",
			pgErr.Code == "3F000" && strings.Contains(pgErr.Message, `"pgleader"`):
			return fmt.Errorf("%w (install trigger: %s)", ErrNotMigrated, pgErr.Message)
		case pgErr.Code == "22023", pgErr.Code == "42P01", pgErr.Code == "3F000",
			pgErr.Code == "42703", pgErr.Code == "42804":
			return fmt.Errorf("%w: install trigger on %s: %s", ErrInvalid, table, pgErr.Message)
		}
	}
	return fmt.Errorf("sqlfence: install trigger on %s: %w", table, err)
}
