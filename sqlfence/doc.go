// Package sqlfence fences a leader's writes in PostgreSQL, so a term whose
// lease has passed to a newer term cannot overwrite that term's work.
//
// A term's token (from package pgleader, or any issuer of strictly
// increasing tokens) goes with each write, and PostgreSQL refuses a token
// lower than one it has already seen. The package knows nothing about
// elections; it needs pgleader's schema (package migrations) for the guard
// table, the SQL functions and, for strength 3, the lease table.
//
// # Quick start
//
//	digests := sqlfence.Column{Table: pgx.Identifier{"digests"}, KeyColumn: "name", FenceColumn: "fence"}
//
//	// Once per term, before its first write (pgleader's Claim hook):
//	err := digests.Claim(ctx, pool, "daily", term.Token())
//	// Every later write:
//	err = digests.Write(ctx, pool, "daily", term.Token(), sqlfence.Assign("body", body))
//	if errors.Is(err, sqlfence.ErrFenced) {
//		return err // a newer term has written: stop
//	}
//
// # The three strengths
//
// Each strength refuses a stale token; they differ in what a refusal
// covers and in what they cost.
//
// 1. Column fence ([Column]): a fence column in the application's own table.
// Claim is one UPDATE … WHERE fence < token, a write one UPDATE … WHERE
// fence <= token. Guarantee: once a term has claimed or written a row, no
// lower token changes that row through these methods; of two holders of
// the same token (possible only after the lease data was lost) exactly one
// claims. It covers that one row and that one statement. With
// [Column.Create] the row is created by the first claim or write (an
// INSERT … ON CONFLICT DO UPDATE with the same check), with the same
// guarantee.
//
// 2. Fenced transaction ([Guard]): a guard row per resource in
// pgleader.fence, taken inside the caller's transaction. Guarantee: every
// statement of the transaction (inserts into an outbox, updates of several
// tables) commits only if no higher token took the resource before the
// transaction commits; a higher token's take waits for the transaction and
// then comes after it. Takes of one resource serialize.
//
// 3. Lease-guarded transaction ([LeaseGuardTx], [WithLease]): inside the
// caller's transaction, a check that its term still holds an unexpired
// lease on the database clock, under a FOR KEY SHARE lock on the lease row.
// Guarantee: no write of term N commits after term N+1 has begun, not even
// before N+1's first write, and even if N's lease expires while the
// transaction is open: N+1's acquisition waits until the transaction ends.
// It needs no fence state at all, only that the lease and the data share one
// database. The holder's own renewals are not blocked.
//
// Strengths 1 and 2 also order two holders of one token, which strength 3
// cannot see (both hold "the" lease only if its data was lost and reissued a
// token); combine them when that matters.
//
// [InstallTrigger] adds a backstop to strength 1: the table then refuses
// any UPDATE that lowers its fence column, so a write path that forgot the
// condition cannot overwrite a newer term.
//
// Each fence has a floor: [Column.Floor] and [Guard.Floor] read the highest
// token that wrote. Read while the lease is free, it is what to advance the
// lease's counter past after the lease data was lost (pgleader's FenceFloor
// hook).
//
// # Errors
//
// A stale token is a [*StaleError] carrying the refused token and the stored
// one; it matches [ErrFenced]. A failed lease guard matches
// [ErrLeaseNotHeld], a missing [Column] row [ErrNotFound], bad input
// [ErrInvalid] (checked before any statement runs), a database without the
// schema [ErrNotMigrated], a resource or key of another role
// [ErrForbidden].
//
// Refusals of strengths 2 and 3, and of the trigger, are raised by
// PostgreSQL (SQLSTATE [CodeFenced] and [CodeLeaseNotHeld]), so the
// transaction is aborted and cannot commit even if a caller ignores the
// error. Do not catch them in a savepoint and carry on. [FromError] turns
// them into this package's errors when they come from your own statements.
//
// Identifiers (tables, columns) are always quoted with pgx.Identifier and so
// used exactly as spelled; values (keys, resources, tokens) are always bind
// parameters.
//
// # database/sql
//
// The same fences work through database/sql with any PostgreSQL driver
// (pgx's stdlib, lib/pq), and so from GORM, sqlx, ent or bun, which hand out
// a *sql.DB or *sql.Tx. They run the same statements and return the same
// errors; each pgx-typed entry point has a database/sql counterpart:
//
//	pgx                            database/sql (db: a *sql.DB, *sql.Tx or *sql.Conn)
//	Column.Claim(ctx, pool, …)     Column.Claim(ctx, sqlfence.SQL(db), …); likewise Write, Floor, Bind
//	Guard.Floor, InstallTrigger    the same, on sqlfence.SQL(db)
//	Guard.ClaimTx, WriteTx         Guard.ClaimSQLTx, WriteSQLTx: in the caller's *sql.Tx
//	Guard.Claim, Write             Guard.ClaimSQL, WriteSQL: begin, guard, fn(*sql.Tx), commit
//	LeaseGuardTx                   LeaseGuardSQLTx: in the caller's *sql.Tx
//	WithLease                      WithLeaseSQL: begin, guard, fn(*sql.Tx), commit
//
// [SQL] adapts any [SQLQuerier] to [Querier]; [SQLBeginner] (a *sql.DB or
// *sql.Conn) begins the helpers' transactions. A driver's error keeps its
// own type in the chain (lib/pq's *pq.Error) next to a *pgconn.PgError built
// from it; a refusal unwraps to that *pgconn.PgError. [FromError] reads
// refusals from any driver. The pipelined variants need pgx's batches and
// have no database/sql counterpart.
//
//	err := digests.Write(ctx, sqlfence.SQL(tx), "daily", token, sqlfence.Assign("body", body))
//
//	err = outbox.WriteSQL(ctx, db, token, func(tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, `INSERT INTO outbox (message) VALUES ($1)`, msg)
//		return err
//	})
//
// With GORM, the *sql.Tx of db.Transaction is tx.Statement.ConnPool
// (examples/gorm shows it).
//
// # Plain SQL
//
// Everything the package does is available as SQL functions in the schema
// pgleader, for psql, database/sql and other languages. A refusal is an
// error, never a return value to check.
//
//	pgleader.fence_claim(resource text, token bigint) -> void     strength 2, claim (stored < token)
//	pgleader.fence_write(resource text, token bigint) -> void     strength 2, write (stored <= token)
//	pgleader.fence_floor(resource text) -> bigint                 highest token that took the resource, or 0
//	pgleader.lease_guard(key text, token bigint) -> void          strength 3
//	pgleader.install_fence_trigger(tbl regclass, col name) -> name
//
// Call them inside a transaction, before its writes:
//
//	BEGIN;
//	SELECT pgleader.fence_write('outbox', 7);   -- or pgleader.lease_guard('digest-publisher', 7)
//	INSERT INTO outbox (message) VALUES ('…');
//	COMMIT;
//
// Strength 1 is plain SQL by nature: UPDATE t SET …, fence = $1 WHERE key =
// $2 AND fence <= $1, then check that one row was updated. The SQLSTATEs,
// messages and the machine-readable DETAIL are described in sqlfence's
// README.md.
package sqlfence
