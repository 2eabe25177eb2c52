/*
 * The Spec's default timing in ticks, and the timeline rule. One tick is
 * TICK_MS milliseconds of DefaultTTL, so TTL is 12 ticks and every default
 * (TTL/3, TTL/12, TTL/12, TTL/6, TTL/12) is a whole number of ticks.
 *
 * model_test.go reads this file: it fails if a value here and the Go
 * defaults (pgleader.New with Spec{Key: "k"}) or the instants the Go loop
 * computes (Term.Deadline, Ending, the body's context) disagree. Keep every
 * line "#define NAME value", where value is an integer, a name defined
 * above, or a parenthesised sum or difference of those.
 */
#define TICK_MS          500
#define TTL              12
#define RENEW_EVERY      4
#define CAMPAIGN_EVERY   1
#define MARGIN           1
#define YIELD_GRACE      2
#define RELEASE_TIMEOUT  1

/*
 * The timeline of a term, as offsets from its base s. TIMELINE_FROM_SEND 1
 * means s is the local instant the last successful acquire or renew was
 * sent; 0 would mean the instant its answer was received.
 */
#define TIMELINE_FROM_SEND 1
#define SAFE_END   (TTL - MARGIN)
#define CANCEL_AT  (SAFE_END - RELEASE_TIMEOUT)
#define YIELD_AT   (CANCEL_AT - YIELD_GRACE)

/*
 * The failover grace (pgleader._grace), in ticks. MAX_TTL is
 * pgleader.settings.max_ttl set as docs/ha.md advises, to the longest TTL
 * in use: here the one TTL (set_max_ttl('6 seconds')). MAX_CLOCK_OFFSET is
 * max_clock_offset set to one tick (set_max_clock_offset('500 ms')); the
 * model's servers are at most that far apart.
 */
#define MAX_TTL          TTL
#define MAX_CLOCK_OFFSET 1

/*
 * Hand-off (pgleader.campaign, hand_off): a waiting candidate registers
 * until CAND_TTL from its campaign (Candidate.TTL = TTL + Margin in
 * Elector.campaign).
 */
#define CAND_TTL         (TTL + MARGIN)

/*
 * A handed-off term with at least KEEP left is believed on the check's
 * read (pgleader.take with p_keep; Spec.handOffKeep in Go): TTL less
 * RenewEvery.
 */
#define KEEP             (TTL - RENEW_EVERY)
