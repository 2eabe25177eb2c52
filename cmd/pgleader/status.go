//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgleader/pgleader/internal/check"
	"github.com/pgleader/pgleader/migrations"
	"github.com/pgleader/pgleader/pgleader"
)

const statusUsage = `Usage: pgleader status [--database URL] [KEY]
       pgleader status [--database URL] --set NAME [--prefix PREFIX]
       pgleader status [--database URL] --jobs [JOB]

Prints a table of leases as the database sees them on its own clock: each
key, the replica holding it ("-" when free or expired), the token (of the
holding term, or the last one issued while free) and how long the lease has
left. Without KEY it lists every key the database has seen; with KEY it
also lists the replicas waiting for it (its candidates, if any), the best
first: the lease is handed to the first when its holder steps down.

With --set it summarises a set of keys (pgleader.Set): each live member
(a replica campaigning for the set) with the keys it reported holding at
its last renewal, and, counting the keys whose names start with PREFIX
(every key the database has seen when PREFIX is empty), how many each
owner holds live now and how many are free.

With --jobs it lists the scheduled jobs (run --every or --cron,
pgleader.RunJob), or the job JOB: its schedule, the next instant its
replicas wait for, and its last run: the instant, the replica and token that
ran it, its state (running, done or failed), its attempt, how long it took
(so far, while running) and its error. Instants are RFC 3339, in UTC.

Where the database's schema is not the version this pgleader ships
(behind, ahead or dirty), a warning on standard error says so and what to
run, as 'pgleader version' does; the status is printed all the same.
`

// leaseRow is one line of the status table.
type leaseRow struct {
	key       string
	holder    string // "" when free
	token     int64
	remaining time.Duration
	value     string // the holding term's value
}

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", statusUsage, stderr)
	db := databaseFlag(fs)
	setName := fs.String("set", "", "summarise the set `NAME`")
	prefix := fs.String("prefix", "", "with --set: count the keys whose names start with `PREFIX`")
	jobs := fs.Bool("jobs", false, "list the scheduled jobs and their last runs, or with an argument the one job")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *jobs && given(fs, "set") {
		return usagef("status", "--jobs and --set are exclusive")
	}
	if err := refuseEmpty(fs, "set"); err != nil {
		return err
	}
	if *setName != "" {
		if len(pos) != 0 {
			return usagef("status", "--set takes no KEY")
		}
		if err := pgleader.CheckKey(*setName); err != nil {
			return usagef("status", "--set: %v", err)
		}
	}
	if len(pos) > 1 {
		return usagef("status", "want at most one KEY, got %d arguments", len(pos))
	}
	if len(pos) == 1 {
		if err := pgleader.CheckKey(pos[0]); err != nil {
			return usagef("status", "KEY: %v", err)
		}
	}
	ctx, pool, done, err := connect("status", *db)
	if err != nil {
		return err
	}
	defer done()
	switch {
	case *setName != "":
		err = setStatus(ctx, pool, *setName, *prefix, stdout)
	case *jobs:
		name := ""
		if len(pos) == 1 {
			name = pos[0]
		}
		err = jobStatus(ctx, pool, name, stdout)
	case len(pos) == 1:
		err = keyStatus(ctx, pool, pos[0], stdout)
	default:
		var rows []leaseRow
		if rows, err = allLeases(ctx, pool); err != nil {
			return notMigratedHint(err)
		}
		err = printLeases(stdout, rows)
	}
	if err == nil {
		warnSchema(ctx, pool, stderr)
	}
	return err
}

// keyStatus prints one key's lease and its candidates.
func keyStatus(ctx context.Context, pool *pgxpool.Pool, key string, stdout io.Writer) error {
	p := pgleader.NewPostgres(pool, pgleader.PollOnly())
	l, err := p.Lease(ctx, key)
	if err != nil {
		return notMigratedHint(err)
	}
	cs, err := p.Candidates(ctx, key)
	if err != nil {
		return notMigratedHint(err)
	}
	if err := printLeases(stdout, []leaseRow{{key: l.Key, holder: l.Holder, token: l.Token, remaining: l.Remaining(), value: l.Value}}); err != nil {
		return err
	}
	return printCandidates(stdout, cs, l.Now)
}

// warnSchema says on stderr, as version does, that the database's schema
// is behind this pgleader, ahead of it or dirty: status reads only what
// every version has, and would otherwise hide a schema on which the
// replicas' campaigns fail (pgleader.ErrNotMigrated). It says nothing when
// the history table is not found in this role's current schema or it may
// not read it.
func warnSchema(ctx context.Context, pool *pgxpool.Pool, stderr io.Writer) {
	var table *string
	err := pool.QueryRow(ctx, `SELECT to_regclass(quote_ident(current_schema()) || '.' || quote_ident($1))::text`,
		migrations.HistoryTable).Scan(&table)
	if err != nil || table == nil {
		return
	}
	var version int64
	var dirty bool
	// regclass's text is the table's name, quoted where it needs to be.
	if err := pool.QueryRow(ctx, `SELECT version, dirty FROM `+*table).Scan(&version, &dirty); err != nil || version < 0 {
		return
	}
	if !dirty && uint(version) == migrations.Latest {
		return
	}
	line, _ := describeSchema(uint(version), dirty)
	fmt.Fprintf(stderr, "pgleader: warning: %s\n", line)
}

// printCandidates prints a key's candidates, their expiry counted on the
// database clock (now).
func printCandidates(w io.Writer, cs []pgleader.Candidate, now time.Time) error {
	if len(cs) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CANDIDATE\tPRIORITY\tWAITING FOR\tEXPIRES IN\tVALUE")
	for _, c := range cs {
		value := "-"
		if c.Value != "" {
			value = strconv.Quote(c.Value)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", c.Owner, c.Priority,
			now.Sub(c.RegisteredAt).Round(time.Millisecond), c.ExpiresAt.Sub(now).Round(time.Millisecond), value)
	}
	return tw.Flush()
}

// allLeases reads every lease row, judging expiry on the database clock
// read once for the whole statement.
func allLeases(ctx context.Context, pool *pgxpool.Pool) ([]leaseRow, error) {
	rows, err := pool.Query(ctx, `
		SELECT l.key, l.holder, l.token,
		       extract(epoch FROM l.expires_at - l.db_now),
		       coalesce(l.value, '')
		  FROM pgleader.leases('') AS l`)
	if err != nil {
		return nil, statusError(err)
	}
	var out []leaseRow
	var r leaseRow
	var holder *string
	var seconds *float64
	_, err = pgx.ForEachRow(rows, []any{&r.key, &holder, &r.token, &seconds, &r.value}, func() error {
		row := leaseRow{key: r.key, token: r.token, value: r.value}
		if holder != nil && seconds != nil {
			row.holder = *holder
			row.remaining = time.Duration(*seconds * float64(time.Second))
		}
		out = append(out, row)
		return nil
	})
	if err != nil {
		return nil, statusError(err)
	}
	return out, nil
}

// statusError maps an error of status's own statements as the library maps
// its own: a missing schema or function is pgleader.ErrNotMigrated, a
// refused privilege pgleader.ErrForbidden with the command that grants it.
func statusError(err error) error {
	return check.Sentinels{Prefix: "status", NotMigrated: pgleader.ErrNotMigrated, Invalid: pgleader.ErrInvalid,
		Forbidden: pgleader.ErrForbidden}.SQLError("leases", err)
}

func printLeases(w io.Writer, rows []leaseRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tHOLDER\tTOKEN\tEXPIRES IN\tVALUE")
	for _, r := range rows {
		holder, expires, value := "-", "-", "-"
		if r.holder != "" {
			holder, expires = r.holder, r.remaining.Round(time.Millisecond).String()
		}
		if r.value != "" {
			value = strconv.Quote(r.value)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.key, holder, r.token, expires, value)
	}
	return tw.Flush()
}

// notMigratedHint adds the command that fixes a missing schema.
func notMigratedHint(err error) error {
	if errors.Is(err, pgleader.ErrNotMigrated) {
		return errors.New("the database has no pgleader schema, or an outdated one: run 'pgleader migrate up'")
	}
	return err
}

// setStatus prints a set's members and how its keys are spread.
func setStatus(ctx context.Context, pool *pgxpool.Pool, name, prefix string, stdout io.Writer) error {
	var keys []string
	if err := pool.QueryRow(ctx,
		`SELECT coalesce(array_agg(key ORDER BY key), '{}') FROM pgleader.leases($1)`, prefix,
	).Scan(&keys); err != nil {
		return notMigratedHint(statusError(err))
	}
	rep, err := pgleader.NewPostgres(pool, pgleader.PollOnly()).SetStatus(ctx, name, keys)
	if err != nil {
		return notMigratedHint(err)
	}
	members, free := 0, 0
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "OWNER\tMEMBER\tREPORTED\tHOLDS")
	for _, o := range rep.Owners {
		if o.Owner == "" {
			free = o.Leases
			continue
		}
		member, reported := "no", "-"
		if o.Member {
			members++
			member, reported = "yes", fmt.Sprint(o.MemberHeld)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", o.Owner, member, reported, o.Leases)
	}
	fmt.Fprintf(w, "(free)\t-\t-\t%d\n", free)
	if err := w.Flush(); err != nil {
		return err
	}
	share := 0
	if members > 0 {
		share = (len(keys) + members - 1) / members
	}
	_, err = fmt.Fprintf(stdout, "set %s: %d keys, %d live members (candidates), fair share %d\n", name, len(keys), members, share)
	return err
}

// jobStatus prints the scheduled jobs (or the one named) with their last
// runs, the running one's time counted on the database clock.
func jobStatus(ctx context.Context, pool *pgxpool.Pool, name string, stdout io.Writer) error {
	jobs, err := pgleader.NewPostgres(pool, pgleader.PollOnly()).JobStatuses(ctx, name)
	if err != nil {
		return notMigratedHint(err)
	}
	instant := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "JOB\tSCHEDULE\tNEXT\tLAST RUN\tOWNER\tTOKEN\tSTATE\tATTEMPT\tTOOK\tERROR")
	for _, j := range jobs {
		r := j.Last
		if r.Instant.IsZero() {
			fmt.Fprintf(w, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\n", j.Job, j.Schedule, instant(j.NextAt))
			continue
		}
		took := r.Duration().Round(time.Millisecond).String()
		if r.FinishedAt.IsZero() {
			took = j.Now.Sub(r.StartedAt).Round(time.Millisecond).String() + " so far"
		}
		msg := "-"
		if r.Error != "" {
			msg = strconv.Quote(r.Error)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", j.Job, j.Schedule, instant(j.NextAt),
			instant(r.Instant), r.Owner, r.Token, r.State, r.Attempt, took, msg)
	}
	return w.Flush()
}
