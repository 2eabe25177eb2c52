/*
 * pgleader: replicas electing a leader through a lease row in PostgreSQL and
 * writing to a fenced store. docs/model-checking.md maps every action here
 * to the SQL function or Go code that implements it, and lists what is
 * abstracted away. model/check.sh runs the checks and the mutants.
 *
 * Time is discrete. `now` is the database clock, in ticks; each replica has
 * its own local clock lc[i], which may lose up to DRIFT ticks over the
 * run (TMAX < 2 TTL, so one tick is a rate bound of 1/TTL). Every action is atomic (d_step). What a Go timer or a sequential
 * step of the Go loop does next is urgent: time does not pass while it is
 * enabled, unless the replica is paused. A statement normally runs, and is
 * answered, at the instant it is sent; a fault may instead lose it, fail
 * it, or delay it (or its answer) for any number of ticks. The body's
 * choices (write, return) are never urgent.
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
#ifdef MUTANT_MARGIN0          /* Margin 0 (the clocks still drift) */
#undef MARGIN
#define MARGIN 0
#endif

/* ---- replica states (Run in pgleader/elector.go) ---- */
#define IDLE    0   /* waiting to campaign at lc >= wake */
#define ACQ     1   /* campaign: acquire sent at sent[i] */
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

/* ---- the database ---- */
byte now;            /* clock_timestamp() */
byte holder;         /* lease.holder: 0 = NULL, else replica + 1 */
byte ltoken;         /* lease.token: the key's counter */
byte expires;        /* lease.expires_at */
byte fence = FENCE0; /* the store's fence */

/* ---- the replicas ---- */
byte lc[NR];         /* local monotonic clock */
byte drift[NR];      /* ticks the clock has lost */
bool slow[NR];       /* the clock loses the next tick */
bool paused[NR];
byte st[NR];
byte wake[NR];
byte sent[NR];       /* when the acquire or renew in flight was sent */
byte tb[NR];         /* s: the base of the term's timeline */
byte tok[NR];
byte tseq[NR];       /* ghost: the term's place in acquisition order */
byte phase[NR];
bool ending[NR];     /* Reason() != none */
bool lost[NR];       /* Reason() == lost */
bool bodyOn[NR];     /* Claim or Lead may still act */
bool renewing[NR];
byte rnext[NR];      /* the renew timer */

/* ---- statements and answers in flight (after a delay fault) ---- */
byte req[NR];
byte reqArg[NR];     /* acquire: floor; renew, release: token */
byte rep[NR];
bool repDel[NR];     /* the answer is delayed */
byte repTok[NR];
byte repSeq[NR];
byte wr[NR];
byte wrTok[NR];
byte wrSeq[NR];

/* ---- faults and ghosts ---- */
byte faults;         /* faults so far */
byte returns;        /* bodies that returned on their own so far */
byte seqN;           /* acquisitions so far */
byte maxIssued;      /* P3: highest token acquire issued */
byte maxClaimed;     /* P3: highest token a claim settled */
byte maxSeqW;        /* P2: latest term, by acquisition, with an accepted write */
byte fenceSeq;       /* P2: the term whose write set the fence */
bool wiped;          /* the lease row was lost during the run */
bool led;            /* P4: a claim was accepted since the last tick */
byte p4;             /* P4: ticks free with a candidate and no leader */

#define YAT(i)  (tb[i] + YIELD_AT)
#define CAT(i)  (tb[i] + CANCEL_AT)
#define SAT(i)  (tb[i] + SAFE_END)
#define FAULTS  (now < FAULT_END)
#define BUDGET  (FAULTS && faults < FAULT_BUDGET)
#define FREE    (holder == 0 || expires <= now)

/* Term.Live: the term has not begun to end and the clock is before Y. */
#define LIVE(i) (st[i] == LEAD && !ending[i] && (!TIMELINE || lc[i] < YAT(i)))

/* The body's window: from the win until the safe end S. */
#define INWIN(i) (st[i] == LEAD && bodyOn[i] && (!TIMELINE || lc[i] < SAT(i)))

/* What the Go loop does next without waiting for anything but its clock. */
#define DUE(i) (!paused[i] && ( \
	(rep[i] != P_NONE && !repDel[i]) || \
	(st[i] == IDLE && lc[i] >= wake[i]) || \
	(st[i] == ACQ && (rep[i] == P_NONE || repDel[i]) && lc[i] >= sent[i] + TTL) || \
	(st[i] == BACKOFF && lc[i] >= wake[i]) || \
	(st[i] == LEAD && ( \
		!bodyOn[i] || \
		(phase[i] == CLAIMING && wr[i] == W_NONE) || \
		(TIMELINE && !ending[i] && lc[i] >= YAT(i)) || \
		(!ending[i] && !renewing[i] && lc[i] >= rnext[i]) || \
		(renewing[i] && (rep[i] == P_NONE || repDel[i]) && lc[i] >= SAT(i))))))

/* In the fault-free suffix nothing stays delayed or paused. */
#define SETTLED(i) (!paused[i] && req[i] == R_NONE && rep[i] == P_NONE && wr[i] == W_NONE)

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
#define LEADING(i)      (st[i] == LEAD && phase[i] == BODY && bodyOn[i])
#define CANDIDATE(i)    (!paused[i] && (st[i] == IDLE || (st[i] == ACQ && (req[i] != R_NONE || rep[i] != P_NONE))))
#define RUNS_OUTSIDE(i) (bodyOn[i] && !paused[i] && !INWIN(i))

/* An assertion that names its property in a replayed trail. */
#define PROP(name, cond) \
	if \
	:: !(cond) -> printf("violated: P%d\n", name) \
	:: else \
	fi; \
	assert(cond)

/* P1: while the lease row is intact no two bodies are in their windows at
 * once, and a body that is not paused acts only inside its window. */
#define CHECK_P1 \
	PROP(1, wiped || COUNT(INWIN) <= 1); \
	PROP(1, !ANY(RUNS_OUTSIDE))

/* ---- the database runs replica i's statement (migrations/0001_lease.up.sql) ---- */
inline dbExec(i) {
	if
	:: req[i] == R_ACQ ->
		if
		:: FREE ->
			ltoken = (ltoken > reqArg[i] -> ltoken : reqArg[i]) + 1;
			holder = i + 1; expires = now + TTL; seqN++;
			/* P3: issued tokens strictly increase (lease row intact). */
			PROP(3, wiped || ltoken > maxIssued);
			maxIssued = (ltoken > maxIssued -> ltoken : maxIssued);
			rep[i] = P_WON; repTok[i] = ltoken; repSeq[i] = seqN;
			printf("t%d db: acquire r%d floor=%d -> token %d, expires %d\n", now, i, reqArg[i], ltoken, expires)
		:: else ->
			rep[i] = P_BUSY;
			printf("t%d db: acquire r%d -> held\n", now, i)
		fi
	:: req[i] == R_RENEW ->
		if
		:: holder == i + 1 && ltoken == reqArg[i] && expires > now ->
			expires = now + TTL; rep[i] = P_OK;
			printf("t%d db: renew r%d token %d -> expires %d\n", now, i, reqArg[i], expires)
		:: else ->
			rep[i] = P_LOST;
			printf("t%d db: renew r%d token %d -> not held\n", now, i, reqArg[i])
		fi
	:: req[i] == R_REL ->
		if
		:: holder == i + 1 && ltoken == reqArg[i] ->
			holder = 0; expires = 0;
			printf("t%d db: release r%d token %d\n", now, i, reqArg[i])
		:: else
		fi
	fi;
	req[i] = R_NONE; reqArg[i] = 0
}

/* ---- the store runs replica i's claim or write (sqlfence, the recipe's table) ---- */
inline storeExec(i) {
	live = (tseq[i] == wrSeq[i] && LIVE(i));
	if
	:: wr[i] == W_CLAIM -> ok = CLAIM_OK(fence, wrTok[i])
	:: else -> ok = WRITE_OK(fence, wrTok[i])
	fi;
	if
	:: ok ->
		/* P2: no write of a term after a later term's first write.
		 * While the lease row is intact, later means acquired later;
		 * after it was lost, only a higher token can mean later, and
		 * one token must not write for two terms. */
		PROP(2, wiped || wrSeq[i] >= maxSeqW);
		PROP(2, wrTok[i] > fence || (wrTok[i] == fence && wrSeq[i] == fenceSeq));
		maxSeqW = (wrSeq[i] > maxSeqW -> wrSeq[i] : maxSeqW);
		fenceSeq = wrSeq[i];
		fence = wrTok[i];
		if
		:: wr[i] == W_CLAIM ->
			/* P3: the tokens claims settle strictly increase. */
			PROP(3, wrTok[i] > maxClaimed);
			maxClaimed = wrTok[i];
			printf("t%d store: claim r%d token %d accepted\n", now, i, wrTok[i])
		:: else ->
			printf("t%d store: write r%d token %d accepted\n", now, i, wrTok[i])
		fi
	:: else ->
		if
		:: wr[i] == W_CLAIM -> printf("t%d store: claim r%d token %d refused, fence %d\n", now, i, wrTok[i], fence)
		:: else -> printf("t%d store: write r%d token %d refused, fence %d\n", now, i, wrTok[i], fence)
		fi;
		/* P5: the fence never refuses a live term (lease row intact). */
		PROP(5, wiped || !live)
	fi;
	if
	:: st[i] == LEAD && tseq[i] == wrSeq[i] ->
		if
		:: ok && wr[i] == W_CLAIM -> phase[i] = BODY; led = true
		:: ok
		:: else -> bodyOn[i] = false   /* refused: the body returns */
		fi
	:: else
	fi;
	wr[i] = W_NONE; wrTok[i] = 0; wrSeq[i] = 0;
	ok = false; live = false
}

/* ---- replica i takes in the answer to its statement (pgleader/elector.go) ---- */
inline consume(i) {
	if
	:: st[i] == ACQ && rep[i] == P_WON && lc[i] < sent[i] + TTL ->
		/* campaign returns won; lead(token, sent) */
		st[i] = LEAD; tok[i] = repTok[i]; tseq[i] = repSeq[i];
		tb[i] = (TIMELINE_FROM_SEND -> sent[i] : lc[i]);
		phase[i] = CLAIMING; ending[i] = false; lost[i] = false;
		renewing[i] = false; rnext[i] = tb[i] + RENEW_EVERY;
		/* runBody starts; Claim fails at once if its context is cancelled */
		bodyOn[i] = (!TIMELINE || lc[i] < CAT(i));
		printf("t%d r%d: leads with token %d (lc %d, s %d)\n", now, i, tok[i], lc[i], tb[i])
	:: st[i] == ACQ && rep[i] == P_BUSY ->
		/* waitForExpiry: poll again after CampaignEvery */
		st[i] = IDLE; wake[i] = lc[i] + CAMPAIGN_EVERY
	:: st[i] == ACQ && rep[i] != P_BUSY ->
		/* an error, or an answer after the campaign's deadline */
		st[i] = BACKOFF; wake[i] = lc[i] + BACKOFF_MAX
	:: st[i] == LEAD && renewing[i] && rep[i] == P_OK && lc[i] < SAT(i) ->
		renewing[i] = false;
		if
		:: !ending[i] ->
			tb[i] = (TIMELINE_FROM_SEND -> sent[i] : lc[i]);
			rnext[i] = tb[i] + RENEW_EVERY;
			printf("t%d r%d: renewed (lc %d, s %d)\n", now, i, lc[i], tb[i])
		:: else
		fi
	:: st[i] == LEAD && renewing[i] && rep[i] == P_LOST && lc[i] < SAT(i) ->
		renewing[i] = false;
		if
		:: !ending[i] -> ending[i] = true; lost[i] = true
		:: else
		fi;
		bodyOn[i] = false;
		printf("t%d r%d: lease lost, body cancelled\n", now, i)
	:: st[i] == LEAD && renewing[i] ->
		/* an error, or an answer after the renew's deadline S: retry */
		renewing[i] = false; rnext[i] = lc[i] + 1
	:: else   /* nobody waits for it any more */
	fi;
	rep[i] = P_NONE; repDel[i] = false; repTok[i] = 0; repSeq[i] = 0;
	if
	:: st[i] != ACQ && !renewing[i] -> sent[i] = 0
	:: else
	fi
}

/* The term ends (the end of lead): release unless lost, then campaign
 * again after CampaignEvery. */
inline endTerm(i) {
	printf("t%d r%d: term with token %d ends\n", now, i, tok[i]);
	reqArg[i] = tok[i];
	req[i] = (lost[i] -> R_NONE : R_REL);
	rep[i] = P_NONE; repDel[i] = false; repTok[i] = 0; repSeq[i] = 0;
	st[i] = IDLE; wake[i] = lc[i] + CAMPAIGN_EVERY;
	sent[i] = 0; tb[i] = 0; tok[i] = 0; tseq[i] = 0; phase[i] = 0;
	ending[i] = false; lost[i] = false; renewing[i] = false; rnext[i] = 0
}

inline campaignSend(i) {
	req[i] = R_ACQ; reqArg[i] = FLOOR; rep[i] = P_NONE; repDel[i] = false;
	sent[i] = lc[i]; st[i] = ACQ; wake[i] = 0;
	printf("t%d r%d: campaign (lc %d, floor %d)\n", now, i, lc[i], reqArg[i])
}

inline renewSend(i) {
	req[i] = R_RENEW; reqArg[i] = tok[i]; rep[i] = P_NONE; repDel[i] = false;
	sent[i] = lc[i]; renewing[i] = true;
	printf("t%d r%d: renew (lc %d)\n", now, i, lc[i])
}

inline dropReq(i) {
	printf("t%d net: r%d's statement lost\n", now, i);
	req[i] = R_NONE; reqArg[i] = 0
}

inline fault() { faults++ }

/* A statement to the lease row, sent when G holds: it runs and is answered
 * at once, or (a fault) is lost, fails, or is delayed, or its answer is
 * lost, fails, or is delayed. */
#define OFFER(G, SEND) \
	:: d_step { G -> SEND; dbExec(i); consume(i); CHECK_P1 } \
	:: d_step { G && BUDGET -> SEND; fault(); dropReq(i) } \
	:: d_step { G && BUDGET -> SEND; fault(); dropReq(i); rep[i] = P_ERR; consume(i) } \
	:: d_step { G && BUDGET -> SEND; fault(); printf("t%d net: r%d's statement delayed\n", now, i) } \
	:: d_step { G && BUDGET -> SEND; fault(); dbExec(i); printf("t%d net: r%d's answer lost\n", now, i); rep[i] = P_NONE; repTok[i] = 0; repSeq[i] = 0 } \
	:: d_step { G && BUDGET -> SEND; fault(); dbExec(i); rep[i] = P_ERR; repTok[i] = 0; repSeq[i] = 0; consume(i) } \
	:: d_step { G && BUDGET -> SEND; fault(); dbExec(i); repDel[i] = true; printf("t%d net: r%d's answer delayed\n", now, i) }

/* A statement to the store: runs at once, or is lost or delayed. */
#define STORE(G, SEND) \
	:: d_step { G -> SEND; storeExec(i) } \
	:: d_step { G && BUDGET -> SEND; fault(); printf("t%d net: r%d's store statement lost\n", now, i); wr[i] = W_NONE; wrTok[i] = 0; wrSeq[i] = 0 } \
	:: d_step { G && BUDGET -> SEND; fault(); printf("t%d net: r%d's store statement delayed\n", now, i) }

#define CAMPAIGN    (!paused[i] && st[i] == IDLE && lc[i] >= wake[i])
#define RENEW       (!paused[i] && st[i] == LEAD && !ending[i] && !renewing[i] && lc[i] >= rnext[i])
#define ENDS        (!paused[i] && st[i] == LEAD && !bodyOn[i])
#define CLAIMS      (!paused[i] && st[i] == LEAD && bodyOn[i] && phase[i] == CLAIMING && wr[i] == W_NONE)
#define CLAIM_SEND  wr[i] = W_CLAIM; wrTok[i] = tok[i]; wrSeq[i] = tseq[i]; phase[i] = CLAIMSENT
#define WRITES      (!paused[i] && st[i] == LEAD && phase[i] == BODY && bodyOn[i] && wr[i] == W_NONE && LIVE(i))
#define WRITE_SEND  wr[i] = W_WRITE; wrTok[i] = tok[i]; wrSeq[i] = tseq[i]

proctype Replica(byte i) {
	bool ok, live;   /* storeExec's scratch, false between actions */
end:
	do
	/* -- urgent: timers and sequential steps of the Go loop -- */
	OFFER(CAMPAIGN, campaignSend(i))
	OFFER(RENEW, renewSend(i))
	:: d_step { ENDS && lost[i] -> endTerm(i) }
	:: d_step { ENDS && !lost[i] -> endTerm(i); dbExec(i) }
	:: d_step { ENDS && !lost[i] && BUDGET -> endTerm(i); fault(); dropReq(i) }
	:: d_step { ENDS && !lost[i] && BUDGET -> endTerm(i); fault(); printf("t%d net: r%d's release delayed\n", now, i) }
	STORE(CLAIMS && (!TIMELINE || lc[i] < CAT(i)), CLAIM_SEND)
	:: d_step { CLAIMS && TIMELINE && lc[i] >= CAT(i) -> bodyOn[i] = false }
	:: d_step { !paused[i] && rep[i] != P_NONE && !repDel[i] -> consume(i); CHECK_P1 }
	:: d_step { !paused[i] && st[i] == ACQ && (rep[i] == P_NONE || repDel[i]) && lc[i] >= sent[i] + TTL ->
		st[i] = BACKOFF; wake[i] = lc[i] + BACKOFF_MAX; sent[i] = 0;
		rep[i] = P_NONE; repDel[i] = false; repTok[i] = 0; repSeq[i] = 0 }
	:: d_step { !paused[i] && st[i] == BACKOFF && lc[i] >= wake[i] -> st[i] = IDLE; wake[i] = lc[i] }
	:: d_step { !paused[i] && st[i] == LEAD && TIMELINE && !ending[i] && lc[i] >= YAT(i) ->
		ending[i] = true;
		printf("t%d r%d: yields (lc %d)\n", now, i, lc[i]) }
	:: d_step { !paused[i] && st[i] == LEAD && renewing[i] && (rep[i] == P_NONE || repDel[i]) && lc[i] >= SAT(i) ->
		renewing[i] = false; rnext[i] = lc[i] + 1; sent[i] = 0;
		rep[i] = P_NONE; repDel[i] = false; repTok[i] = 0; repSeq[i] = 0 }

	/* -- not urgent: the body, delayed statements, faults, drift -- */
	STORE(WRITES, WRITE_SEND)
	:: d_step { !paused[i] && st[i] == LEAD && phase[i] == BODY && bodyOn[i] && returns < RETURNS ->
		returns++; bodyOn[i] = false; printf("t%d r%d: body returns\n", now, i) }
	:: d_step { !paused[i] && rep[i] != P_NONE && repDel[i] -> consume(i); CHECK_P1 }
	:: d_step { req[i] != R_NONE -> dbExec(i) }
	:: d_step { wr[i] != W_NONE -> storeExec(i) }
	:: d_step { !paused[i] && st[i] == BACKOFF -> st[i] = IDLE; wake[i] = lc[i] }
	:: d_step { BUDGET && !paused[i] -> fault(); paused[i] = true;
		printf("t%d r%d: pauses (lc %d)\n", now, i, lc[i]) }
	:: d_step { paused[i] ->
		paused[i] = false;
		/* the elector's overdue timers fire at once: a body past S stops */
		if
		:: TIMELINE && bodyOn[i] && lc[i] >= SAT(i) -> bodyOn[i] = false
		:: else
		fi;
		printf("t%d r%d: resumes (lc %d)\n", now, i, lc[i]);
		CHECK_P1 }
	:: d_step { drift[i] < DRIFT && !slow[i] -> drift[i]++; slow[i] = true;
		printf("t%d r%d: clock loses the next tick\n", now, i) }
	od
}

inline tickClock(i) {
	if
	:: slow[i] -> slow[i] = false
	:: else -> lc[i]++
	fi;
	/* a body that honours Ending and its context has returned by S */
	if
	:: TIMELINE && !paused[i] && bodyOn[i] && lc[i] >= SAT(i) -> bodyOn[i] = false
	:: else
	fi
}

proctype Clock() {
end:
	do
	:: d_step { now < TMAX && ALL(NOTDUE) && (FAULTS || ALL(SETTLED)) ->
		/* P4, in the fault-free suffix */
		if
		:: now >= FAULT_END ->
			if
			:: led || ANY(LEADING) -> p4 = 0
			:: else ->
				if
				:: FREE && ANY(CANDIDATE) -> p4++
				:: else
				fi
			fi;
			PROP(4, p4 <= P4_N)
		:: else
		fi;
		led = false;
		now++;
		tickClock(0); tickClock(1);
#if NR == 3
		tickClock(2);
#endif
		CHECK_P1 }
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
			run Replica(i)
		}
		run Clock()
	}
}
