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
