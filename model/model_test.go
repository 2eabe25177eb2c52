// Package model holds the SPIN model of pgleader (lease.pml, spec.pml) and
// its runner (check.sh). Its only Go code is this test, which keeps the
// model's timing and timeline rule equal to the Go loop's. See
// docs/model-checking.md.
package model

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// defines reads the "#define NAME value" lines of a Promela file and
// evaluates each value: an integer, an earlier name, or a parenthesised
// sum or difference of those.
func defines(t *testing.T, path string) map[string]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	comment := regexp.MustCompile(`/\*.*?\*/`)
	defs := make(map[string]int64)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(comment.ReplaceAllString(sc.Text(), ""))
		if len(fields) < 3 || fields[0] != "#define" {
			continue
		}
		v, err := eval(strings.Join(fields[2:], " "), defs)
		if err != nil {
			t.Fatalf("%s: #define %s: %v", path, fields[1], err)
		}
		defs[fields[1]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return defs
}

func eval(expr string, defs map[string]int64) (int64, error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "(") && strings.HasSuffix(expr, ")") {
		expr = expr[1 : len(expr)-1]
	}
	words := strings.Fields(expr)
	if len(words)%2 == 0 {
		return 0, errors.New("want operand (op operand)*: " + expr)
	}
	var sum int64
	sign := int64(1)
	for i, w := range words {
		if i%2 == 1 {
			switch w {
			case "+":
				sign = 1
			case "-":
				sign = -1
			default:
				return 0, errors.New("unknown operator " + w)
			}
			continue
		}
		v, err := strconv.ParseInt(w, 10, 64)
		if err != nil {
			var ok bool
			if v, ok = defs[w]; !ok {
				return 0, errors.New("undefined name " + w)
			}
		}
		sum += sign * v
	}
	return sum, nil
}

func need(t *testing.T, defs map[string]int64, name string) int64 {
	t.Helper()
	v, ok := defs[name]
	if !ok {
		t.Fatalf("spec.pml does not define %s", name)
	}
	return v
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestDefaultsMatchSpec: the model's durations, in ticks, are the Go
// defaults of Spec{Key: "k"} as New resolves them.
func TestDefaultsMatchSpec(t *testing.T) {
	defs := defines(t, "spec.pml")
	tick := time.Duration(need(t, defs, "TICK_MS")) * time.Millisecond
	el, err := pgleader.New(pgleadertest.NewBackend(), pgleader.Spec{Key: "k"},
		pgleader.Options{Owner: "a", Lead: func(context.Context, *pgleader.Term) error { return nil }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	got := el.Spec()
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"TTL", got.TTL},
		{"RENEW_EVERY", got.RenewEvery},
		{"CAMPAIGN_EVERY", got.CampaignEvery},
		{"MARGIN", got.Margin},
		{"YIELD_GRACE", got.YieldGrace},
		{"RELEASE_TIMEOUT", got.ReleaseTimeout},
	} {
		ticks := need(t, defs, f.name)
		if want := time.Duration(ticks) * tick; f.d != want {
			t.Errorf("spec.pml %s = %d ticks of %v = %v; the Go default is %v", f.name, ticks, tick, want, f.d)
		}
	}
}

// TestTimelineMatchesGo: with the default Spec, and answers that arrive a
// tick after the statement was sent, the Go loop's safe end, yield and
// cancel instants are the model's SAFE_END, YIELD_AT and CANCEL_AT ticks
// after the base TIMELINE_FROM_SEND names. Renewals fail, so the first
// acquire's timeline is the last.
func TestTimelineMatchesGo(t *testing.T) {
	defs := defines(t, "spec.pml")
	tick := time.Duration(need(t, defs, "TICK_MS")) * time.Millisecond
	fromSend := need(t, defs, "TIMELINE_FROM_SEND")
	if fromSend != 0 && fromSend != 1 {
		t.Fatalf("spec.pml TIMELINE_FROM_SEND = %d, want 0 or 1", fromSend)
	}
	safeEnd := time.Duration(need(t, defs, "SAFE_END")) * tick
	cancelAt := time.Duration(need(t, defs, "CANCEL_AT")) * tick
	yieldAt := time.Duration(need(t, defs, "YIELD_AT")) * tick

	synctest.Test(t, func(t *testing.T) {
		latency := tick
		b := pgleadertest.NewBackend()
		b.SetLatency(latency)

		var (
			mu                                   sync.Mutex
			started, deadline, ending, cancelled time.Time
			sent                                 time.Time
			terms                                int
		)
		lead := func(ctx context.Context, term *pgleader.Term) error {
			mu.Lock()
			terms++
			if terms > 1 {
				mu.Unlock()
				return nil
			}
			started, sent, deadline = time.Now(), term.Started(), term.Deadline()
			mu.Unlock()
			b.SetFailure(errors.New("database down")) // no renewal succeeds
			<-term.Ending()
			mu.Lock()
			ending = time.Now()
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			cancelled = time.Now()
			mu.Unlock()
			return nil
		}
		el, err := pgleader.New(b, pgleader.Spec{Key: "k"}, pgleader.Options{Owner: "a", Lead: lead, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx) }()
		time.Sleep(3 * el.Spec().TTL)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}

		mu.Lock()
		defer mu.Unlock()
		if terms == 0 {
			t.Fatal("no term started")
		}
		if !started.Equal(t0.Add(latency)) {
			t.Fatalf("the body started at t0%+v, want t0+%v (the acquire's answer)", started.Sub(t0), latency)
		}
		if !sent.Equal(t0) {
			t.Errorf("Term.Started() = t0%+v; the acquire was sent at t0", sent.Sub(t0))
		}
		base := t0 // the send instant
		if fromSend == 0 {
			base = started // the instant the answer arrived
		}
		for _, c := range []struct {
			name string
			got  time.Time
			off  time.Duration
		}{
			{"safe end S (Term.Deadline)", deadline, safeEnd},
			{"yield Y (Ending closed)", ending, yieldAt},
			{"cancel C (body's context)", cancelled, cancelAt},
		} {
			if want := base.Add(c.off); !c.got.Equal(want) {
				t.Errorf("%s at t0%+v; the model (spec.pml) says t0%+v", c.name, c.got.Sub(t0), want.Sub(t0))
			}
		}
	})
}

// TestModelUsesTimeline: lease.pml applies the timeline only through the
// names spec.pml defines, so the two tests above cover the model's rule.
func TestModelUsesTimeline(t *testing.T) {
	src, err := os.ReadFile("lease.pml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	for _, want := range []string{
		`#include "spec.pml"`,
		"#define YAT(i)  (r[i].tb + YIELD_AT)",
		"#define CAT(i)  (r[i].tb + CANCEL_AT)",
		"#define SAT(i)  (r[i].tb + SAFE_END)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("lease.pml lacks %q", want)
		}
	}
	// Every assignment of a term's base s goes through TIMELINE_FROM_SEND
	// (or clears it when the term ends). A handed-off term believed on a
	// read moves its base by what it had left less TTL (Spec.timelineWithin),
	// which TestHandOffMatchesGo pins to the Go loop.
	assign := regexp.MustCompile(`r\[i\]\.tb = ([^;\n]*)`)
	matches := assign.FindAllStringSubmatch(text, -1)
	if len(matches) == 0 {
		t.Fatal("lease.pml never sets r[i].tb")
	}
	for _, m := range matches {
		switch m[1] {
		case "(TIMELINE_FROM_SEND -> r[i].sent : r[i].lc)", "(TIMELINE_FROM_SEND -> (S) : r[i].lc) + BOUND(B) - TTL", "0":
		default:
			t.Errorf("lease.pml sets the timeline base with %q, not through TIMELINE_FROM_SEND", m[0])
		}
	}
	// lease.pml redefines spec.pml's names only for a mutant.
	defs := defines(t, "spec.pml")
	for name := range defs {
		re := regexp.MustCompile(`(?m)^#define\s+` + name + `\b`)
		if locs := re.FindAllStringIndex(text, -1); len(locs) > 0 {
			for _, loc := range locs {
				before := text[:loc[0]]
				i := strings.LastIndex(before, "#ifdef ")
				if i < 0 || !strings.HasPrefix(before[i:], "#ifdef MUTANT_") {
					t.Errorf("lease.pml redefines %s outside a mutant", name)
				}
			}
		}
	}
}

// lastDefinition returns the body of the last definition of the SQL
// function name (e.g. "pgleader.acquire(") in the up migrations, in order,
// and the file it is in.
func lastDefinition(t *testing.T, name string) (body, file string) {
	t.Helper()
	files, err := filepath.Glob("../migrations/*.up.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no up migrations: %v", err)
	}
	sort.Strings(files)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(src)
		for {
			i := strings.Index(text, "FUNCTION "+name)
			if i < 0 {
				break
			}
			// A definition, not a GRANT or REVOKE naming the function.
			if line := text[strings.LastIndex(text[:i], "\n")+1 : i]; !strings.HasPrefix(line, "CREATE ") {
				text = text[i+len("FUNCTION "+name):]
				continue
			}
			text = text[i:]
			end := strings.Index(text, "\n$$;")
			if end < 0 {
				t.Fatalf("%s: %s has no end", f, name)
			}
			body, file = text[:end], f
			text = text[end:]
		}
	}
	if body == "" {
		t.Fatalf("no migration defines %s", name)
	}
	return body, file
}

// TestGraceMatchesMigration: the failover grace lease.pml models is the one
// the latest migrations define: the grace runs max_ttl from the first
// lease operation that finds server_epoch empty, acquire grants nothing
// during it unless the lease is free of a live term first, renew then needs
// the expiry more than max_clock_offset away, and both refuse a TTL above
// max_ttl. MAX_TTL is the TTL (docs/ha.md: max_ttl = the longest TTL in
// use), and both settings are values set_max_ttl and set_max_clock_offset
// accept.
func TestGraceMatchesMigration(t *testing.T) {
	for _, c := range []struct{ fn, want string }{
		{"pgleader._grace(", "VALUES (clock_timestamp(), clock_timestamp() + max_ttl)"},
		// acquire is campaign without a candidate row.
		{"pgleader.acquire(", "FROM pgleader.campaign(p_key, p_owner, p_ttl, p_floor, p_value, 0, NULL)"},
		{"pgleader.campaign(", "IF (r.holder IS NOT NULL AND r.expires_at > t) OR t < g.grace_until THEN"},
		{"pgleader.campaign(", "IF r.holder IS NOT NULL AND r.expires_at > t THEN"},
		{"pgleader.campaign(", "PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);"},
		// renew is renew_term's expiry; the Go client calls renew_term.
		{"pgleader.renew(", "pgleader.renew_term(p_key, p_owner, p_token, p_ttl)"},
		{"pgleader.renew_term(", "AND (t >= g.grace_until OR l.expires_at > t + g.max_clock_offset)"},
		{"pgleader.renew_term(", "PERFORM pgleader._check_ttl(p_ttl, g.max_ttl);"},
	} {
		body, file := lastDefinition(t, c.fn)
		if !strings.Contains(body, c.want) {
			t.Errorf("%s (%s) no longer has %q: update lease.pml's grace and this test", c.fn, file, c.want)
		}
	}
	// campaign answers "held" before "grace": the model's busy branch.
	body, _ := lastDefinition(t, "pgleader.campaign(")
	held := strings.Index(body, "IF r.holder IS NOT NULL AND r.expires_at > t THEN")
	grace := strings.Index(body, "'pgleader.grace'")
	if held < 0 || grace < 0 || held > grace {
		t.Error("campaign answers the grace before the holder; lease.pml answers the holder first")
	}

	src, err := os.ReadFile("lease.pml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"graceUntil = now + MAX_TTL",
		":: FREE && !INGRACE ->",
		"(!INGRACE || expires > now + GRACE_OFFSET)",
		"#define GRACE_OFFSET MAX_CLOCK_OFFSET",
		"#if MAX_TTL < TTL",
	} {
		if !strings.Contains(string(src), want) {
			t.Errorf("lease.pml lacks %q", want)
		}
	}
	checkEpochs(t, string(src))

	defs := defines(t, "spec.pml")
	tick := time.Duration(need(t, defs, "TICK_MS")) * time.Millisecond
	if maxTTL, ttl := need(t, defs, "MAX_TTL"), need(t, defs, "TTL"); maxTTL != ttl {
		t.Errorf("spec.pml MAX_TTL = %d ticks, TTL = %d: docs/ha.md sets max_ttl to the longest TTL in use", maxTTL, ttl)
	}
	if d := time.Duration(need(t, defs, "MAX_TTL")) * tick; d < 100*time.Millisecond || d > 24*time.Hour {
		t.Errorf("MAX_TTL = %v: set_max_ttl accepts 100 ms to 24 h", d)
	}
	if d := time.Duration(need(t, defs, "MAX_CLOCK_OFFSET")) * tick; d < 0 || d > time.Hour {
		t.Errorf("MAX_CLOCK_OFFSET = %v: set_max_clock_offset accepts 0 to 1 h", d)
	}
}

// checkEpochs: the token epochs lease.pml models (every draw after the
// notice above EPOCH_BASE, the old server below it) are the ones the latest
// migrations define: the transaction that fills server_epoch moves to the
// next epoch and raises every counter to its base, new rows start there,
// and lease_draw refuses the draw that would count into the next epoch.
func checkEpochs(t *testing.T, model string) {
	t.Helper()
	for _, c := range []struct{ fn, want string }{
		{"pgleader._grace(", "ON CONFLICT (only_row) DO NOTHING;\n        IF FOUND THEN\n            PERFORM pgleader._epoch_bump();"},
		{"pgleader._epoch_bump(", "SET epoch = least(s.epoch + 1, 4194304)"},
		{"pgleader._epoch_bump(", "CASE WHEN greatest(x.token, coalesce(x.token_min, 0)) < base THEN base"},
		{"pgleader._epoch_base(", "SELECT pgleader._epoch() << 40"},
		{"pgleader._lease_draw()\nRETURNS", "IF NEW.token = (e + 1) << 40 AND NEW.token = was + 1 THEN"},
		{"pgleader._lease_draw()\nRETURNS", "NEW.token := greatest(NEW.token, least(OLD.token_min, 9223372036854775806) + 1);"},
	} {
		body, file := lastDefinition(t, c.fn)
		if !strings.Contains(body, c.want) {
			t.Errorf("%s (%s) no longer has %q: update lease.pml's epochs and this test", c.fn, file, c.want)
		}
	}
	files, _ := filepath.Glob("../migrations/*.up.sql")
	all := ""
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all += string(b)
	}
	for _, want := range []string{
		"token        bigint      NOT NULL DEFAULT pgleader._epoch_base(),",
		"CREATE TRIGGER lease_draw BEFORE UPDATE OF token ON pgleader.lease",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the migrations lack %q", want)
		}
	}
	for _, want := range []string{
		"#define DRAW_BASE (fo == FO_DONE && !epochEmpty -> EPOCH_BASE : 0)",
		"ltoken = (ltoken > DRAW_BASE -> ltoken : DRAW_BASE) + 1;",
		"PROP(0, FAILED || ltoken < EPOCH_BASE);",
		"PROP(3, wiped || ltoken > maxIssued);",
	} {
		if !strings.Contains(model, want) {
			t.Errorf("lease.pml lacks %q", want)
		}
	}
	check, err := os.ReadFile("check.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"failover-store-same|pass|-DFAILOVER -DSTORE_SAME -DSTRICT_P2 `,
		`"mutant-no-epoch|fail|-DFAILOVER -DSTORE_SAME -DSTRICT_P2 -DMUTANT_NO_EPOCH `,
	} {
		if !strings.Contains(string(check), want) {
			t.Errorf("check.sh lacks %q", want)
		}
	}
}

// candBackend is the in-memory backend, keeping candidates, whose
// lease another owner always holds: it records the candidate TTL each
// campaign registers with.
type candBackend struct {
	*pgleadertest.Backend
	mu   sync.Mutex
	ttls []time.Duration
}

func (c *candBackend) Campaign(ctx context.Context, key string, cand pgleader.Candidate, ttl time.Duration, floor int64) (pgleader.Lease, bool, error) {
	c.mu.Lock()
	c.ttls = append(c.ttls, cand.TTL)
	c.mu.Unlock()
	now := time.Now()
	return pgleader.Lease{Key: key, Holder: "other", Token: 1, ExpiresAt: now.Add(ttl), Now: now}, false, nil
}

func (c *candBackend) HandOff(ctx context.Context, key, owner string, token int64, to string) (bool, string, error) {
	return false, "", nil
}

func (c *candBackend) Abilities() pgleader.Abilities {
	ab := c.Backend.Abilities()
	ab.Candidates = true
	return ab
}

func (c *candBackend) RenewTerm(ctx context.Context, key, owner string, token int64, ttl, minTerm time.Duration) (time.Time, bool, error) {
	return time.Time{}, false, errors.New("not held")
}

func (c *candBackend) Transfer(ctx context.Context, key, to string) (pgleader.Lease, bool, error) {
	return pgleader.Lease{}, false, nil
}

func (c *candBackend) Candidates(ctx context.Context, key string) ([]pgleader.Candidate, error) {
	return nil, nil
}

func (c *candBackend) Withdraw(ctx context.Context, key, owner string) error { return nil }

// TestHandOffMatchesGo: the hand-off lease.pml models (-DHANDOFF) is the
// one the migrations (campaign, take, hand_off) and the Go loop implement. A listening
// candidate registers for CAND_TTL (TTL + Margin), which the default
// max_ttl does not cap; hand_off draws token + 1 and takes the candidate's
// expiry as the first bound; take finds only a handed-off unexpired term of
// the owner, answers from a read when it has KEEP (TTL - RenewEvery) left
// and else extends it to TTL, as campaign does; a renewal confirms it; the
// successor leads from the take's send instant, its timeline counting from
// what the term had left, and never leads a token twice.
func TestHandOffMatchesGo(t *testing.T) {
	defs := defines(t, "spec.pml")
	tick := time.Duration(need(t, defs, "TICK_MS")) * time.Millisecond
	candTTL := time.Duration(need(t, defs, "CAND_TTL")) * tick
	keep := time.Duration(need(t, defs, "KEEP")) * tick

	synctest.Test(t, func(t *testing.T) {
		b := &candBackend{Backend: pgleadertest.NewBackend()}
		el, err := pgleader.New(b, pgleader.Spec{Key: "k"}, pgleader.Options{Owner: "a",
			Lead: func(ctx context.Context, _ *pgleader.Term) error { <-ctx.Done(); return nil }, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if def := el.Spec(); keep != def.TTL-def.RenewEvery {
			t.Errorf("spec.pml KEEP = %v; Spec.handOffKeep, TTL - RenewEvery, is %v", keep, def.TTL-def.RenewEvery)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx) }()
		time.Sleep(2 * el.Spec().TTL)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.ttls) == 0 {
			t.Fatal("the elector never campaigned")
		}
		for _, got := range b.ttls {
			if got != candTTL {
				t.Fatalf("a listening candidate registers for %v; spec.pml CAND_TTL says %v", got, candTTL)
			}
		}
	})

	for _, c := range []struct{ fn, want string }{
		{"pgleader._grace(", "max_ttl := interval '10 minutes';"},
		{"pgleader.campaign(", "IF r.holder = p_owner AND r.handed_off AND r.expires_at > t AND t >= g.grace_until THEN"},
		{"pgleader.campaign(", "SET renewed_at = t, expires_at = t + p_ttl, handed_off = false"},
		{"pgleader.campaign(", "IF p_candidate IS NOT NULL AND r.holder IS DISTINCT FROM p_owner THEN"},
		{"pgleader.campaign(", "VALUES (p_key, p_owner, p_priority, p_value, t, t + least(p_candidate, g.max_ttl))"},
		{"pgleader.take(p_key text, p_owner text, p_ttl interval, p_keep interval)", "IF r.holder = p_owner AND r.handed_off AND r.expires_at > t AND r.expires_at >= t + p_keep\n       AND t >= g.grace_until THEN"},
		{"pgleader.take(p_key text, p_owner text, p_ttl interval, p_keep interval)", "RETURN QUERY SELECT * FROM pgleader.take(p_key, p_owner, p_ttl);"},
		// The confirmation is one step in the model: the clock it judges the
		// expiry by is read once the row is locked (migration 0020).
		{"pgleader.take(p_key text, p_owner text, p_ttl interval)", "l.handed_off FOR NO KEY UPDATE;\n    t := clock_timestamp();"},
		{"pgleader.renew_term(", "SET renewed_at = t, expires_at = t + p_ttl, handed_off = false"},
		{"pgleader.hand_off(", "WHERE l.key = p_key AND l.holder = p_owner AND l.token = p_token FOR UPDATE;"},
		{"pgleader.hand_off(", "WHERE k.key = p_key AND k.owner <> p_owner AND k.expires_at > t"},
		{"pgleader.hand_off(", "SET token = l.token + 1,"},
		{"pgleader.hand_off(", "IF t >= g.grace_until AND r.token < 9223372036854775807 THEN"},
		{"pgleader.hand_off(", "pgleader._term(c.owner, t, least(c.expires_at, t + g.max_ttl), c.value, c.priority, true)"},
		{"pgleader._term(", "p_holder IS NOT NULL AND p_handed_off,"},
	} {
		body, file := lastDefinition(t, c.fn)
		if !strings.Contains(body, c.want) {
			t.Errorf("%s (%s) no longer has %q: update lease.pml's hand-off and this test", c.fn, file, c.want)
		}
	}
	if maxTTL := 10 * time.Minute; candTTL > maxTTL {
		t.Errorf("CAND_TTL %v exceeds the default max_ttl: lease.pml's CAND_EXP must be capped", candTTL)
	}

	for file, wants := range map[string][]string{
		"lease.pml": {
			"#define CAND_EXP CAND_TTL",
			"#define TAKE_OK (holder == i + 1 && hoff && expires > now && HOFF_GRACE_OK)",
			"expires = now + TTL; hoff = false; r[i].cexp = 0;",
			"ltoken = (ltoken > DRAW_BASE -> ltoken : DRAW_BASE) + 1;",
			"holder = (i ^ 1) + 1; expires = r[i ^ 1].cexp;",
			":: r[i].req == R_ACQ && holder == i + 1 && hoff && expires > now && HOFF_GRACE_OK ->",
			":: expires >= now + KEEP ->\n\t\ttkBound = expires - now;",
			"expires = now + TTL; r[i].rep = P_OK; HOFF_CLEAR;",
			"#define TAKE_NEW (ltoken > r[i].last || MUTANT_RELEAD)",
			"HINT && TAKE_OK && TAKE_NEW -> printf(\"t%d r%d: hint, take\\n\", now, i); takeExec(i); TAKE_LEAD(r[i].lc, ltoken, seqN, tkBound);",
			"r[i].tkSent = r[i].lc;",
			"r[i].tkTok > r[i].last && r[i].lc < r[i].tkSent + BOUND(r[i].tkB) - TTL + YIELD_AT -> TAKE_LEAD(r[i].tkSent, r[i].tkTok, r[i].tkSeq, r[i].tkB)",
			"r[i].tb = (TIMELINE_FROM_SEND -> (S) : r[i].lc) + BOUND(B) - TTL;",
			"r[i].rnext = r[i].tb + RENEW_EVERY;",
			"r[i].repTok <= r[i].last && !MUTANT_RELEAD ->",
			"r[i].rep == P_WON && r[i].lc < r[i].sent + TTL && WON_NEW ->",
			"r[i].req = R_HOFF; r[i].reqArg = r[i].repTok; dbExec(i);",
			// With a failover (issue 24): hand_off releases in the grace,
			// and campaign and take confirm a handed-off row only outside
			// it; every lease call but release notices.
			"#define HOFF_GRACE_OK (!INGRACE)",
			":: holder == i + 1 && ltoken == r[i].reqArg && r[i ^ 1].cexp > now && !INGRACE ->",
			":: r[i].req == R_ACQ || r[i].req == R_RENEW || r[i].req == R_HOFF -> GRACE_NOTICE",
			"#if defined(FAILOVER) && MAX_TTL < CAND_TTL\n#define CAND_EXP MAX_TTL",
		},
		"check.sh": {
			`"handoff-failover|pass|-DHANDOFF -DFAILOVER -DRESTARTS=1 `,
			`"handoff-restart|pass|-DHANDOFF -DRESTARTS=1 `,
			`"mutant-handoff-grace-confirm|fail|-DHANDOFF -DFAILOVER -DRESTARTS=1 -DRETURNS=2 -DMUTANT_HANDOFF_GRACE_CONFIRM `,
		},
		// The successor's timeline counts from when the check was sent,
		// which is bounded by the yield instant.
		"../pgleader/spec.go": {
			"func (s Spec) handOffKeep() time.Duration { return s.TTL - s.RenewEvery }",
		},
		"../internal/lifecycle/machine.go": {
			"safeEnd = sent.Add(bound - tm.Margin)",
			"m.renewAt = sent.Add(tm.RenewEvery - (tm.TTL - bound))",
			"act.HandOff = m.reason == Stopped || m.reason == Resigned || m.reason == Finished",
		},
		"../pgleader/listen.go": {
			"sent := time.Now()\n\tcctx, cancel := context.WithDeadline(ctx, sent.Add(w.cand.Budget))\n\tlease, acquired, err := take(",
			"Acquired: acquired, Lease: lease, Sent: sent, Err: err}",
		},
		"../pgleader/elector.go": {
			"lease, sent, won, announce = took.Lease, took.Sent, true, false",
			"bound = min(bound, took.Lease.ExpiresAt.Sub(took.Lease.Now))",
			"if took != nil && took.Lease.Token <= c.lastToken {",
			"c.lastToken = lease.Token",
			"case won && lease.Token <= c.lastToken:",
			"c.handedOff = e.release(ctx, e.log.With(\"token\", lease.Token), lease.Token, true)",
			"m, act := lifecycle.Start(tm, sent, bound, time.Now())",
			"Keep: e.spec.handOffKeep()",
			"budget := e.spec.TTL - e.spec.Margin - e.spec.ReleaseTimeout - e.spec.YieldGrace // the yield instant",
			"if e.handOff && handOff {",
		},
	} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !strings.Contains(string(src), want) {
				t.Errorf("%s lacks %q: update lease.pml's hand-off and this test", file, want)
			}
		}
	}
}

// TestJobMatchesMigration: the job claim lease.pml models under -DJOB is
// the one the latest migrations define: job_claim records a run only for a
// term holding the job's lease unexpired (the lease row's holder and token,
// not handed off), inserts the run if absent, takes over a run left running
// only with a higher token (at least once), and job_finish records the end
// only for the run's own token; the job runner's Claim hook is job_claim
// with the term's token, and the function runs only after run or retry.
func TestJobMatchesMigration(t *testing.T) {
	for _, c := range []struct{ fn, want string }{
		{"pgleader.job_claim(", "WHERE l.key = p_job AND l.holder = p_owner AND l.token = p_token\n                      AND NOT l.handed_off AND l.expires_at > t"},
		{"pgleader.job_claim(", "VALUES (p_job, p_instant, 'running', p_owner, p_token, 1, t)\n        ON CONFLICT (job, instant) DO NOTHING"},
		{"pgleader.job_claim(", "ELSIF r.state = 'running' AND r.token = p_token AND r.owner = p_owner THEN"},
		{"pgleader.job_claim(", "ELSIF r.state = 'running' AND r.token < p_token AND p_retry_until IS NOT NULL AND t <= p_retry_until THEN"},
		{"pgleader.job_finish(", "WHERE jr.job = p_job AND jr.instant = p_instant AND jr.owner = p_owner AND jr.token = p_token\n       AND jr.state = 'running';"},
	} {
		body, file := lastDefinition(t, c.fn)
		if !strings.Contains(body, c.want) {
			t.Errorf("%s (%s) no longer has %q: update lease.pml's job claim and this test", c.fn, file, c.want)
		}
	}
	for file, wants := range map[string][]string{
		"lease.pml": {
			"#define JOB_HELD (holder == i + 1 && ltoken == r[i].wrTok && expires > now)",
			"#define JOB_RETRY (JOB_HELD && jstate == J_RUNNING && jtok < r[i].wrTok)",
			":: JOB_HELD && jstate == J_NONE ->\n\t\tok = true; jstate = J_RUNNING; jtok = r[i].wrTok;",
			":: JOB_HELD && jstate == J_RUNNING && jtok == r[i].wrTok ->",
			":: jstate == J_RUNNING && jtok == r[i].tok -> jstate = J_DONE;",
			"#define CLAIM_SEND  r[i].wr = W_JOB; r[i].wrTok = r[i].tok;",
		},
		"check.sh": {
			`"job|pass|-DJOB `,
			`"job-at-least-once|pass|-DJOB -DATLEASTONCE `,
			`"mutant-job-no-lease|fail|-DJOB -DMUTANT_JOB_NO_LEASE `,
			`"mutant-job-retry-any|fail|-DJOB -DATLEASTONCE -DMUTANT_JOB_RETRY_ANY `,
		},
		"../pgleader/job.go": {
			"FROM pgleader.job_claim($1, $2, $3, $4, $5, $6)`, exec,\n\t\t\tr.job.Name, r.instant, t.Owner(), t.Token(), retryUntil, fence)",
			"case \"run\", \"retry\":",
			"el, err := New(p, spec, Options{Owner: job.Owner, Logger: job.Logger, Observer: obs, Claim: r.claim, Lead: r.lead})",
		},
	} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !strings.Contains(string(src), want) {
				t.Errorf("%s lacks %q: update lease.pml's job claim and this test", file, want)
			}
		}
	}
}

// TestSessionMatchesMigration keeps the -DSESSION model (docs/model.md,
// "Session-bound leases") tied to what was built from it: campaign counts
// a bound row free only when its backend is gone, on the server run that
// bound it and outside the grace (the model's SESS_FREE, with SE_RESTART
// never free); only the bound session renews a bound term; the holder
// keeps a read pending and ends its term as lost when it returns the end;
// a bound term is released, handed off or forgotten by letting go of its
// session lock, which the candidate waits on (the model's WAKE). A binding
// names its term's token, so a hand-off (a new token) leaves the
// successor's term unbound until campaign_bound confirms it or renew_bound
// renews it, each of which binds (the model's SESS_HANDED and SESS_BIND,
// checked by session-handoff and mutant-session-handoff-keeps-binding).
func TestSessionMatchesMigration(t *testing.T) {
	for _, c := range []struct{ fn, want string }{
		{"pgleader.campaign_bound(", "IF r.holder IS NOT NULL AND r.expires_at > t AND t >= g.grace_until AND pgleader._own(r.role, false) THEN"},
		{"pgleader.campaign_bound(", "IF pid IS NOT NULL AND NOT pgleader._binding_held(p_key, pid) THEN\n            UPDATE pgleader.lease AS l SET expires_at = t WHERE l.key = p_key;"},
		{"pgleader.campaign_bound(", "FROM pgleader.campaign(p_key, p_owner, p_ttl, p_floor, p_value, p_priority, p_candidate)"},
		{"pgleader._bound_to(", "AND b.server_start = pg_postmaster_start_time()"},
		{"pgleader._bound_to(", "WHERE b.key = p_key AND b.token = p_token AND b.holder = p_holder AND b.acquired_at = p_acquired_at"},
		{"pgleader.renew_bound(", "IF FOUND AND (b.pid <> pg_backend_pid() OR b.server_start <> pg_postmaster_start_time()) THEN"},
		{"pgleader._bind(", "IF pgleader.bind_refusal(p_ttl) IS NOT NULL THEN\n        RETURN false;"},
		{"pgleader.campaign_bound(", "IF c.acquired THEN\n        is_bound := pgleader._bind(p_key, c.token, p_ttl);"},
		{"pgleader.renew_bound(", "b.pid IS NOT NULL OR pgleader._bind(p_key, p_token, p_ttl)"},
	} {
		body, file := lastDefinition(t, c.fn)
		if !strings.Contains(body, c.want) {
			t.Errorf("%s (%s) no longer has %q: update lease.pml's session-bound leases and this test", c.fn, file, c.want)
		}
	}
	for file, wants := range map[string][]string{
		"lease.pml": {
			"#define SESS_OVER (bwho != 0 && (bend == SE_GONE || bend == SE_KILLED))",
			"#define SESS_HANDED     SESS_UNBIND",
			"hoff = true; seqN++; SESS_HANDED;",
			"#define SESS_FREE SESS_OVER",
			"#define FREE    (holder == 0 || expires <= now || SESS_FREE)",
		},
		"check.sh": {
			`"session|pass|-DSESSION"`,
			`"session-restart|pass|-DSESSION -DSRV_RESTART -DFAULT_BUDGET=1"`,
			`"mutant-session-takeover-without-end|fail|-DSESSION -DMUTANT_SESSION_TAKEOVER_NO_END"`,
			`"mutant-session-holder-ignores-end|fail|-DSESSION -DMUTANT_SESSION_IGNORES_END"`,
			`"mutant-session-no-pending-read|fail|-DSESSION -DMUTANT_SESSION_NO_READ"`,
			`"session-handoff|pass|-DSESSION -DHANDOFF -DFAULT_BUDGET=1"`,
			`"mutant-session-handoff-keeps-binding|fail|-DSESSION -DHANDOFF -DMUTANT_SESSION_HANDOFF_KEEPS_BINDING -DFAULT_BUDGET=1"`,
		},
		"../pgleader/bound.go": {
			"err := conn.PgConn().WaitForNotification(ctx)",
			"closeOnce(ended)",
			"`SELECT pgleader.unbind($1)`",
			"FROM pgleader.campaign_bound($1, $2, $3, $4, $5, $6, $7)`",
			"FROM pgleader.renew_bound($1, $2, $3, $4, $5)`",
		},
		"../pgleader/elector.go": {
			"case <-sessionEnded:",
			"act = m.Lost(time.Now(), false)",
		},
		"../pgleader/candidacy.go": {
			"case <-freed:",
			"took, err := e.bs.waitHolder(wctx, d)",
		},
	} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !strings.Contains(string(src), want) {
				t.Errorf("%s lacks %q: update lease.pml's session-bound leases and this test", file, want)
			}
		}
	}
}
