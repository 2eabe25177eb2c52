/*
 * pgleader: replicas electing a leader through a lease row in PostgreSQL and
 * writing to a fenced store. docs/model-checking.md maps every action here
 * to the SQL function or Go code that implements it, and lists what is
 * abstracted away. model/check.sh runs the checks and the mutants.
 *
 * Time is discrete. `now` is the database clock, in ticks; each replica has
 * its own local clock r[i].lc, which may lose up to DRIFT ticks over the
 * run (TMAX < 2 TTL, so one tick is a rate bound of 1/TTL). Every action is atomic (d_step). What a Go timer or a sequential
 * step of the Go loop does next is urgent: time does not pass while it is
 * enabled, unless the replica is paused. A statement normally runs, and is
 * answered, at the instant it is sent; a fault may instead lose it, fail
 * it, or delay it (or its answer) for any number of ticks. The body's
 * choices (write, return) are never urgent.
 *
 * With -DFAILOVER the database fails over once (or crash-recovers) to a
 * copy of its rows taken at an earlier instant, and the new server's grace
 * (pgleader._grace in migrations/0001_pgleader.up.sql) applies.
 *
 * With -DHANDOFF (campaign, hand_off and take in the same file) a waiting
 * candidate registers through its campaign, a term that finishes hands the
 * lease to the live candidate in one step, and the successor leads only
 * after a take the database answers; hints (real, lost, late or forged) may
 * come at any time. A take that finds at least KEEP left answers from a
 * read (take with p_keep): the term's first bound is the hand-off's expiry,
 * and its first renewal confirms it.
 *
 * With -DJOB one scheduled instant of a job (migrations/0018_jobs.up.sql,
 * pgleader/job.go) uses the lease: a term's Claim is job_claim, against
 * the instant's run row {jstate, jtok} in the lease's database, and the
 * body is the job's function, which job_finish records when it returns.
 * -DATLEASTONCE lets a later term take over a run left running.
 *
 * With -DSESSION (issue 30; built as Options.SessionBound) every term is bound to
 * its holder's lease-connection session. The session can end with its
 * process (a crash: the replica never acts again), while its process lives
 * (an administrator's pg_terminate_backend, a proxy's reset: a fault), or
 * with the server (-DFAILOVER: the failover ends every session). acquire
 * counts a row whose bound session ended on this server as free (outside
 * the grace); the waiting candidate may learn it at once; the holder keeps
 * a read pending on its lease connection and ends its term as lost when the
 * end reaches it, within a tick unless a fault delays it.
 */
#include "spec.pml"

/* ---- configuration (spin -D...) ---- */
#ifndef NR
#define NR 2                   /* replicas: 2 or 3 */
#endif
#ifndef TMAX
#define TMAX 14                /* the database clock stops here */
#endif
#ifndef FAULT_BUDGET
#define FAULT_BUDGET 2         /* faults per run: lost, failed or delayed statements, pauses */
#endif
#ifndef FAULT_END
#define FAULT_END TMAX         /* faults may happen only before this tick */
#endif
#ifndef DRIFT
#define DRIFT 1                /* ticks each local clock may lose in the run */
#endif
#ifndef RETURNS
#define RETURNS 1              /* times a body may return on its own in the run */
#endif
#ifndef FENCE0
#define FENCE0 0               /* the store's fence at the start; > 0: lease data lost before */
#endif
#ifndef P4_N
#define P4_N 2                 /* P4: ticks the lease may be free with a candidate and no leader */
#endif
#define BACKOFF_MAX (TTL / 2)  /* the campaign backoff's cap */

/* ---- mutants: each must produce a counterexample ---- */
#ifdef MUTANT_NO_YIELD         /* hook.NoYield: no Y, no C, Live ignores the clock */
#define TIMELINE 0
#else
#define TIMELINE 1
#endif
#ifdef MUTANT_RECV_TIME        /* the timeline counts from when the answer arrived */
#undef TIMELINE_FROM_SEND
#define TIMELINE_FROM_SEND 0
#endif
#ifdef MUTANT_CLAIM_LE         /* claim: fence <= token */
#define CLAIM_OK(f, t) ((f) <= (t))
#else
#define CLAIM_OK(f, t) ((f) < (t))
#endif
#ifdef MUTANT_WRITE_LT         /* write: fence < token */
#define WRITE_OK(f, t) ((f) < (t))
#else
#define WRITE_OK(f, t) ((f) <= (t))
#endif
#ifdef NO_FLOOR                /* FenceFloor unset (a configuration; with FENCE0 > 0, a mutant) */
#define FLOOR 0
#else
#define FLOOR fence
#endif
#ifdef MUTANT_HANDOFF_RELEAD   /* Run leads a term it led already (a check's or a campaign's) */
#define MUTANT_RELEAD 1
#else
#define MUTANT_RELEAD 0
#endif
#ifdef MUTANT_HANDOFF_NO_CHECK /* the successor believes a hand-off hint without take */
#ifndef HANDOFF
#error "MUTANT_HANDOFF_NO_CHECK needs HANDOFF"
#endif
#endif
#ifdef HANDOFF
#if NR != 2
#error "HANDOFF is modelled with 2 replicas: the one live candidate is the other replica"
#endif
#ifdef WIPE
#error "HANDOFF is not modelled with WIPE"
#endif
/* campaign registers the candidate until now + least(p_candidate, max_ttl);
 * p_candidate is TTL + Margin (Elector.campaign). Without FAILOVER the
 * default max_ttl (10 minutes) does not cap it; with FAILOVER max_ttl is
 * MAX_TTL (docs/ha.md: the longest TTL in use), which does. */
#if defined(FAILOVER) && MAX_TTL < CAND_TTL
#define CAND_EXP MAX_TTL
#else
#define CAND_EXP CAND_TTL
#endif
#if TMAX + CAND_EXP > 31
#error "TMAX + CAND_TTL must fit in 5 bits"
#endif
#endif
#ifndef RESTARTS
#define RESTARTS 0             /* times a replica that is not leading restarts (a fresh Elector, same Owner) */
#endif
#if RESTARTS > 0 && !defined(HANDOFF)
#error "RESTARTS is modelled with HANDOFF: a restart forgets Elector.lastToken"
#endif
/* P5's exemption: a restarted replica may lead again a term its previous
 * Elector led (a hand-off or release lost): its claim is refused */
#if RESTARTS > 0
#define RESTARTED(i) (r[i].wrTok <= r[i].pre)
#else
#define RESTARTED(i) 0
#endif
#ifdef MUTANT_HANDOFF_GRACE_CONFIRM /* without the grace rule: take and campaign confirm a handed-off row in the grace */
#if !defined(HANDOFF) || !defined(FAILOVER)
#error "MUTANT_HANDOFF_GRACE_CONFIRM needs HANDOFF and FAILOVER"
#endif
#endif
/* A local clock starts at LC0. A handed-off term's base is its take's send
 * instant less (TTL - what it had left). With max_ttl capping the candidate
 * row at TTL, and a new server whose clock is ahead reading the copied row
 * as expiring earlier, that base can lie before a clock that started at 0
 * (less the tick it lost), so with HANDOFF and FAILOVER the clocks start
 * later by DRIFT + MAX_CLOCK_OFFSET (only intervals of one local clock are
 * compared, so where they start changes nothing else). */
#if defined(HANDOFF) && defined(FAILOVER)
#define LC0 (DRIFT + MAX_CLOCK_OFFSET)
#else
#define LC0 0
#endif
#ifdef MUTANT_MARGIN0          /* Margin 0 (the clocks still drift) */
#undef MARGIN
#define MARGIN 0
#endif

/* ---- session-bound leases (SESSION, issue 30) ---- */
#ifdef SESSION
#if NR != 2
#error "SESSION is modelled with 2 replicas: the waiting candidate is the other replica"
#endif
#if defined(JOB) || defined(WIPE)
#error "SESSION is modelled without JOB and WIPE"
#endif
#if defined(MUTANT_SESSION_HANDOFF_KEEPS_BINDING) && !defined(HANDOFF)
#error "MUTANT_SESSION_HANDOFF_KEEPS_BINDING needs HANDOFF"
#endif
#ifndef SESS_NOTE
#define SESS_NOTE 1            /* P9: ticks two bodies may be in their windows at once when no fault delays the holder's notice */
#endif
#if SESS_NOTE > 2
#error "P9's counter (2 bits) holds SESS_NOTE <= 2"
#endif
/* ticks before the row's expiry the server may end a session it no longer
 * hears from: 0, since only a holder whose session cannot end so within TTL
 * of the last statement the server heard is bound (eligibility) */
#ifdef MUTANT_SESSION_SHORT_KEEPALIVE /* bound anyway, with the server's timeout TTL/2 */
#define KA_EARLY (TTL / 2)
#else
#define KA_EARLY 0
#endif
#if defined(MUTANT_SESSION_RESTART_NO_GRACE) && !defined(FAILOVER) && !defined(SRV_RESTART)
#error "MUTANT_SESSION_RESTART_NO_GRACE needs FAILOVER or SRV_RESTART"
#endif
#if defined(SRV_RESTART) && defined(FAILOVER)
#error "SRV_RESTART (a clean restart) and FAILOVER (crash recovery or promotion) are separate configurations"
#endif
#else
#if defined(MUTANT_SESSION_TAKEOVER_NO_END) || defined(MUTANT_SESSION_IGNORES_END) || defined(MUTANT_SESSION_NO_READ) || defined(MUTANT_SESSION_RESTART_NO_GRACE) || defined(MUTANT_SESSION_SHORT_KEEPALIVE) || defined(MUTANT_SESSION_HANDOFF_KEEPS_BINDING) || defined(SESS_LIVE) || defined(SRV_RESTART)
#error "the session mutants, SESS_LIVE and SRV_RESTART need SESSION"
#endif
#endif

/* ---- scheduled jobs: one instant (JOB) ---- */
#ifdef JOB
#if defined(HANDOFF) || defined(FAILOVER) || defined(WIPE)
#error "JOB is modelled without HANDOFF, FAILOVER and WIPE"
#endif
/* job_claim's lease condition: the term (owner, token) holds the job's
 * lease unexpired on the database clock */
#ifdef MUTANT_JOB_NO_LEASE     /* job_claim does not check the lease */
#define JOB_HELD 1
#else
#define JOB_HELD (holder == i + 1 && ltoken == r[i].wrTok && expires > now)
#endif
/* retry: a run left running by an earlier term (lower token), the retry
 * window open (p_retry_until is not modelled: open until TMAX) */
#ifdef ATLEASTONCE
#ifdef MUTANT_JOB_RETRY_ANY    /* take over whatever the token, lease or not */
#define JOB_RETRY (jstate == J_RUNNING && jtok != r[i].wrTok)
#else
#define JOB_RETRY (JOB_HELD && jstate == J_RUNNING && jtok < r[i].wrTok)
#endif
#else
#ifdef MUTANT_JOB_RETRY_ANY
#error "MUTANT_JOB_RETRY_ANY needs ATLEASTONCE"
#endif
#define JOB_RETRY 0
#endif
/* P4 is not checked: a term whose claim is lost or skipped ends without
 * leading, by design, and the replicas campaign again at once */
#define P4_ON 0
#else
#define P4_ON 1
#if defined(ATLEASTONCE) || defined(MUTANT_JOB_NO_LEASE) || defined(MUTANT_JOB_RETRY_ANY)
#error "ATLEASTONCE and the job mutants need JOB"
#endif
#endif

/* ---- failover (design rule 5, pgleader._grace) ---- */
#if MAX_TTL < TTL
#error "acquire and renew refuse a TTL above max_ttl"
#endif
#ifdef FAILOVER                /* one crash recovery or promotion per run */
#ifndef FO_END
#define FO_END TMAX            /* the failover may happen only before this tick */
#endif
#if TMAX + MAX_TTL > 31
#error "TMAX + MAX_TTL must fit in 5 bits"
#endif
#ifdef STORE_SAME              /* the store is on the failed server: its rows roll back too */
#if FENCE0 != 0
#error "STORE_SAME takes maxClaimed = fence, which needs FENCE0 = 0"
#endif
#ifdef STRICT_P2               /* P2 without the exception for a token drawn twice (holds with the epochs) */
#define REDRAWN(t) 0
#else
#define REDRAWN(t) (fo == FO_DONE && (t) <= foMax)
#endif
#else                          /* the store is elsewhere and keeps its rows */
#define REDRAWN(t) 0
#endif
/* Token epochs (pgleader._epoch_bump): the server that notices it
 * is new raises every key's counter to the next epoch's base, above every
 * token the old server could draw (a key draws fewer than a span per
 * epoch). Abstractly: after the notice every draw is above EPOCH_BASE, and
 * the old server never draws EPOCH_BASE or more (P0). */
#define EPOCH_BASE 16
#ifdef MUTANT_NO_EPOCH         /* no epoch jump: the new server counts on from its copy */
#define DRAW_BASE 0
#else
#define DRAW_BASE (fo == FO_DONE && !epochEmpty -> EPOCH_BASE : 0)
#endif
#ifdef MUTANT_NO_GRACE         /* the grace removed: acquire grants at once, renew as before */
#define INGRACE 0
#elif defined(MUTANT_SESSION_RESTART_NO_GRACE)
/* the grace does not hold back a take-over of a row whose session ended
 * (and SESS_FREE below counts the old server's bindings as ended) */
#define INGRACE (fo == FO_DONE && (epochEmpty || now < graceUntil) && !(holder != 0 && expires > now && bend != SE_ALIVE))
#else
#define INGRACE (fo == FO_DONE && (epochEmpty || now < graceUntil))
#endif
#else
#define INGRACE 0
#define REDRAWN(t) 0
#define DRAW_BASE 0
#endif
#ifdef MUTANT_NO_OFFSET        /* renew in the grace ignores max_clock_offset */
#define GRACE_OFFSET 0
#else
#define GRACE_OFFSET MAX_CLOCK_OFFSET
#endif
/* campaign and take confirm a term handed to the caller only outside the
 * grace: every handed-off row seen in the grace was
 * written by the old server, and may be one that lost rows superseded. */
#ifdef MUTANT_HANDOFF_GRACE_CONFIRM
#define HOFF_GRACE_OK (!INGRACE || expires > now + GRACE_OFFSET)
#else
#define HOFF_GRACE_OK (!INGRACE)
#endif

/* ---- replica states (Run in pgleader/elector.go) ---- */
#define IDLE    0   /* waiting to campaign at lc >= wake */
#define ACQ     1   /* campaign: acquire sent at r[i].sent */
#define BACKOFF 2   /* the campaign failed: retry by lc >= wake */
#define LEAD    3   /* lead: a term */

/* term phases (runBody) */
#define CLAIMING  0 /* Claim not yet sent */
#define CLAIMSENT 1
#define BODY      2 /* Claim accepted: Lead runs */

/* statements to the lease row: one slot per replica */
#define R_NONE  0
#define R_ACQ   1   /* pgleader.acquire(key, owner, ttl, floor) */
#define R_RENEW 2   /* pgleader.renew(key, owner, token, ttl) */
#define R_REL   3   /* pgleader.release(key, owner, token) */
#define R_HOFF  4   /* pgleader.hand_off(key, owner, token) (HANDOFF) */

/* answers */
#define P_NONE 0
#define P_WON  1    /* acquire: acquired = true */
#define P_BUSY 2    /* acquire: acquired = false */
#define P_OK   3    /* renew returned the new expiry */
#define P_LOST 4    /* renew returned NULL: ErrLost */
#define P_ERR  5    /* the statement failed: network, server */

/* statements to the fenced store: one slot per replica */
#define W_NONE  0
#define W_CLAIM 1   /* claim: SET fence = $t WHERE fence < $t */
#define W_WRITE 2   /* write: SET fence = $t WHERE fence <= $t */
#define W_JOB   3   /* JOB: the term's Claim is pgleader.job_claim(job, instant, owner, token) */

/* JOB: the run row's state */
#define J_NONE    0 /* no row for the instant */
#define J_RUNNING 1
#define J_DONE    2

/* ---- state, packed: times, tokens and sequence numbers fit in 5 bits ---- */
#define W5 5
#if TMAX + TTL > 31
#error "TMAX + TTL must fit in 5 bits"
#endif

/* the database */
unsigned now : W5;        /* clock_timestamp() */
unsigned holder : 2;      /* lease.holder: 0 = NULL, else replica + 1 */
unsigned ltoken : W5;     /* lease.token: the key's counter */
unsigned expires : W5;    /* lease.expires_at */
unsigned fence : W5 = FENCE0; /* the store's fence */

/* one replica: the Go loop's state, and its statements in flight */
typedef Replica_t {
	unsigned lc : W5;       /* local monotonic clock */
	unsigned drift : 2;     /* ticks the clock has lost */
	bit slow;               /* the clock loses the next tick */
	bit paused;
	unsigned st : 2;
	unsigned wake : W5;
	unsigned sent : W5;     /* when the acquire or renew in flight was sent */
	unsigned tb : W5;       /* s: the base of the term's timeline */
	unsigned tok : W5;
	unsigned tseq : W5;     /* ghost: the term's place in acquisition order */
	unsigned phase : 2;
	bit ending;             /* Reason() != none */
	bit lost;               /* Reason() == lost */
	bit bodyOn;             /* Claim or Lead may still act */
	bit renewing;
	unsigned rnext : W5;    /* the renew timer */
#ifdef SESSION
	bit dead;               /* the process died (a crash): it never acts again */
	unsigned snote : 2;     /* its lease session ended; the end is on its way to the pending read */
	bit deaf;               /* its lease connection died silently: the end never reaches it, statements on it are lost */
	bit skill;              /* ghost: that end came while its process lived (terminate, proxy reset): P1's exception */
	bit sslow;              /* ghost: a fault (pause, lost end, delayed answer) kept it from learning within a tick: P9's */
	unsigned sovl : 2;      /* ghost, P9: ticks that ended with it stale in its window beside another body */
	bit woke;               /* its wait on the holder's session has returned (once per bound session) */
#endif
#ifdef HANDOFF
	unsigned req : 3;       /* a statement delayed on its way */
	unsigned cexp : W5;     /* candidate.expires_at of this replica (0: no row) */
	bit fin;                /* the term ends as finished: hand off */
	bit tkDel;              /* a take that confirmed: its answer is delayed */
	unsigned tkSent : W5;   /* when that take was sent */
	unsigned tkTok : W5;
	unsigned tkSeq : W5;
	unsigned tkB : W5;      /* what the term had left when that take ran */
	unsigned last : W5;     /* Elector.lastToken: the token of the last term led */
#if RESTARTS > 0
	unsigned pre : W5;      /* ghost: the highest token led before the replica's last restart */
#endif
#else
	unsigned req : 2;       /* a statement delayed on its way */
#endif
	unsigned reqArg : W5;   /* acquire: floor; renew, release: token */
	unsigned rep : 3;       /* an answer not yet taken in */
	bit repDel;             /* the answer is delayed */
	unsigned repTok : W5;
	unsigned repSeq : W5;
	unsigned wr : 2;        /* a store statement delayed on its way */
	unsigned wrTok : W5;
	unsigned wrSeq : W5
}
Replica_t r[NR];

/* faults and ghosts */
unsigned faults : 3;      /* faults so far */
unsigned returns : 2;     /* bodies that returned on their own so far */
unsigned seqN : W5;       /* acquisitions so far */
unsigned maxIssued : W5;  /* P3: highest token acquire issued */
unsigned maxClaimed : W5; /* P3: highest token a claim settled */
unsigned maxSeqW : W5;    /* P2: latest term, by acquisition, with an accepted write */
unsigned fenceSeq : W5;   /* P2: the term whose write set the fence */
bit wiped;                /* the lease row was lost during the run */
bit led;                  /* P4: a claim was accepted since the last tick */
#ifdef HANDOFF
bit hoff;                 /* lease.handed_off */
unsigned tkBound : W5;    /* scratch: what a handed-off term had left when take ran */
#if RESTARTS > 0
unsigned restarts : 2;    /* replicas restarted so far */
#endif
#endif
#ifdef FAILOVER
#define FO_NONE 0
#define FO_COPY 1                 /* the standby's copy is taken: rows after it are lost */
#define FO_DONE 2                 /* failed over: the new server runs from the copy */
unsigned fo : 2;
bit epochEmpty;           /* pgleader.server_epoch is empty: the next acquire or renew notices */
unsigned graceUntil : W5; /* server_epoch.grace_until (0 once the grace is over) */
unsigned cHolder : 2;     /* the copy of the lease row */
unsigned cToken : W5;
unsigned cExpires : W5;
unsigned foMax : W5;      /* P3: the highest token the old server issued */
#ifdef HANDOFF
bit cHoff;                /* the copy of lease.handed_off and of the candidate rows */
unsigned cCexp0 : W5;
unsigned cCexp1 : W5;
#endif
#ifdef STORE_SAME
unsigned cFence : W5;     /* the copy of the store, and P2's ghosts with it */
unsigned cFenceSeq : W5;
unsigned cMaxSeqW : W5;
#endif
#endif
unsigned p4 : 3;          /* P4: ticks free with a candidate and no leader */
#ifdef SESSION
#define SE_ALIVE   0              /* the holder's bound session lives */
#define SE_GONE    1              /* it ended with its process, or the server stopped hearing from it */
#define SE_KILLED  2              /* it ended while its process lived: terminated, a proxy's reset */
#define SE_RESTART 3              /* it ended with the server: the binding is from an earlier server run */
unsigned bend : 2;        /* the lease row's bound session (lease_binding: pid, backend_start, server_start) */
unsigned bwho : 2;        /* the replica whose session the row's binding names, + 1 (0: the term is not bound) */
#define NOTE_NONE  0
#define NOTE_FRESH 1              /* the end came in this tick */
#define NOTE_OLD   2              /* a tick has passed: the pending read returns now (urgent) */
#ifdef SRV_RESTART
bit restarted;            /* the server restarted cleanly (once per run) */
#endif
#ifdef SESS_LIVE
unsigned sfo : 3;         /* P10: 1 + ticks since the holder crashed without a new leader */
#endif
#endif
#ifdef JOB
unsigned jstate : 2;      /* job_run.state of the instant (J_NONE: no row) */
unsigned jtok : W5;       /* job_run.token */
unsigned runs : 2;        /* ghost: runs of the instant started (at most 3 counted) */
#endif

#define YAT(i)  (r[i].tb + YIELD_AT)
#define CAT(i)  (r[i].tb + CANCEL_AT)
#define SAT(i)  (r[i].tb + SAFE_END)
#define FAULTS  (now < FAULT_END)
#define BUDGET  (FAULTS && faults < FAULT_BUDGET)
#ifdef SESSION
/* acquire's free: also a row whose bound session ended on this server (the
 * grace still applies: acquire grants only FREE && !INGRACE) */
#define SESS_OVER (bwho != 0 && (bend == SE_GONE || bend == SE_KILLED))
#ifdef MUTANT_SESSION_TAKEOVER_NO_END  /* acquire does not check that the bound session ended */
#define SESS_FREE (holder != 0 && bend != SE_RESTART)
#elif defined(MUTANT_SESSION_RESTART_NO_GRACE) /* a binding of the old server counts as ended */
#define SESS_FREE (bend != SE_ALIVE)
#else
#define SESS_FREE SESS_OVER
#endif
#define FREE    (holder == 0 || expires <= now || SESS_FREE)
#else
#define FREE    (holder == 0 || expires <= now)
#endif
#ifdef FAILOVER
#define FAILED  (fo == FO_DONE)
#else
#define FAILED  0
#define foMax   0
#endif

/* Term.Live: the term has not begun to end and the clock is before Y. */
#define LIVE(i) (r[i].st == LEAD && !r[i].ending && (!TIMELINE || r[i].lc < YAT(i)))

/* The body's window: from the win until the safe end S. */
#define INWIN(i) (r[i].st == LEAD && r[i].bodyOn && (!TIMELINE || r[i].lc < SAT(i)))

#ifdef SESSION
/* i believes a term whose session ended while its process lived, and has
 * not learned it yet: P1's exception, and P5's */
#define STALE(i)   (r[i].skill && (r[i].snote != NOTE_NONE || r[i].deaf))
#define SESS_P1_EXEMPT ((INWIN(0) && STALE(0)) || (INWIN(1) && STALE(1)))
/* the pending read returns the end: at once, and no later than a tick after
 * it came; an answer already on its way is read first */
#ifdef MUTANT_SESSION_NO_READ  /* no read pending: the end is found by the next statement */
#define NOTE_READ(i) (!r[i].paused && r[i].snote != NOTE_NONE && r[i].rep == P_NONE && \
	(r[i].st != LEAD || (!r[i].renewing && r[i].lc >= r[i].rnext)))
#define NOTE_DUE(i) 0
#else
#define NOTE_READ(i) (!r[i].paused && r[i].snote != NOTE_NONE && r[i].rep == P_NONE)
#define NOTE_DUE(i) (r[i].snote == NOTE_OLD && r[i].rep == P_NONE)
#endif
/* the candidate's wait on the holder's session (its own connection) returns */
#define WAKE(i) (!r[i].paused && r[i].st == IDLE && r[i].lc < r[i].wake && r[i].snote == NOTE_NONE && \
	!r[i].woke && holder == (i ^ 1) + 1 && expires > now && SESS_OVER)
#ifdef SESS_LIVE               /* the wait's return is the loop's next step */
#define SESS_DUE(i) (NOTE_DUE(i) || WAKE(i))
#else                          /* any time from then (polling goes on) */
#define SESS_DUE(i) NOTE_DUE(i)
#endif
#define SESS_HEARS(i)   (r[i].snote == NOTE_NONE && !r[i].deaf)
#define SESS_QUIET(i)   (r[i].snote == NOTE_NONE)
#define SESS_DEAD(i)    r[i].dead
#define SESS_ALIVE(i)   (!r[i].dead)
#define SESS_RENEW_OK   (bend == SE_ALIVE)
/* a renewal binds a term not bound yet (a handed-off one): a new binding,
 * on which the other replica may wait again */
#define SESS_RENEW_BIND \
	r[0].woke = (bwho == i + 1 -> r[0].woke : false); r[1].woke = (bwho == i + 1 -> r[1].woke : false); \
	bwho = i + 1
/* i's term is bound to i's session: won or confirmed by campaign_bound, or
 * renewed by renew_bound (which binds a term not bound yet) */
#define SESS_BIND       bwho = i + 1; bend = SE_ALIVE; r[0].woke = false; r[1].woke = false
#define SESS_UNBIND     bwho = 0; bend = SE_ALIVE
/* hand_off gives the successor a term of its own (a new token), which no
 * binding names: it is bound once the successor confirms or renews it on
 * its own session, and lapses at its expiry until then */
#ifdef MUTANT_SESSION_HANDOFF_KEEPS_BINDING /* the binding stays with the row: the old holder's session */
#define SESS_HANDED     skip
#else
#define SESS_HANDED     SESS_UNBIND
#endif
#define SESS_STALE(i)   STALE(i)
/* a term's end forgets its session: the next term is on a new one */
#define SESS_CLEAR(i)   r[i].snote = NOTE_NONE; r[i].deaf = false; r[i].skill = false; r[i].sslow = false; r[i].sovl = 0
#define SESS_EARLY_NOTE \
	if \
	:: holder != 0 && expires > now && SESS_FREE && !INGRACE -> \
		printf("t%d db: r%d's row counts as free (its bound session ended: %d)\n", now, holder - 1, SESS_OVER) \
	:: else \
	fi
#else
#define SESS_EARLY_NOTE skip
#define SESS_CLEAR(i)   skip
#define SESS_P1_EXEMPT  0
#define SESS_DUE(i)     0
#define SESS_HEARS(i)   1
#define SESS_QUIET(i)   1
#define SESS_DEAD(i)    0
#define SESS_ALIVE(i)   1
#define SESS_RENEW_OK   1
#define SESS_RENEW_BIND skip
#define SESS_BIND       skip
#define SESS_UNBIND     skip
#define SESS_HANDED     skip
#define SESS_STALE(i)   0
#endif

/* What the Go loop does next without waiting for anything but its clock. */
#define DUE(i) (!r[i].paused && (SESS_DUE(i) || \
	(r[i].rep != P_NONE && !r[i].repDel) || \
	(r[i].st == IDLE && r[i].lc >= r[i].wake) || \
	(r[i].st == ACQ && (r[i].rep == P_NONE || r[i].repDel) && r[i].lc >= r[i].sent + TTL) || \
	(r[i].st == BACKOFF && r[i].lc >= r[i].wake) || \
	(r[i].st == LEAD && ( \
		!r[i].bodyOn || \
		(r[i].phase == CLAIMING && r[i].wr == W_NONE) || \
		(TIMELINE && !r[i].ending && r[i].lc >= YAT(i)) || \
		(!r[i].ending && !r[i].renewing && r[i].lc >= r[i].rnext) || \
		(r[i].renewing && (r[i].rep == P_NONE || r[i].repDel) && r[i].lc >= SAT(i))))))

/* In the fault-free suffix nothing stays delayed or paused. */
#define SETTLED(i) ((!r[i].paused || SESS_DEAD(i)) && r[i].req == R_NONE && r[i].rep == P_NONE && r[i].wr == W_NONE)

#if NR == 2
#define ALL(P)   (P(0) && P(1))
#define ANY(P)   (P(0) || P(1))
#define COUNT(P) (P(0) + P(1))
#else
#define ALL(P)   (P(0) && P(1) && P(2))
#define ANY(P)   (P(0) || P(1) || P(2))
#define COUNT(P) (P(0) + P(1) + P(2))
#endif
#define NOTDUE(i)       (!DUE(i))
#define LEADING(i)      (r[i].st == LEAD && r[i].phase == BODY && r[i].bodyOn)
#define CANDIDATE(i)    (!r[i].paused && (r[i].st == IDLE || (r[i].st == ACQ && (r[i].req != R_NONE || r[i].rep != P_NONE))))
#define RUNS_OUTSIDE(i) (r[i].bodyOn && !r[i].paused && !INWIN(i))

/* An assertion that names its property in a replayed trail. */
#define PROP(name, cond) \
	if \
	:: !(cond) -> printf("violated: P%d\n", name) \
	:: else \
	fi; \
	assert(cond)

/* P1: while the lease row is intact (a failover included) no two bodies
 * are in their windows at once, and a body that is not paused acts only
 * inside its window. With SESSION, one exception: a holder whose session
 * ended while its process lived, until it learns it (STALE; P9 bounds it). */
#define CHECK_P1 \
	PROP(1, wiped || COUNT(INWIN) <= 1 || SESS_P1_EXEMPT); \
	PROP(1, !ANY(RUNS_OUTSIDE))

/* ---- hand-off's additions to acquire (campaign) and release ---- */
#ifdef HANDOFF
/* a win clears handed_off and deletes the winner's and expired candidate rows */
#define HOFF_WON \
	hoff = false; r[i].cexp = 0; \
	r[i ^ 1].cexp = (r[i ^ 1].cexp > now -> r[i ^ 1].cexp : 0)
/* held by another term: register until now + CAND_EXP */
#define HOFF_REGISTER \
	if \
	:: holder != 0 && holder != i + 1 && expires > now -> r[i].cexp = now + CAND_EXP \
	:: else \
	fi
#define HOFF_CLEAR hoff = false
#define HOFF_ROW hoff
#define HOFF_LAST r[i].last = r[i].repTok
/* Run leads a won campaign only if its token is later than the last term
 * it led (elector.go: case won && lease.Token <= c.lastToken ends it) */
#define WON_NEW (r[i].repTok > r[i].last || MUTANT_RELEAD)
#else
#define HOFF_WON skip
#define HOFF_REGISTER skip
#define HOFF_CLEAR skip
#define HOFF_ROW 0
#define HOFF_LAST skip
#define WON_NEW true
#endif

/* _grace: the first lease call on the new server (acquire or campaign,
 * renew, hand_off, take; not release) notices */
#if defined(FAILOVER) && !defined(MUTANT_NO_GRACE)
#define GRACE_NOTICE \
	if \
	:: fo == FO_DONE && epochEmpty -> \
		epochEmpty = false; graceUntil = now + MAX_TTL; \
		printf("t%d db: grace until t%d\n", now, graceUntil) \
	:: else \
	fi
#else
#define GRACE_NOTICE skip
#endif

/* ---- the database runs replica i's statement (migrations/0001_pgleader.up.sql) ---- */
inline dbExec(i) {
	if
	:: r[i].req == R_ACQ || r[i].req == R_RENEW || r[i].req == R_HOFF -> GRACE_NOTICE
	:: else
	fi;
	if
#ifdef HANDOFF
	:: r[i].req == R_ACQ && holder == i + 1 && hoff && expires > now && HOFF_GRACE_OK ->
		/* campaign confirms a term handed to this owner, as take does */
		expires = now + TTL; hoff = false; r[i].cexp = 0; SESS_BIND;
		r[i].rep = P_WON; r[i].repTok = ltoken; r[i].repSeq = seqN;
		printf("t%d db: campaign r%d confirms handed-off token %d, expires %d\n", now, i, ltoken, expires)
	:: r[i].req == R_HOFF ->
		if
		:: holder == i + 1 && ltoken == r[i].reqArg && r[i ^ 1].cexp > now && !INGRACE ->
			PROP(0, ltoken < 31 && seqN < 31);
			/* token + 1, raised past the epoch's token_min by lease_draw */
			ltoken = (ltoken > DRAW_BASE -> ltoken : DRAW_BASE) + 1;
#ifdef FAILOVER
			PROP(0, FAILED || ltoken < EPOCH_BASE);
#endif
			holder = (i ^ 1) + 1; expires = r[i ^ 1].cexp;
			hoff = true; seqN++; SESS_HANDED;
			r[0].cexp = 0; r[1].cexp = 0;
			PROP(3, ltoken > maxIssued);
			maxIssued = ltoken;
			printf("t%d db: hand_off r%d token %d -> r%d token %d, expires %d\n", now, i, r[i].reqArg, i ^ 1, ltoken, expires)
		:: holder == i + 1 && ltoken == r[i].reqArg && (r[i ^ 1].cexp <= now || INGRACE) ->
			/* no live candidate, or the server's grace: release */
			holder = 0; expires = 0; hoff = false; r[i].cexp = 0; SESS_UNBIND;
			printf("t%d db: hand_off r%d token %d -> released\n", now, i, r[i].reqArg)
		:: else
		fi
#endif
	:: r[i].req == R_ACQ ->
		SESS_EARLY_NOTE;
		if
		:: FREE && !INGRACE ->
			/* P0: the model's own bounds (5-bit tokens and counters) */
			PROP(0, ltoken < 31 && r[i].reqArg < 31 && seqN < 31);
			ltoken = (ltoken > r[i].reqArg -> ltoken : r[i].reqArg);
			ltoken = (ltoken > DRAW_BASE -> ltoken : DRAW_BASE) + 1;
#ifdef FAILOVER
			/* P0: the old server stays below the new epoch (the draw limit) */
			PROP(0, FAILED || ltoken < EPOCH_BASE);
#endif
			holder = i + 1; expires = now + TTL; seqN++;
			HOFF_WON; SESS_BIND;
			/* P3: issued tokens strictly increase (lease row intact),
			 * across a failover too: the new server draws above the old
			 * one's epoch (docs/ha.md, Tokens). maxIssued is not reset
			 * at the failover, except in MUTANT_NO_EPOCH. */
			PROP(3, wiped || ltoken > maxIssued);
			maxIssued = (ltoken > maxIssued -> ltoken : maxIssued);
			r[i].rep = P_WON; r[i].repTok = ltoken; r[i].repSeq = seqN;
			printf("t%d db: acquire r%d floor=%d -> token %d, expires %d\n", now, i, r[i].reqArg, ltoken, expires)
		:: else ->
			r[i].rep = P_BUSY;
			HOFF_REGISTER;
			if
			:: FREE -> printf("t%d db: acquire r%d -> grace\n", now, i)
			:: else -> printf("t%d db: acquire r%d -> held\n", now, i)
			fi
		fi
	:: r[i].req == R_RENEW ->
		if
		:: holder == i + 1 && ltoken == r[i].reqArg && expires > now && SESS_RENEW_OK &&
		   (!INGRACE || expires > now + GRACE_OFFSET) ->
			expires = now + TTL; r[i].rep = P_OK; HOFF_CLEAR; SESS_RENEW_BIND;
			printf("t%d db: renew r%d token %d -> expires %d\n", now, i, r[i].reqArg, expires)
		:: else ->
			r[i].rep = P_LOST;
			printf("t%d db: renew r%d token %d -> not held\n", now, i, r[i].reqArg)
		fi
	:: r[i].req == R_REL ->
		if
		:: holder == i + 1 && ltoken == r[i].reqArg ->
			holder = 0; expires = 0; HOFF_CLEAR; SESS_UNBIND;
			printf("t%d db: release r%d token %d\n", now, i, r[i].reqArg)
		:: else
		fi
	fi;
	r[i].req = R_NONE; r[i].reqArg = 0
}

#ifdef JOB
/* ---- the database runs replica i's job_claim (migrations/0018_jobs.up.sql) ---- */
inline jobClaimDB(i) {
	if
	:: JOB_HELD && jstate == J_NONE ->
		ok = true; jstate = J_RUNNING; jtok = r[i].wrTok;
		printf("t%d db: job_claim r%d token %d -> run\n", now, i, r[i].wrTok)
	:: JOB_HELD && jstate == J_RUNNING && jtok == r[i].wrTok ->
		/* this term had claimed it already */
		ok = true;
		printf("t%d db: job_claim r%d token %d -> run (its own)\n", now, i, r[i].wrTok)
	:: JOB_RETRY ->
		/* P7: a run is taken over only by a higher token, and never
		 * from a term that still holds the lease unexpired. */
		PROP(7, r[i].wrTok > jtok && !(holder != 0 && ltoken == jtok && expires > now));
		ok = true;
		printf("t%d db: job_claim r%d token %d -> retry (the run had token %d)\n", now, i, r[i].wrTok, jtok);
		jtok = r[i].wrTok
	:: else ->
		ok = false;
		printf("t%d db: job_claim r%d token %d -> lost or skip\n", now, i, r[i].wrTok)
	fi;
	/* P6: a run is claimed (run or retry) only by the term acquired last */
	if
	:: ok -> PROP(6, r[i].wrSeq == seqN)
	:: else
	fi
}

/* The Claim hook takes in job_claim's answer (ok: run or retry): the
 * function starts only after one; else the body returns. */
inline jobAnswer(i) {
	if
	:: r[i].st == LEAD && r[i].tseq == r[i].wrSeq ->
		if
		:: ok ->
			r[i].phase = BODY; led = true;
#ifndef ATLEASTONCE
			if
			:: r[i].bodyOn ->
				runs = (runs < 3 -> runs + 1 : 3);
				printf("t%d r%d: runs the instant with token %d\n", now, i, r[i].tok);
				/* P8 (at most once): one run of the instant, ever */
				PROP(8, runs <= 1)
			:: else
			fi
#endif
		:: else -> r[i].bodyOn = false
		fi
	:: else
	fi;
	r[i].wr = W_NONE; r[i].wrTok = 0; r[i].wrSeq = 0;
	ok = false
}
#define JOB_ANSWER_LOST(G) \
	:: d_step { G && BUDGET -> CLAIM_SEND; fault(); jobClaimDB(i); \
		printf("t%d net: r%d's job_claim answer lost\n", now, i); ok = false; jobAnswer(i) }
/* job_finish(owner, token): done only if the run is still this term's */
#define JOB_FINISH \
	if \
	:: jstate == J_RUNNING && jtok == r[i].tok -> jstate = J_DONE; \
		printf("t%d db: job_finish r%d token %d -> done\n", now, i, r[i].tok) \
	:: else -> printf("t%d db: job_finish r%d token %d -> not its run\n", now, i, r[i].tok) \
	fi
#define JOB_FINISH_LOST \
	:: d_step { !r[i].paused && r[i].st == LEAD && r[i].phase == BODY && r[i].bodyOn && returns < RETURNS && BUDGET -> \
		fault(); returns++; r[i].bodyOn = false; printf("t%d r%d: body returns, its job_finish lost\n", now, i) }
#else
#define JOB_ANSWER_LOST(G)
#define JOB_FINISH skip
#define JOB_FINISH_LOST
#endif

/* ---- the store runs replica i's claim or write (sqlfence, the recipe's table) ---- */
inline storeExec(i) {
#ifdef JOB
	if
	:: r[i].wr == W_JOB -> jobClaimDB(i); jobAnswer(i)
	:: else ->
#endif
	live = (r[i].tseq == r[i].wrSeq && LIVE(i));
	if
	:: r[i].wr == W_CLAIM -> ok = CLAIM_OK(fence, r[i].wrTok)
	:: else -> ok = WRITE_OK(fence, r[i].wrTok)
	fi;
	if
	:: ok ->
		/* P2: no write of a term after a later term's first write.
		 * While the lease row is intact, later means acquired later;
		 * after it was lost, only a higher token can mean later, and
		 * one token must not write for two terms. After a failover that
		 * rolled the store back too (STORE_SAME), a token the old server
		 * issued (REDRAWN) may be drawn again for a later term, and the
		 * store cannot tell the two terms apart: that pair is exempt. */
		PROP(2, wiped || r[i].wrSeq >= maxSeqW || REDRAWN(r[i].wrTok));
		PROP(2, r[i].wrTok > fence || (r[i].wrTok == fence && (r[i].wrSeq == fenceSeq || REDRAWN(r[i].wrTok))));
		maxSeqW = (r[i].wrSeq > maxSeqW -> r[i].wrSeq : maxSeqW);
		fenceSeq = r[i].wrSeq;
		fence = r[i].wrTok;
		if
		:: r[i].wr == W_CLAIM ->
			/* P3: the tokens claims settle strictly increase. */
			PROP(3, r[i].wrTok > maxClaimed);
			maxClaimed = r[i].wrTok;
			printf("t%d store: claim r%d token %d accepted\n", now, i, r[i].wrTok)
		:: else ->
			printf("t%d store: write r%d token %d accepted\n", now, i, r[i].wrTok)
		fi
	:: else ->
		if
		:: r[i].wr == W_CLAIM -> printf("t%d store: claim r%d token %d refused, fence %d\n", now, i, r[i].wrTok, fence)
		:: else -> printf("t%d store: write r%d token %d refused, fence %d\n", now, i, r[i].wrTok, fence)
		fi;
		/* P5: the fence never refuses a live term (lease row intact),
		 * except one whose token the old server had issued before a
		 * failover (docs/ha.md, Tokens: the second holder is refused),
		 * and, with SESSION, a stale one (P1's exception). */
		PROP(5, wiped || !live || (FAILED && r[i].wrTok <= foMax) || RESTARTED(i) || SESS_STALE(i))
	fi;
	if
	:: r[i].st == LEAD && r[i].tseq == r[i].wrSeq ->
		if
		:: ok && r[i].wr == W_CLAIM -> r[i].phase = BODY; led = true
		:: ok
		:: else -> r[i].bodyOn = false   /* refused: the body returns */
		fi
	:: else
	fi;
	r[i].wr = W_NONE; r[i].wrTok = 0; r[i].wrSeq = 0;
	ok = false; live = false
#ifdef JOB
	fi
#endif
}

/* ---- replica i takes in the answer to its statement (pgleader/elector.go) ---- */
inline consume(i) {
	if
#ifdef HANDOFF
	:: r[i].st == ACQ && r[i].rep == P_WON && r[i].lc < r[i].sent + TTL && r[i].repTok <= r[i].last && !MUTANT_RELEAD ->
		/* the campaign confirmed the term this replica led last (its
		 * hand-off or release was lost), or an earlier one: Run hands it
		 * off again rather than lead a token twice, then campaigns as
		 * after a term */
		printf("t%d r%d: campaign confirmed its own ended token %d: hands it off\n", now, i, r[i].repTok);
		r[i].req = R_HOFF; r[i].reqArg = r[i].repTok; dbExec(i);
		r[i].st = IDLE; r[i].wake = r[i].lc + (holder == (i ^ 1) + 1 && hoff -> 0 : CAMPAIGN_EVERY)
#endif
	:: r[i].st == ACQ && r[i].rep == P_WON && r[i].lc < r[i].sent + TTL && WON_NEW ->
		/* campaign returns won; lead(token, sent) */
		r[i].st = LEAD; r[i].tok = r[i].repTok; r[i].tseq = r[i].repSeq; HOFF_LAST;
		r[i].tb = (TIMELINE_FROM_SEND -> r[i].sent : r[i].lc);
		r[i].phase = CLAIMING; r[i].ending = false; r[i].lost = false;
		r[i].renewing = false; r[i].rnext = r[i].tb + RENEW_EVERY;
		/* runBody starts; Claim fails at once if its context is cancelled */
		r[i].bodyOn = (!TIMELINE || r[i].lc < CAT(i));
		printf("t%d r%d: leads with token %d (lc %d, s %d)\n", now, i, r[i].tok, r[i].lc, r[i].tb)
	:: r[i].st == ACQ && r[i].rep == P_BUSY ->
		/* waitForExpiry: poll again after CampaignEvery */
		r[i].st = IDLE; r[i].wake = r[i].lc + CAMPAIGN_EVERY
	:: r[i].st == ACQ && r[i].rep != P_BUSY ->
		/* an error, or an answer after the campaign's deadline */
		r[i].st = BACKOFF; r[i].wake = r[i].lc + BACKOFF_MAX
	:: r[i].st == LEAD && r[i].renewing && r[i].rep == P_OK && r[i].lc < SAT(i) ->
		r[i].renewing = false;
		if
		:: !r[i].ending ->
			r[i].tb = (TIMELINE_FROM_SEND -> r[i].sent : r[i].lc);
			r[i].rnext = r[i].tb + RENEW_EVERY;
			printf("t%d r%d: renewed (lc %d, s %d)\n", now, i, r[i].lc, r[i].tb)
		:: else
		fi
	:: r[i].st == LEAD && r[i].renewing && r[i].rep == P_LOST && r[i].lc < SAT(i) ->
		r[i].renewing = false;
		if
		:: !r[i].ending -> r[i].ending = true; r[i].lost = true
		:: else
		fi;
		r[i].bodyOn = false;
		printf("t%d r%d: lease lost, body cancelled\n", now, i)
	:: r[i].st == LEAD && r[i].renewing ->
		/* an error, or an answer after the renew's deadline S: retry */
		r[i].renewing = false; r[i].rnext = r[i].lc + 1
	:: else   /* nobody waits for it any more */
	fi;
	r[i].rep = P_NONE; r[i].repDel = false; r[i].repTok = 0; r[i].repSeq = 0;
	if
	:: r[i].st != ACQ && !r[i].renewing -> r[i].sent = 0
	:: else
	fi
}

/* The term ends (the end of lead): release unless lost, then campaign
 * again after CampaignEvery. */
inline endTerm(i) {
	printf("t%d r%d: term with token %d ends\n", now, i, r[i].tok);
	r[i].reqArg = r[i].tok;
#ifdef HANDOFF
	r[i].req = (r[i].lost -> R_NONE : (r[i].fin -> R_HOFF : R_REL));
	/* after a hand-off Run campaigns at once (no CampaignEvery sleep) */
	r[i].wake = r[i].lc + (r[i].fin -> 0 : CAMPAIGN_EVERY); r[i].fin = false;
	r[i].st = IDLE;
#else
	r[i].req = (r[i].lost -> R_NONE : R_REL);
	r[i].st = IDLE; r[i].wake = r[i].lc + CAMPAIGN_EVERY;
#endif
	r[i].rep = P_NONE; r[i].repDel = false; r[i].repTok = 0; r[i].repSeq = 0;
	r[i].sent = 0; r[i].tb = 0; r[i].tok = 0; r[i].tseq = 0; r[i].phase = 0;
	r[i].ending = false; r[i].lost = false; r[i].renewing = false; r[i].rnext = 0;
	SESS_CLEAR(i)
}

#ifdef HANDOFF
#define HOFF_FIN   r[i].fin = !r[i].ending
#define HOFF_UNFIN r[i].fin = false
/* A hint naming replica i: real (sent after a hand-off committed), late,
 * or forged; lost ones are the runs where it never comes. The LISTEN
 * connection checks it at once, whatever the elector is doing, unless it
 * is leading (then nothing is handed to it) or paused. */
#define HINT    (!r[i].paused && r[i].st != LEAD && !r[i].tkDel)
/* pgleader.take finds a term handed to i: the row names i in a handed-off
 * unexpired term */
#define TAKE_OK (holder == i + 1 && hoff && expires > now && HOFF_GRACE_OK)
/* ... and Run leads it only if it is later than the last term it led */
#define TAKE_NEW (ltoken > r[i].last || MUTANT_RELEAD)
/* take(p_keep): with at least KEEP left it answers from a read and the
 * term keeps the hand-off's expiry; else it confirms, TTL from now. tkBound
 * is what the term has left, the bound lead counts from the check's send. */
inline takeExec(i) {
	GRACE_NOTICE;
	if
	:: expires >= now + KEEP ->
		tkBound = expires - now;
		printf("t%d db: take r%d reads token %d, %d left\n", now, i, ltoken, tkBound)
	:: else ->
		expires = now + TTL; hoff = false; r[i].cexp = 0; tkBound = TTL;
		printf("t%d db: take r%d confirms token %d, expires %d\n", now, i, ltoken, expires)
	fi
}
/* The elector leads the handed-off term: lead(token, sent, bound) with the
 * check's send instant; bound is min(TTL, what was left), so the timeline
 * is a won campaign's moved bound - TTL earlier (the first renewal too).
 * S + B >= TTL holds: a candidate row lasts CAND_TTL = TTL + MARGIN from
 * its campaign and a local clock lags by at most DRIFT <= MARGIN. A
 * campaign in progress is given up (Go: its answer is busy, and the
 * confirmed event is taken next). */
#ifdef MUTANT_HANDOFF_TTL_BOUND  /* a term believed on a read counts TTL from the check, not what it had left */
#define BOUND(B) TTL
#else
#define BOUND(B) ((B) < TTL -> (B) : TTL)
#endif
#define TAKE_LEAD(S, T, Q, B) \
	PROP(0, (TIMELINE_FROM_SEND -> (S) : r[i].lc) + BOUND(B) >= TTL); \
	r[i].st = LEAD; r[i].tok = (T); r[i].tseq = (Q); r[i].last = (T); \
	r[i].tb = (TIMELINE_FROM_SEND -> (S) : r[i].lc) + BOUND(B) - TTL; \
	r[i].phase = CLAIMING; r[i].ending = false; r[i].lost = false; r[i].fin = false; \
	r[i].renewing = false; r[i].rnext = r[i].tb + RENEW_EVERY; \
	r[i].rep = P_NONE; r[i].repDel = false; r[i].repTok = 0; r[i].repSeq = 0; \
	r[i].sent = 0; r[i].wake = 0; \
	r[i].bodyOn = (!TIMELINE || r[i].lc < CAT(i)); \
	printf("t%d r%d: leads handed-off token %d (lc %d, s %d)\n", now, i, r[i].tok, r[i].lc, r[i].tb)
#ifdef MUTANT_HANDOFF_NO_CHECK
/* the hint is believed: the term starts at its receipt, with the row's token */
#define HANDOFF_STEPS \
	:: d_step { HINT -> printf("t%d r%d: hint believed\n", now, i); TAKE_LEAD(r[i].lc, ltoken, seqN, TTL); CHECK_P1 }
#else
#define HANDOFF_STEPS \
	:: d_step { HINT && TAKE_OK && TAKE_NEW -> printf("t%d r%d: hint, take\n", now, i); takeExec(i); TAKE_LEAD(r[i].lc, ltoken, seqN, tkBound); tkBound = 0; CHECK_P1 } \
	:: d_step { HINT && TAKE_OK && !TAKE_NEW -> printf("t%d r%d: hint, take of a term led already: ignored\n", now, i); takeExec(i); tkBound = 0 } \
	:: d_step { HINT && TAKE_OK && BUDGET -> fault(); printf("t%d r%d: hint, take (answer lost)\n", now, i); takeExec(i); tkBound = 0 } \
	:: d_step { HINT && TAKE_OK && BUDGET -> fault(); printf("t%d r%d: hint, take (answer delayed)\n", now, i); takeExec(i); \
		r[i].tkDel = true; r[i].tkSent = r[i].lc; r[i].tkTok = ltoken; r[i].tkSeq = seqN; r[i].tkB = tkBound; tkBound = 0 } \
	:: d_step { !r[i].paused && r[i].tkDel -> \
		if \
		:: r[i].st != LEAD && r[i].tkTok > r[i].last && r[i].lc < r[i].tkSent + BOUND(r[i].tkB) - TTL + YIELD_AT -> TAKE_LEAD(r[i].tkSent, r[i].tkTok, r[i].tkSeq, r[i].tkB) \
		:: else -> printf("t%d r%d: take's answer too late, or for a term led already\n", now, i) \
		fi; \
		r[i].tkDel = false; r[i].tkSent = 0; r[i].tkTok = 0; r[i].tkSeq = 0; r[i].tkB = 0; CHECK_P1 }
#endif
#else
#define HOFF_FIN   skip
#define HOFF_UNFIN skip
#define HANDOFF_STEPS
#endif
#if defined(HANDOFF) && defined(FAILOVER)
/* a take that finds no term handed to i still notices a new server */
#define TAKE_NOTICE_STEP \
	:: d_step { HINT && !TAKE_OK && fo == FO_DONE && epochEmpty -> printf("t%d r%d: hint, take finds nothing\n", now, i); GRACE_NOTICE }
#else
#define TAKE_NOTICE_STEP
#endif
#if RESTARTS > 0
/* the replica's process restarts between campaigns: a fresh Elector with
 * the same Owner (the pod name), whose lastToken is 0. Its rows stay. */
#define RESTART_STEP \
	:: d_step { restarts < RESTARTS && !r[i].paused && r[i].st == IDLE && r[i].req == R_NONE && r[i].rep == P_NONE && !r[i].tkDel -> \
		restarts++; r[i].pre = (r[i].last > r[i].pre -> r[i].last : r[i].pre); r[i].last = 0; r[i].wake = r[i].lc; \
		printf("t%d r%d: restarts (a fresh Elector, same Owner)\n", now, i) }
#else
#define RESTART_STEP
#endif

inline campaignSend(i) {
	r[i].req = R_ACQ; r[i].reqArg = FLOOR; r[i].rep = P_NONE; r[i].repDel = false;
	r[i].sent = r[i].lc; r[i].st = ACQ; r[i].wake = 0;
	printf("t%d r%d: campaign (lc %d, floor %d)\n", now, i, r[i].lc, r[i].reqArg)
}

inline renewSend(i) {
	r[i].req = R_RENEW; r[i].reqArg = r[i].tok; r[i].rep = P_NONE; r[i].repDel = false;
	r[i].sent = r[i].lc; r[i].renewing = true;
	printf("t%d r%d: renew (lc %d)\n", now, i, r[i].lc)
}

inline dropReq(i) {
	printf("t%d net: r%d's statement lost\n", now, i);
	r[i].req = R_NONE; r[i].reqArg = 0
}

inline fault() { faults++ }

/* A statement to the lease row, sent when G holds: it runs and is answered
 * at once, or (a fault) is lost, fails, or is delayed, or its answer is
 * lost, fails, or is delayed. */
#define OFFER(G, SEND) \
	:: d_step { G -> SEND; dbExec(i); consume(i); CHECK_P1 } \
	:: d_step { G && BUDGET -> SEND; fault(); dropReq(i) } \
	:: d_step { G && BUDGET -> SEND; fault(); dropReq(i); r[i].rep = P_ERR; consume(i) } \
	:: d_step { G && BUDGET -> SEND; fault(); printf("t%d net: r%d's statement delayed\n", now, i) } \
	:: d_step { G && BUDGET -> SEND; fault(); dbExec(i); printf("t%d net: r%d's answer lost\n", now, i); r[i].rep = P_NONE; r[i].repTok = 0; r[i].repSeq = 0 } \
	:: d_step { G && BUDGET -> SEND; fault(); dbExec(i); r[i].rep = P_ERR; r[i].repTok = 0; r[i].repSeq = 0; consume(i) } \
	:: d_step { G && BUDGET -> SEND; fault(); dbExec(i); r[i].repDel = true; printf("t%d net: r%d's answer delayed\n", now, i) }

/* A statement to the store: runs at once, or is lost or delayed. */
#define STORE(G, SEND) \
	:: d_step { G -> SEND; storeExec(i) } \
	:: d_step { G && BUDGET -> SEND; fault(); printf("t%d net: r%d's store statement lost\n", now, i); r[i].wr = W_NONE; r[i].wrTok = 0; r[i].wrSeq = 0 } \
	:: d_step { G && BUDGET -> SEND; fault(); printf("t%d net: r%d's store statement delayed\n", now, i) }

#define CAMPAIGN    (!r[i].paused && r[i].st == IDLE && r[i].lc >= r[i].wake && SESS_QUIET(i))
#define RENEW_DUE   (!r[i].paused && r[i].st == LEAD && !r[i].ending && !r[i].renewing && r[i].lc >= r[i].rnext)
#define RENEW       (RENEW_DUE && SESS_HEARS(i))
#define ENDS        (!r[i].paused && r[i].st == LEAD && !r[i].bodyOn)
#define CLAIMS      (!r[i].paused && r[i].st == LEAD && r[i].bodyOn && r[i].phase == CLAIMING && r[i].wr == W_NONE)
#ifdef JOB
#define CLAIM_SEND  r[i].wr = W_JOB; r[i].wrTok = r[i].tok; r[i].wrSeq = r[i].tseq; r[i].phase = CLAIMSENT
#else
#define CLAIM_SEND  r[i].wr = W_CLAIM; r[i].wrTok = r[i].tok; r[i].wrSeq = r[i].tseq; r[i].phase = CLAIMSENT
#endif
#define WRITES      (!r[i].paused && r[i].st == LEAD && r[i].phase == BODY && r[i].bodyOn && r[i].wr == W_NONE && LIVE(i))
#define WRITE_SEND  r[i].wr = W_WRITE; r[i].wrTok = r[i].tok; r[i].wrSeq = r[i].tseq

#ifdef SESSION
/* The holder's pending read returns its session's end: the term ends as
 * lost and its body is cancelled at once (as on ErrLost); a campaign on
 * that connection fails. The next statement goes on a new session. */
inline noteRead(i) {
	r[i].snote = NOTE_NONE;
	if
	:: r[i].st == LEAD ->
#ifdef MUTANT_SESSION_IGNORES_END
		printf("t%d r%d: its lease session has ended: ignored\n", now, i)
#else
		if
		:: !r[i].ending -> r[i].ending = true; r[i].lost = true
		:: else
		fi;
		r[i].bodyOn = false; r[i].renewing = false;
		printf("t%d r%d: its lease session has ended: term lost, body cancelled\n", now, i)
#endif
	:: r[i].st == ACQ ->
		r[i].st = BACKOFF; r[i].wake = r[i].lc + BACKOFF_MAX; r[i].sent = 0;
		printf("t%d r%d: its lease session has ended: the campaign fails\n", now, i)
	:: else
	fi;
	r[i].skill = false; r[i].sslow = false; r[i].sovl = 0
}

/* the row's binding names i's session, which lives, and the row names i
 * (or was handed off from i: only MUTANT_SESSION_HANDOFF_KEEPS_BINDING
 * leaves a handed-off row bound) */
#define SESS_BOUND_LIVE (bwho == i + 1 && (holder == i + 1 || HOFF_ROW) && bend == SE_ALIVE && !r[i].dead)
#ifdef SESS_LIVE
#define SFO_START sfo = 1
#else
#define SFO_START skip
#endif

#define SESSION_STEPS \
	/* a crash: a statement already sent still runs (the server reads it \
	 * before the end of the stream), then the session ends; the replica \
	 * never acts again, but a store statement on its way may still land */ \
	:: d_step { BUDGET && SESS_BOUND_LIVE && !r[i ^ 1].dead -> \
		fault(); \
		if \
		:: r[i].req != R_NONE -> dbExec(i) \
		:: else \
		fi; \
		if \
		:: bwho == i + 1 -> bend = SE_GONE \
		:: else \
		fi; \
		r[i].dead = true; r[i].paused = true; r[i].st = IDLE; r[i].bodyOn = false; \
		r[i].lc = 0; r[i].drift = 0; r[i].slow = false; r[i].wake = 0; r[i].sent = 0; \
		r[i].tb = 0; r[i].tok = 0; r[i].tseq = 0; r[i].phase = 0; \
		r[i].ending = false; r[i].lost = false; r[i].renewing = false; r[i].rnext = 0; \
		r[i].rep = P_NONE; r[i].repDel = false; r[i].repTok = 0; r[i].repSeq = 0; \
		SESS_CLEAR(i); SFO_START; \
		printf("t%d r%d: crashes, its lease session ending with it\n", now, i); CHECK_P1 } \
	/* pg_terminate_backend, or a proxy's reset: the session ends while the \
	 * process lives; the end is on its way to the holder's pending read \
	 * (after any answer already on its way) */ \
	:: d_step { BUDGET && SESS_BOUND_LIVE -> \
		fault(); bend = SE_KILLED; r[i].req = R_NONE; r[i].reqArg = 0; \
		if \
		:: r[i].st == LEAD || r[i].st == ACQ -> r[i].snote = NOTE_FRESH; r[i].skill = true \
		:: else \
		fi; \
		printf("t%d db: r%d's lease session is terminated, its process lives on\n", now, i); CHECK_P1 } \
	/* ... or never reaches it: its connection died silently (a proxy that \
	 * reset the server side and hangs the client's) */ \
	:: d_step { BUDGET && SESS_BOUND_LIVE && r[i].st == LEAD -> \
		fault(); bend = SE_KILLED; r[i].req = R_NONE; r[i].reqArg = 0; \
		r[i].rep = P_NONE; r[i].repDel = false; r[i].repTok = 0; r[i].repSeq = 0; \
		r[i].deaf = true; r[i].skill = true; r[i].sslow = true; \
		printf("t%d db: r%d's lease session is reset, its process lives on and never hears of it\n", now, i); CHECK_P1 } \
	/* the server stops hearing from the holder (a partition) and ends the \
	 * session by keepalive, tcp_user_timeout or idle_session_timeout: only \
	 * a holder whose session cannot end so within TTL of the last statement \
	 * it heard is bound, so this comes at the row's expiry or later \
	 * (KA_EARLY = 0); the holder never hears of it */ \
	:: d_step { BUDGET && SESS_BOUND_LIVE && expires <= now + KA_EARLY -> \
		fault(); bend = SE_GONE; r[i].req = R_NONE; r[i].reqArg = 0; \
		r[i].rep = P_NONE; r[i].repDel = false; r[i].repTok = 0; r[i].repSeq = 0; \
		r[i].deaf = (r[i].st == LEAD); \
		printf("t%d db: the server stops hearing from r%d and ends its lease session\n", now, i); CHECK_P1 } \
	/* the candidate's wait on the holder's session returns: it campaigns now */ \
	:: d_step { WAKE(i) -> r[i].wake = r[i].lc; r[i].woke = true; \
		printf("t%d r%d: its wait on r%d's session returns\n", now, i, i ^ 1) } \
	:: d_step { NOTE_READ(i) -> noteRead(i); CHECK_P1 } \
	/* a deaf holder's renewal goes on its dead connection: lost */ \
	:: d_step { RENEW_DUE && r[i].deaf -> renewSend(i); dropReq(i) } \
	SESS_RESTART_LOST
#ifdef FAILOVER
/* after a failover the old server's host may be gone: the end of a
 * session it held never reaches the holder (no fault: the failover is) */
#define SESS_RESTART_LOST \
	:: d_step { r[i].snote != NOTE_NONE && !r[i].skill && r[i].st == LEAD -> \
		r[i].snote = NOTE_NONE; r[i].deaf = true; \
		r[i].rep = P_NONE; r[i].repDel = false; r[i].repTok = 0; r[i].repSeq = 0; \
		printf("t%d r%d: never hears that the old server ended its session\n", now, i) }
#else
#define SESS_RESTART_LOST
#endif
#else
#define SESSION_STEPS
#endif

proctype Replica(byte i) {
	bool ok, live;   /* storeExec's scratch, false between actions */
end:
	do
	/* -- urgent: timers and sequential steps of the Go loop -- */
	OFFER(CAMPAIGN, campaignSend(i))
	OFFER(RENEW, renewSend(i))
	:: d_step { ENDS && r[i].lost -> endTerm(i) }
	:: d_step { ENDS && !r[i].lost -> endTerm(i); dbExec(i) }
	:: d_step { ENDS && !r[i].lost && BUDGET -> endTerm(i); fault(); dropReq(i) }
	:: d_step { ENDS && !r[i].lost && BUDGET -> endTerm(i); fault(); printf("t%d net: r%d's release delayed\n", now, i) }
	STORE(CLAIMS && (!TIMELINE || r[i].lc < CAT(i)), CLAIM_SEND)
	JOB_ANSWER_LOST(CLAIMS && (!TIMELINE || r[i].lc < CAT(i)))
	:: d_step { CLAIMS && TIMELINE && r[i].lc >= CAT(i) -> r[i].bodyOn = false }
	:: d_step { !r[i].paused && r[i].rep != P_NONE && !r[i].repDel -> consume(i); CHECK_P1 }
	:: d_step { !r[i].paused && r[i].st == ACQ && (r[i].rep == P_NONE || r[i].repDel) && r[i].lc >= r[i].sent + TTL ->
		r[i].st = BACKOFF; r[i].wake = r[i].lc + BACKOFF_MAX; r[i].sent = 0;
		r[i].rep = P_NONE; r[i].repDel = false; r[i].repTok = 0; r[i].repSeq = 0 }
	:: d_step { !r[i].paused && r[i].st == BACKOFF && r[i].lc >= r[i].wake -> r[i].st = IDLE; r[i].wake = r[i].lc }
	:: d_step { !r[i].paused && r[i].st == LEAD && TIMELINE && !r[i].ending && r[i].lc >= YAT(i) ->
		r[i].ending = true; HOFF_UNFIN;
		printf("t%d r%d: yields (lc %d)\n", now, i, r[i].lc) }
	:: d_step { !r[i].paused && r[i].st == LEAD && r[i].renewing && (r[i].rep == P_NONE || r[i].repDel) && r[i].lc >= SAT(i) ->
		r[i].renewing = false; r[i].rnext = r[i].lc + 1; r[i].sent = 0;
		r[i].rep = P_NONE; r[i].repDel = false; r[i].repTok = 0; r[i].repSeq = 0 }

	/* -- not urgent: the body, delayed statements, faults, drift -- */
	STORE(WRITES, WRITE_SEND)
	HANDOFF_STEPS
	TAKE_NOTICE_STEP
	RESTART_STEP
	SESSION_STEPS
	:: d_step { !r[i].paused && r[i].st == LEAD && r[i].phase == BODY && r[i].bodyOn && returns < RETURNS ->
		returns++; r[i].bodyOn = false; HOFF_FIN; JOB_FINISH; printf("t%d r%d: body returns\n", now, i) }
	JOB_FINISH_LOST
	:: d_step { !r[i].paused && r[i].rep != P_NONE && r[i].repDel -> consume(i); CHECK_P1 }
	:: d_step { r[i].req != R_NONE -> dbExec(i) }
	:: d_step { r[i].wr != W_NONE -> storeExec(i) }
	:: d_step { !r[i].paused && r[i].st == BACKOFF -> r[i].st = IDLE; r[i].wake = r[i].lc }
	:: d_step { BUDGET && !r[i].paused -> fault(); r[i].paused = true;
		printf("t%d r%d: pauses (lc %d)\n", now, i, r[i].lc) }
	:: d_step { r[i].paused && SESS_ALIVE(i) ->
		r[i].paused = false;
		/* the elector's overdue timers fire at once: a body past S stops */
		if
		:: TIMELINE && r[i].bodyOn && r[i].lc >= SAT(i) -> r[i].bodyOn = false
		:: else
		fi;
		printf("t%d r%d: resumes (lc %d)\n", now, i, r[i].lc);
		CHECK_P1 }
	:: d_step { r[i].drift < DRIFT && !r[i].slow && SESS_ALIVE(i) -> r[i].drift++; r[i].slow = true;
		printf("t%d r%d: clock loses the next tick\n", now, i) }
	od
}

inline tickClock(i) {
	if
	:: r[i].slow || SESS_DEAD(i) -> r[i].slow = false
	:: else -> r[i].lc++
	fi;
	/* a body that honours Ending and its context has returned by S */
	if
	:: TIMELINE && !r[i].paused && r[i].bodyOn && r[i].lc >= SAT(i) -> r[i].bodyOn = false
	:: else
	fi
}

#ifdef FAILOVER
/* The primary dies (or crashes) and the new server (the promoted standby,
 * or the same one after crash recovery) runs from the copy: rows written
 * after it are lost, server_epoch is empty, and its clock reads OFF ticks
 * behind the old one's (|OFF| <= MAX_CLOCK_OFFSET), so the expiry the old
 * server stamped reads OFF ticks later. Statements in flight to the old
 * server are lost with their connections; from here on every statement
 * reaches the new server. */
#define FAILOVER_TO(OFF) \
	:: d_step { fo == FO_COPY && now < FO_END -> \
		holder = cHolder; ltoken = cToken; \
		expires = (cHolder != 0 -> cExpires + (OFF) : 0); \
		foMax = maxIssued; RESET_MAX_ISSUED; \
		STORE_ROLLBACK; \
		HOFF_RESTORE(OFF); \
		r[0].req = R_NONE; r[0].reqArg = 0; r[1].req = R_NONE; r[1].reqArg = 0; \
		DROP_REQ_3; \
		SESS_RESTART; \
		fo = FO_DONE; epochEmpty = true; cHolder = 0; cToken = 0; cExpires = 0; \
		printf("t%d db: failover: the new server has the copy, token %d, its clock %d behind\n", now, ltoken, OFF); \
		CHECK_P1 }
#ifdef HANDOFF
#define HOFF_RESTORE(OFF) \
	hoff = cHoff; \
	r[0].cexp = (cCexp0 != 0 -> cCexp0 + (OFF) : 0); r[1].cexp = (cCexp1 != 0 -> cCexp1 + (OFF) : 0); \
	cHoff = 0; cCexp0 = 0; cCexp1 = 0
#define HOFF_COPY cHoff = hoff; cCexp0 = r[0].cexp; cCexp1 = r[1].cexp
#else
#define HOFF_RESTORE(OFF) skip
#define HOFF_COPY skip
#endif
#ifdef MUTANT_NO_EPOCH
#define RESET_MAX_ISSUED maxIssued = ltoken
#else
#define RESET_MAX_ISSUED skip
#endif
#ifdef STORE_SAME
#define STORE_ROLLBACK \
	fence = cFence; fenceSeq = cFenceSeq; maxSeqW = cMaxSeqW; maxClaimed = cFence; \
	cFence = 0; cFenceSeq = 0; cMaxSeqW = 0; \
	r[0].wr = W_NONE; r[0].wrTok = 0; r[0].wrSeq = 0; r[1].wr = W_NONE; r[1].wrTok = 0; r[1].wrSeq = 0; \
	DROP_WR_3
#else
#define STORE_ROLLBACK skip
#endif
#if NR == 3
#define DROP_REQ_3 r[2].req = R_NONE; r[2].reqArg = 0
#define DROP_WR_3  r[2].wr = W_NONE; r[2].wrTok = 0; r[2].wrSeq = 0
#else
#define DROP_REQ_3 skip
#define DROP_WR_3  skip
#endif
#endif

#ifdef SESSION
/* at the end of a tick: an end that came in it is read by the next one;
 * a stale holder that a fault holds up (paused, its end lost, an answer
 * delayed ahead of the end) is exempt from P9, and its overlap lasts at
 * most to its safe end (P1's second clause) */
inline sessTick(i) {
	if
	:: STALE(i) && (r[i].paused || r[i].repDel || r[i].deaf) -> r[i].sslow = true
	:: else
	fi;
	if
	:: STALE(i) && INWIN(i) && COUNT(INWIN) > 1 -> r[i].sovl = (r[i].sovl < 3 -> r[i].sovl + 1 : 3)
	:: else
	fi;
	PROP(9, r[i].sovl <= SESS_NOTE || r[i].sslow);
	if
	:: r[i].snote == NOTE_FRESH -> r[i].snote = NOTE_OLD
	:: else
	fi
}
#ifdef SESS_LIVE
#ifndef SESS_FO
#define SESS_FO 0              /* P10: ticks from the holder's crash to the candidate's lead */
#endif
#if SESS_FO > 5
#error "P10's counter (3 bits) holds SESS_FO <= 5"
#endif
/* P10: after the holder's crash the candidate leads within SESS_FO ticks */
#define SFO_TICK \
	if \
	:: sfo != 0 && (led || ANY(LEADING)) -> sfo = 0 \
	:: sfo != 0 && !(led || ANY(LEADING)) -> sfo = (sfo < 7 -> sfo + 1 : 7); PROP(10, sfo <= SESS_FO + 1) \
	:: else \
	fi
#else
#define SFO_TICK skip
#endif
/* P9: a stale holder that no fault holds up learns within SESS_NOTE ticks:
 * it is in its window beside another body at the end of at most SESS_NOTE
 * ticks of one stale term */
#define SESS_TICK sessTick(0); sessTick(1); SFO_TICK
#if defined(FAILOVER) || defined(SRV_RESTART)
/* a failover or a restart ends every session: the row's binding is the old
 * server run's, and the end is on its way to each holder and campaigner */
inline sessRestart(k) {
	if
	:: !r[k].dead && r[k].snote == NOTE_NONE && !r[k].deaf && (r[k].st == LEAD || r[k].st == ACQ) -> r[k].snote = NOTE_FRESH
	:: else
	fi
}
#define SESS_RESTART bend = (holder != 0 -> SE_RESTART : SE_ALIVE); bwho = (holder != 0 -> bwho : 0); sessRestart(0); sessRestart(1)
#endif
#else
#define SESS_TICK skip
#define SESS_RESTART skip
#endif

proctype Clock() {
end:
	do
	:: d_step { now < TMAX && ALL(NOTDUE) && (FAULTS || ALL(SETTLED)) ->
		/* P4, in the fault-free suffix */
		if
		:: now >= FAULT_END && P4_ON ->
			if
			:: led || ANY(LEADING) -> p4 = 0
			:: else ->
				if
				:: FREE && !INGRACE && ANY(CANDIDATE) -> p4++
				:: else
				fi
			fi;
			PROP(4, p4 <= P4_N)
		:: else
		fi;
		SESS_TICK;
		led = false;
		now++;
#ifdef FAILOVER
		if
		:: graceUntil != 0 && now >= graceUntil -> graceUntil = 0
		:: else
		fi;
#endif
		tickClock(0); tickClock(1);
#if NR == 3
		tickClock(2);
#endif
		CHECK_P1 }
#ifdef FAILOVER
	:: d_step { fo == FO_NONE && now < FO_END ->
		fo = FO_COPY; cHolder = holder; cToken = ltoken; cExpires = expires; HOFF_COPY;
#ifdef STORE_SAME
		cFence = fence; cFenceSeq = fenceSeq; cMaxSeqW = maxSeqW;
#endif
		printf("t%d db: the standby has everything up to here\n", now) }
	FAILOVER_TO(0)
	FAILOVER_TO(1)
	FAILOVER_TO(-1)
#endif
#ifdef SRV_RESTART
	/* a clean restart (pg_ctl restart, fast mode): every session ends, each
	 * client is sent the end before its connection closes, statements in
	 * flight are lost with their connections; no row is lost and, with
	 * server_epoch kept, there is no grace */
	:: d_step { !restarted ->
		restarted = true;
		r[0].req = R_NONE; r[0].reqArg = 0; r[1].req = R_NONE; r[1].reqArg = 0;
		SESS_RESTART;
		printf("t%d db: the server restarts: every session ends\n", now);
		CHECK_P1 }
#endif
#ifdef WIPE
	:: d_step { BUDGET && !wiped ->
		fault(); holder = 0; ltoken = 0; expires = 0; wiped = true;
		printf("t%d db: the lease row is lost\n", now) }
#endif
	od
}

init {
	atomic {
		byte i;
		for (i : 0 .. NR - 1) {
			r[i].lc = LC0;
			run Replica(i)
		}
		run Clock()
	}
}
