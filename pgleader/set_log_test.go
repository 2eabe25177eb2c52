package pgleader_test

import (
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgleader/pgleader/pgleader"
	"github.com/pgleader/pgleader/pgleader/pgleadertest"
)

// TestSetLogsTermEndsByReason: a Set that stops logs its terms' ends at
// info level as counts per reason, never a line per key (a stop of 33,333
// keys wrote 33,333 lines before its release was sent); the line per key
// is at debug level.
func TestSetLogsTermEndsByReason(t *testing.T) {
	t.Parallel()
	const n = 2000
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var logs lockedLog
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: level}))
		r := startSet(t, pgleadertest.NewBackend(), setSpec("s"), keyNames("k", n),
			pgleader.SetOptions{Owner: "a", Lead: untilEnding, Logger: log})
		waitFor(t, "the set to hold its keys", func() bool { return r.set.Status().Held == n })
		r.stop(t)

		perKey, lines, keys := 0, 0, 0
		count := regexp.MustCompile(`msg="terms ended" .*keys=(\d+) reason=stopped`)
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `msg="term ended"`) {
				perKey++
			}
			if m := count.FindStringSubmatch(line); m != nil {
				k, _ := strconv.Atoi(m[1])
				lines, keys = lines+1, keys+k
			}
		}
		if keys != n {
			t.Errorf("level %v: %d info lines count %d keys ended as stopped; want %d", level, lines, keys, n)
		}
		want := 0
		if level == slog.LevelDebug {
			want = n
		}
		if perKey != want {
			t.Errorf("level %v: %d lines of one term ended; want %d", level, perKey, want)
		}
		t.Logf("level %v: %d keys ended in %d info lines", level, keys, lines)
	}
}

// TestSetLogsExpiringTermsByReason: terms that end because renewals keep
// failing (the database unreachable) are logged as counts per reason too,
// with no line per key at info level.
func TestSetLogsExpiringTermsByReason(t *testing.T) {
	t.Parallel()
	const n = 500
	var logs lockedLog
	log := slog.New(slog.NewTextHandler(&logs, nil))
	b := pgleadertest.NewBackend()
	r := startSet(t, b, pgleader.Spec{Key: "s", TTL: 2 * time.Second}, keyNames("k", n),
		pgleader.SetOptions{Owner: "a", Lead: untilEnding, Logger: log})
	waitFor(t, "the set to hold its keys", func() bool { return r.set.Status().Held == n })
	b.SetFailure(errors.New("unreachable"))
	waitFor(t, "every term to end", func() bool { return r.set.Status().Held == 0 })
	b.SetFailure(nil)
	r.stop(t)

	count := regexp.MustCompile(`msg="terms ended" .*keys=(\d+) reason=(\w+)`)
	byReason := map[string]int{}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `msg="term ended"`) {
			t.Errorf("a line of one term ended at info level: %s", line)
		}
		if m := count.FindStringSubmatch(line); m != nil {
			k, _ := strconv.Atoi(m[1])
			byReason[m[2]] += k
		}
	}
	if byReason["expiring"]+byReason["lost"] != n {
		t.Errorf("info lines count %v keys ended by reason; want all %d expiring or lost", byReason, n)
	}
}
