// Package jobtest is the process-level acceptance test of scheduled jobs
// (pgleader.RunJob, issue 29): three replica processes (the program in
// ./replica) run one job on one database while the tests kill, stop and
// restart them, and then read pgleader.job_run and the table the job's
// function writes to check at most once, at least once and fencing.
package jobtest
