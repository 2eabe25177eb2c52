/*
 * Session-bound leases for a Set (pgleader.Set: many keys shared among
 * members), modelled before it is built. lease.pml's -DSESSION models the
 * option for one key (an Elector, Options.SessionBound); this file models
 * the design for a Set. docs/model.md ("Session-bound leases for a Set")
 * states the design and what each check and mutant shows.
 *
 * Each live member m has ONE bound session S_m. While S_m lives it holds
 * m's member lock (a session-level advisory lock named for m), and every
 * key m wins is bound to S_m: the lease row records the binding (the
 * session's number and the server run). A member watches exactly one other
 * member, the next live one in the ring (members ordered by owner name), by
 * waiting for that member's lock on a second connection. When the lock is
 * granted the watched session has ended: the watcher campaigns, taking
 * every key bound to a session that ended on this server run, each with
 * its next token, and in the same statement (one snapshot) reads the next
 * live member, which it then watches. A member that joins (a new process,
 * or one whose session ended and that reconnects) runs the same statement
 * and enters the ring; the member before it moves its watch to it.
 *
 * The model has no clock. Every step is atomic; what the design says
 * happens at once or soon (the holder's pending read returning the end of
 * its session, a member reconnecting, a watcher's wake, the move of a
 * watch after a join) is an *eventual* step: the search lets it wait while
 * anything else happens, but a quiet state (one in which no eventual step
 * is pending) has taken them all. The timeline is abstracted: a holder
 * that believes a term renews it, and its row lapses at expiry only once
 * no one believes it (lease.pml checks that a term's safe end comes before
 * its row's expiry). Faults (crash, terminate, graceful leave, join) are
 * bounded by FAULT_BUDGET; a clean server restart (-DSRV_RESTART) is one
 * more event. -DNO_STORE leaves out the fenced store (claims and writes),
 * which lets the ring be checked with more faults or keys.
 *
 * Properties:
 *   P1  per key, at most one member believes a term, except a member whose
 *       session was ended on the running server while its process lives
 *       (terminated, a proxy's reset) and whose pending read has not yet
 *       returned that end (STALE).
 *   P2  a write lands only with a token no lower than every token that
 *       has claimed or written before it (the fence, by construction).
 *   P11 no orphan: in a quiet state in which a member is live, no key is
 *       bound to a session that ended on this server run. A dead member's
 *       keys are taken by the ring; a living member's old keys by its
 *       watcher or by its own campaign when it reconnects.
 */

/* ---- configuration (spin -D...) ---- */
#ifndef NM
#define NM 3                   /* members, in ring order (by owner name) */
#endif
#ifndef NK
#define NK 2                   /* keys of the set: 2 or 3 */
#endif
#ifndef FAULT_BUDGET
#define FAULT_BUDGET 2         /* crashes, terminations, graceful leaves and joins per run */
#endif
#if NM != 3
#error "the ring is modelled with 3 members"
#endif
#if NK != 2 && NK != 3
#error "NK is 2 or 3"
#endif
#if defined(MUTANT_SET_OLD_RUN) && !defined(SRV_RESTART)
#error "MUTANT_SET_OLD_RUN needs SRV_RESTART"
#endif

#define NONE NM                /* no member */

typedef Member {
	bit alive;             /* its process runs as a member */
	bit live;              /* S_m lives and holds m's member lock */
	byte gen;              /* S_m's number (its pid and backend_start) */
	bit snote;             /* S_m ended while the process lives: the end is on its way to the pending read */
	bit skill;             /* ghost: that end came on the running server (terminate, reset): P1's exception */
	byte watch;            /* the member whose lock its watch connection waits for (NONE: none) */
	bit wpend;             /* that wait has returned (the lock was granted, or the wait failed with the server) */
	bit rw;                /* a member joined right after it in the ring: its watch must move */
	bit bel[NK];           /* it believes a term of key k (its body runs) */
	bit claimed[NK];       /* that term's claim was accepted */
	byte mytok[NK];        /* that term's token */
	byte wr[NK]            /* a store write of key k on its way, with this token (0: none) */
};
Member m[NM];

byte holder[NK];               /* the lease row's holder + 1 (0: free) */
byte tok[NK];                  /* the greatest token of the key */
byte bgen[NK];                 /* the row's binding: the session's number */
bit brun[NK];                  /* ... and the server run it was made on */
byte fence[NK];                /* the store's fence for the key */
byte acc[NK];                  /* ghost, P2: the greatest token that claimed or wrote */
bit srun;                      /* the server run: 1 after the restart */
byte faults;
#ifdef SRV_RESTART
bit restarted;
#endif
byte y, nx, j, ci;             /* scratch within a step: zero between steps (SCRUB) */

#define BUDGET (faults < FAULT_BUDGET)
#define H(k)   (holder[k] - 1)

/* the session the row's binding names has ended, on this server run */
#define ENDED(k) (holder[k] != 0 && brun[k] == srun && !(m[H(k)].live && m[H(k)].gen == bgen[k]))

/* ---- mutants: each must produce a counterexample ---- */
#if defined(MUTANT_SET_TAKE_NO_END)
/* (1) the campaign takes another member's key without its session's end */
#define TAKES(p, x, k) (ENDED(k) || (holder[k] != 0 && holder[k] != (p) + 1 && brun[k] == srun))
#elif defined(MUTANT_SET_WATCHED_ONLY)
/* (4) the campaign takes only the watched member's keys */
#define TAKES(p, x, k) (ENDED(k) && holder[k] == (x) + 1)
#elif defined(MUTANT_SET_OLD_RUN)
/* (5) a binding made on the previous server run counts as ended */
#define TAKES(p, x, k) (holder[k] != 0 && !(m[H(k)].live && m[H(k)].gen == bgen[k]))
#else
#define TAKES(p, x, k) ENDED(k)
#endif

/* a believer whose session ended on the running server while its process
 * lives, before its pending read has returned the end: P1's exception */
#define STALE(i) (m[i].alive && m[i].snote && m[i].skill)

/* an eventual step of member i is pending */
#define PENDING(i) (m[i].alive && (m[i].snote || !m[i].live || m[i].wpend || m[i].rw))
#define QUIET (!PENDING(0) && !PENDING(1) && !PENDING(2))
#define SOMELIVE (m[0].live || m[1].live || m[2].live)

#define PROP(name, cond) \
	if \
	:: !(cond) -> printf("violated: P%d\n", name) \
	:: else \
	fi; \
	assert(cond)

#define NONSTALE(i, k) (m[i].bel[k] && !STALE(i))
#define P1K(k) PROP(1, NONSTALE(0, k) + NONSTALE(1, k) + NONSTALE(2, k) <= 1)
#if NK == 2
#define ORPHAN (ENDED(0) || ENDED(1))
#define CHECK_P1 P1K(0); P1K(1)
#else
#define ORPHAN (ENDED(0) || ENDED(1) || ENDED(2))
#define CHECK_P1 P1K(0); P1K(1); P1K(2)
#endif
#define SCRUB y = 0; nx = 0; j = 0; ci = 0
#define CHECK CHECK_P1; PROP(11, !(QUIET && SOMELIVE && ORPHAN)); SCRUB

/* p's campaign: every key its rule takes, each with the next token, bound
 * to p's session (x: the member whose wake it answers, NONE for a join) */
inline takeKeys(p, x) {
	j = 0;
	do
	:: j < NK ->
		if
		:: TAKES(p, x, j) ->
			printf("set m%d: takes key %d from m%d with token %d\n", p, j, H(j), tok[j] + 1);
			tok[j]++; holder[j] = p + 1; bgen[j] = m[p].gen; brun[j] = srun;
			m[p].bel[j] = 1; m[p].claimed[j] = 0; m[p].mytok[j] = tok[j]
		:: else
		fi;
		j++
	:: else -> break
	od
}

/* nx: the next live member after p in the ring, or NONE */
inline nextLive(p) {
	nx = NONE; ci = 1;
	do
	:: ci < NM ->
		y = (p + ci) % NM;
		if
		:: m[y].live -> nx = y; break
		:: else -> ci++
		fi
	:: else -> break
	od
}

/* the statement and the snapshot: take, then watch the next live member */
inline campaignMove(p, x) {
	takeKeys(p, x);
	nextLive(p);
	m[p].watch = nx; m[p].wpend = 0; m[p].rw = 0;
	if
	:: nx != NONE -> printf("set m%d: watches m%d\n", p, nx)
	:: else -> printf("set m%d: watches no one (no other member is live)\n", p)
	fi
}

/* S_x ends: its lock is granted to each member waiting for it */
inline endSession(x) {
	m[x].live = 0;
	j = 0;
	do
	:: j < NM ->
		if
		:: m[j].alive && m[j].watch == x -> m[j].wpend = 1
		:: else
		fi;
		j++
	:: else -> break
	od
}

/* x entered the ring: the live member before it moves its watch to x */
inline joinRing(x) {
	ci = 1;
	do
	:: ci < NM ->
		y = (x + NM - ci) % NM;
		if
		:: m[y].live -> m[y].rw = 1; break
		:: else -> ci++
		fi
	:: else -> break
	od
}

inline forget(i) {
	j = 0;
	do
	:: j < NK -> m[i].bel[j] = 0; m[i].claimed[j] = 0; m[i].mytok[j] = 0; j++
	:: else -> break
	od
}

/* ---- one key's steps for member i ---- */
#define KEY_STEPS(k) \
	/* a campaign finds the key free (never held, released or expired) */ \
	:: d_step { m[i].alive && m[i].live && !m[i].snote && holder[k] == 0 -> \
		tok[k]++; holder[k] = i + 1; bgen[k] = m[i].gen; brun[k] = srun; \
		m[i].bel[k] = 1; m[i].claimed[k] = 0; m[i].mytok[k] = tok[k]; \
		printf("set m%d: wins key %d with token %d\n", i, k, tok[k]); CHECK } \
	STORE_STEPS(k)

/* the fenced store: -DNO_STORE leaves it out (a ring check; P2 is checked
 * with it) */
#ifdef NO_STORE
#define STORE_STEPS(k)
#else
#define STORE_STEPS(k) \
	/* Claim: the fence moves up to the token, or the term is refused */ \
	:: d_step { m[i].alive && m[i].bel[k] && !m[i].claimed[k] -> \
		if \
		:: fence[k] < m[i].mytok[k] -> fence[k] = m[i].mytok[k]; m[i].claimed[k] = 1; \
			PROP(2, m[i].mytok[k] >= acc[k]); acc[k] = m[i].mytok[k]; \
			printf("set m%d: claims key %d with token %d\n", i, k, m[i].mytok[k]) \
		:: else -> m[i].bel[k] = 0; \
			printf("set m%d: claim of key %d refused: term ends\n", i, k) \
		fi; CHECK } \
	/* the body sends a write with its token */ \
	:: d_step { m[i].alive && m[i].bel[k] && m[i].claimed[k] && m[i].wr[k] == 0 -> \
		m[i].wr[k] = m[i].mytok[k]; \
		printf("set m%d: sends a write of key %d with token %d\n", i, k, m[i].wr[k]) } \
	/* the write lands, later, even after its process died */ \
	:: d_step { m[i].wr[k] != 0 -> \
		if \
		:: fence[k] <= m[i].wr[k] -> PROP(2, m[i].wr[k] >= acc[k]); acc[k] = m[i].wr[k]; \
			printf("set store: write of key %d with token %d accepted\n", k, m[i].wr[k]) \
		:: else -> printf("set store: write of key %d with token %d refused (fence %d)\n", k, m[i].wr[k], fence[k]) \
		fi; \
		m[i].wr[k] = 0; CHECK }
#endif

proctype Mem(byte i) {
end:
	do
	KEY_STEPS(0)
	KEY_STEPS(1)
#if NK == 3
	KEY_STEPS(2)
#endif
	/* a crash: the process dies and S_i ends with it; its writes on their
	 * way may still land */
	:: d_step { BUDGET && m[i].alive -> faults++;
		m[i].alive = 0; forget(i);
		m[i].snote = 0; m[i].skill = 0; m[i].wpend = 0; m[i].rw = 0; m[i].watch = NONE;
		if
		:: m[i].live -> endSession(i)
		:: else
		fi;
		printf("set m%d: crashes, its session ending with it\n", i); CHECK }
	/* pg_terminate_backend, or a proxy's reset: S_i ends, the process
	 * lives; the end is on its way to the pending read */
	:: d_step { BUDGET && m[i].alive && m[i].live -> faults++;
		endSession(i); m[i].snote = 1; m[i].skill = 1;
		printf("set db: m%d's session is terminated, its process lives on\n", i); CHECK }
	/* a graceful leave: release every key, unlock, delete the member row */
	:: d_step { BUDGET && m[i].alive && m[i].live && !m[i].snote -> faults++;
		j = 0;
		do
		:: j < NK ->
			if
			:: holder[j] == i + 1 -> holder[j] = 0
			:: else
			fi;
			j++
		:: else -> break
		od;
		forget(i); endSession(i);
		m[i].alive = 0; m[i].wpend = 0; m[i].rw = 0; m[i].watch = NONE;
		printf("set m%d: leaves, releasing its keys\n", i); CHECK }
	/* a member process starts (again) with this owner */
	:: d_step { BUDGET && !m[i].alive -> faults++;
		m[i].alive = 1;
		printf("set m%d: starts\n", i) }
	/* the pending read returns the end of S_i: every term ends as lost */
	:: d_step { m[i].alive && m[i].snote ->
		m[i].snote = 0; m[i].skill = 0;
#ifdef MUTANT_SET_IGNORES_END
		printf("set m%d: reads its session's end: ignored\n", i);
#else
		forget(i);
		printf("set m%d: reads its session's end: every term lost\n", i);
#endif
		CHECK }
	/* a new session: lock, campaign, watch; the member before it moves */
	:: d_step { m[i].alive && !m[i].live && !m[i].snote ->
		m[i].live = 1; m[i].gen++;
		printf("set m%d: opens session %d, locks its member lock\n", i, m[i].gen);
		campaignMove(i, NONE); joinRing(i); CHECK }
	/* its wait for the watched member's lock returns */
	:: d_step { m[i].alive && m[i].live && m[i].wpend ->
		printf("set m%d: its wait on m%d's lock returns\n", i, m[i].watch);
#ifdef MUTANT_SET_NO_MOVE
		takeKeys(i, m[i].watch); m[i].wpend = 0;
#else
		campaignMove(i, m[i].watch);
#endif
		CHECK }
	/* a member joined right after it: it moves its watch */
	:: d_step { m[i].alive && m[i].live && m[i].rw && !m[i].wpend ->
		printf("set m%d: sees a member join after it\n", i);
		campaignMove(i, NONE); CHECK }
	od
}

proctype Server() {
end:
	do
	/* a key lapses at its expiry, once no one believes its term */
	:: d_step { holder[0] != 0 && !m[H(0)].bel[0] -> holder[0] = 0;
		printf("set db: key 0 expires\n"); CHECK }
	:: d_step { holder[1] != 0 && !m[H(1)].bel[1] -> holder[1] = 0;
		printf("set db: key 1 expires\n"); CHECK }
#if NK == 3
	:: d_step { holder[2] != 0 && !m[H(2)].bel[2] -> holder[2] = 0;
		printf("set db: key 2 expires\n"); CHECK }
#endif
#ifdef SRV_RESTART
	/* a clean restart: every session ends (each process is sent the
	 * end), every wait fails, writes in flight are lost; rows stay */
	:: d_step { !restarted -> restarted = 1; srun = 1;
		j = 0;
		do
		:: j < NM ->
			if
			:: m[j].alive ->
				if
				:: m[j].live -> m[j].live = 0; m[j].snote = 1; m[j].skill = 0
				:: else
				fi;
				m[j].wpend = 1
			:: else
			fi;
			m[j].wr[0] = 0; m[j].wr[1] = 0;
#if NK == 3
			m[j].wr[2] = 0;
#endif
			j++
		:: else -> break
		od;
		printf("set db: the server restarts: every session ends\n"); CHECK }
#endif
	od
}

init {
	atomic {
		byte i;
		for (i : 0 .. NM - 1) {
			m[i].alive = 1; m[i].live = 1; m[i].watch = (i + 1) % NM
		}
		for (i : 0 .. NM - 1) {
			run Mem(i)
		}
		run Server()
	}
}
