// Package gocronpgleader runs gocron v2 jobs (github.com/go-co-op/gocron/v2)
// on one replica at a time with pgleader: a [Locker] that records each run
// in pgleader's scheduled-jobs tables, and an [Elector] on a pgleader
// election.
//
//	locker, err := gocronpgleader.NewLocker(pool, gocronpgleader.Options{Window: 30 * time.Second})
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//	_, err = s.NewJob(gocron.CronJob("0 * * * *", false),
//		gocron.NewTask(locker.Task("digest", publish)), gocron.WithName("digest"))
//
// This package is a Go module of its own,
// github.com/pgleader/pgleader/gocronpgleader: the module
// github.com/pgleader/pgleader does not require gocron. The database needs
// pgleader's schema at version 18 or later (package migrations).
//
// # The same run: Window
//
// gocron calls a Locker with the job's name only, not the instant it is
// running, and each replica's gocron fires by its own clock. So the
// Locker cannot ask the database "was this instant run?", as
// pgleader.RunJob does. It decides on the database clock instead, as
// ShedLock's lockAtLeastFor does: Lock wins the lease of the key named like
// the job (a pgleader term, with a fencing token), reads the job's newest
// run in pgleader.job_run, and refuses (an error matching [ErrSkipped]) if
// that run started less than Window ago; otherwise it claims a run at the
// database clock's now (pgleader.job_claim, which holds only while the
// term holds the lease) and keeps the lease renewed until gocron's Unlock,
// which records the run's end (pgleader.job_finish). A replica that fires
// while another's run holds the lease is refused too.
//
// Window is required. If the replicas fire the same instant at most S
// apart (clock skew plus gocron's and the database's delays), a Window
// with S < Window < interval − S runs each instant exactly once; half the
// shortest interval suits any skew under it. Too short, and a replica that
// fires late runs the instant again; too long, and the next instant is
// refused. A run that lasts past the next instant makes that instant be
// refused on every replica (the lease is held). A skew of a whole number
// of intervals is no skew at all here: the replica fires another instant at
// the same moment as the others, and the database clock sees one.
// Don't give a gocron job the name of a pgleader.RunJob job: both would
// record runs of it.
//
// # The token
//
// A function wrapped by [Locker.Task] (the same signature as
// pgleader.Job's Run) gets the run's term and record: pass the term's
// Token with every write, fenced by package sqlfence, and a write that
// arrives after a later term's is refused. Its context is cancelled when
// the term ends before Unlock (the lease lost, renewals failing) or when
// gocron cancels the job's context; the run's end is then not recorded
// (its row stays running). [Locker.Term] returns the term for a function
// that is not wrapped. [Elector.Task] and [Elector.Term] do the same for
// the Elector.
//
// # At least once
//
// By default a run is at most once: a run whose replica died (or whose
// context gocron cancelled at shutdown) stays running in job_run and is
// not repeated. With Options.AtLeastOnce, the next Lock of the job that
// claims a run, on any replica, also finds the runs left running by
// earlier terms (none of them has a live term: the lease is the new
// term's), and the function from [Locker.Task] runs each again, oldest
// first, as attempt + 1 under the new term's higher token, then the run
// gocron fired it for. gocron never calls a Locker again for a past
// firing, so the retry comes at the job's first firing after the dead
// run's lease lapsed; Options.RetryWithin, required, bounds how long
// after its start a run may still be retried and must exceed the job's
// longest interval plus the TTL. A function not wrapped by Task cannot be
// handed another run's instant: its runs left running are said at Warn and
// stay running.
//
// # The Elector's weaker guarantee
//
// With an [Elector], only the scheduler of the replica whose pgleader term
// is live runs jobs, and nothing records which instants ran. When the
// lease moves near an instant between replicas whose clocks disagree, the
// instant can run twice: the new leader, 2 s behind, fires the instant the
// old one just ran (TestElectorLeaderChangeUnderSkew shows it) — or not
// at all, when the lease moves the other way between the two firings. The
// Locker has neither problem for skews under Window. Use the Elector when
// all jobs should follow one leader and an instant run twice or missed at
// a change of leader is acceptable.
//
// # Measured
//
// TestLockerSkew: three schedulers in one process, each with its own
// Locker (Window 500 ms), one clock 2 s ahead, a job every second (cron
// with seconds): 24 instants, 24 runs, none doubled or missed, each with
// one job_run row done with the body's token; the replicas ran 9, 6 and 9
// of them (the one 2 s ahead 9), each calling Lock 24 times.
// TestLockerRestart, the same with one replica stopped after 8 runs and
// restarted 3 runs later: 24 instants, 24 runs, none doubled or missed.
// TestLockerSkewFiresLater: a job every 5 s, Window 2.5 s, a replica 2 s
// behind fired 4 instants and ran none.
//
// TestLockerProcesses, the same across processes (internal/replica, each a
// gocron scheduler with a Locker, Window 500 ms, a task of 300 ms that
// writes under an sqlfence fence): one replica 2 s ahead, one SIGKILLed in
// a run from second 15 and restarted about 6 s later, one SIGTERMed in a
// run from second 35. In each of four runs of the test (three in a row,
// one beside the root module's go test ./...): 56 instants, 50 or 51 runs,
// none within Window of another, none doubled; the killed run left
// running, 5 or 6 instants missed while its lease (TTL 6 s) lasted, every
// other run done, the fence taken in token order; tasks started at most
// 236 ms after their second.
//
// TestLockerProcessesAtLeastOnce, the same three processes with
// AtLeastOnce (RetryWithin 20 s): the third replica starts from second 10
// with a first run that hangs and is SIGKILLed in it; the first firing
// after its lease lapsed retries it on another replica (attempt 2, a
// higher token) and a late write with the killed run's token is refused;
// the replica restarts, and another is SIGTERMed in a run. In its first
// run: 55 seconds, 50 runs, every run done and completed exactly once,
// the retry 6 s after the killed run started, 5 seconds without a run
// while its lease lasted.
//
// From instant to body, a job every second, 30 instants after one of
// warm-up, the three side by side in one run (cd gocronpgleader && go run
// ./internal/bench; 2 CPUs, PostgreSQL 15 on the same machine):
//
//	| scheduler                                    | instants | bodies | p50     | p99     |
//	|----------------------------------------------|----------|--------|---------|---------|
//	| gocron alone (the floor)                     | 30       | 30     | 1.3 ms  | 5.9 ms  |
//	| gocron + gocronpgleader.Locker, 3 schedulers | 30       | 30     | 17.9 ms | 73.6 ms |
//	| pgleader.RunJob, 3 runners                   | 30       | 30     | 13.9 ms | 76.0 ms |
package gocronpgleader
