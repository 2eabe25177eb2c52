package pgleader

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgleader/pgleader/internal/speedup"
)

// The bench switches the hand-off's speed-ups off through internal/speedup.
func init() {
	speedup.Off = func(backend any, m speedup.Mechanisms) {
		p := backend.(*Postgres)
		p.off = m
		if p.lease != nil && m.Linger {
			p.lease.mu.Lock()
			p.lease.linger = time.Nanosecond
			p.lease.mu.Unlock()
		}
		if p.listen != nil {
			p.listen.life.Lock()
			p.listen.off = m
			p.listen.life.Unlock()
		}
	}
}

// statementThenHint is statementAndHint without the pipeline: the hint
// goes out once sql's answer is back.
func statementThenHint(ctx context.Context, c *pgconn.PgConn, sql string, args [][]byte, hint string, hintArgs [][]byte) ([][]byte, error) {
	rr := c.ExecParams(ctx, sql, args, nil, nil, nil)
	var row [][]byte
	for rr.NextRow() {
		row = row[:0]
		for _, v := range rr.Values() {
			row = append(row, append([]byte(nil), v...))
		}
	}
	if _, err := rr.Close(); err != nil {
		return nil, err
	}
	_, _ = c.ExecParams(ctx, hint, hintArgs, nil, nil, nil).Close()
	return row, nil
}
