package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// testdata/gotest.jsonl is what
//
//	cd testdata/fixture && go test -json -count=1 -timeout 3s ./...
//
// printed with Go 1.26: the fixture's packages pass (pass), fail a test and
// a subtest (fail), panic in a test (panics) or in TestMain (mainpanic),
// skip with and without a reason (skip), fail to build (buildfail), fail
// vet (vetfail), hang until the timeout (hang), or have no tests (notests).

// TestRecorded summarises the recorded events.
func TestRecorded(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/gotest.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	s := newSummary(&out)
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			s.line(line)
		}
		if err != nil {
			break
		}
	}
	if !s.finish() {
		t.Error("finish reports nothing failed")
	}
	checkFixture(t, out.String(), true)
}

// TestLive runs go test -json on the fixture now, so that a change in what
// go test prints shows here.
func TestLive(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go test on testdata/fixture; not with -short")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command: %v", err)
	}
	var out, errs bytes.Buffer
	status := run([]string{"sh", "-c", "cd testdata/fixture && exec go test -json -count=1 -timeout 5s ./..."}, &out, &errs)
	if status != 1 {
		t.Errorf("status %d, want go test's 1; stderr:\n%s", status, errs.String())
	}
	checkFixture(t, out.String(), true)
}

// checkFixture checks a summary of the fixture's run.
func checkFixture(t *testing.T, out string, hang bool) {
	t.Helper()
	for _, want := range []string{
		// A build failure: the compiler's message, then the package's line.
		"# example.com/fixture/buildfail [example.com/fixture/buildfail.test]\nbuildfail/b_test.go:5:28: undefined: undefinedThing\n",
		"FAIL\texample.com/fixture/buildfail [build failed]\n",
		"vetfail/v_test.go:5:38: (*testing.common).Errorf format %d has arg \"not a number\" of wrong type string\n",
		"FAIL\texample.com/fixture/vetfail [build failed]\n",
		// A panic in TestMain: the package's own output.
		"TestMain set-up output\npanic: the set-up failed\n",
		"?   \texample.com/fixture/notests\t[no test files]\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the summary lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{
		// A failed test's whole output, its --- FAIL line first.
		`(?m)^--- FAIL: TestFails \(\d+\.\d\ds\)\n    fail_test.go:8: before the failure\n    fail_test.go:9: got 1, want 2\n        second line\n`,
		// A failed subtest under its parent, indented.
		`(?m)^--- FAIL: TestParent \(\d+\.\d\ds\)\n    --- FAIL: TestParent/bad \(\d+\.\d\ds\)\n        fail_test.go:17: the bad subtest fails\nFAIL\nFAIL\texample.com/fixture/fail\t\d+\.\d+s\n`,
		// A panic in a test, with its stack.
		`(?m)^--- FAIL: TestPanics \(\d+\.\d\ds\)\npanic: assignment to entry in nil map.*\n(.*\n)*?.*panics/panic_test.go:9 .*\n(.*\n)*?FAIL\texample.com/fixture/panics\t`,
		`(?m)^ok  \texample.com/fixture/pass\t\d+\.\d+s\n`,
		`(?m)^ok  \texample.com/fixture/skip\t\d+\.\d+s\n`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the summary does not match %q:\n%s", want, out)
		}
	}
	if hang && !regexp.MustCompile(`(?m)^=== RUN   TestHangs\n    h_test.go:9: waiting forever\npanic: test timed out after \ds\n`).MatchString(out) {
		t.Errorf("the summary lacks the output of the test that was running at the timeout:\n%s", out)
	}
	// What go test prints only with -v: passing and skipped tests' output,
	// and the lines saying which test runs.
	for _, unwanted := range []string{"quiet", "a log line of a passing test", "TestParent/good", "TestOK",
		"--- PASS", "--- SKIP", "=== PAUSE", "=== CONT", "=== RUN   TestFails", "an earlier log line", `{"`} {
		if strings.Contains(out, unwanted) {
			t.Errorf("the summary has %q:\n%s", unwanted, out)
		}
	}

	// It ends with the failed tests (in the order their packages ended)
	// and the skipped ones.
	_, tail, ok := strings.Cut(out, "\nfailed:\n")
	if !ok {
		t.Fatalf("no failed section:\n%s", out)
	}
	failed, skipped, ok := strings.Cut(tail, "\nskipped tests: ")
	if !ok {
		t.Fatalf("no skipped section after the failed one:\n%s", out)
	}
	got := slices.Sorted(slices.Values(strings.Split(strings.TrimSuffix(failed, "\n"), "\n")))
	want := []string{
		"  example.com/fixture/buildfail: [build failed]",
		"  example.com/fixture/fail: TestFails, TestParent/bad",
		"  example.com/fixture/mainpanic: [the test binary failed outside any test]",
		"  example.com/fixture/panics: TestPanics",
		"  example.com/fixture/vetfail: [build failed]",
	}
	if hang {
		want = slices.Insert(want, 2, "  example.com/fixture/hang: TestHangs (unfinished)")
	}
	if !slices.Equal(got, want) {
		t.Errorf("failed:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantSkipped := `3
  example.com/fixture/skip
    TestSkipped: libfaketime is not installed (skip_test.go:9)
    TestSkipNow: (no reason given)
    TestSkipf/sub: needs pgbouncer (skip_test.go:15)
        and a second line
`
	if skipped != wantSkipped {
		t.Errorf("skipped tests: %s\nwant\nskipped tests: %s", skipped, wantSkipped)
	}
}

// TestStatus: testsum exits with the command's status, or 1 if the
// command exited 0 after a test failed; lines that are not events pass
// through.
func TestStatus(t *testing.T) {
	t.Parallel()
	pass := `grep '"Package":"example.com/fixture/pass"' testdata/gotest.jsonl`
	skips := `grep '"Package":"example.com/fixture/skip"' testdata/gotest.jsonl`
	for _, tc := range []struct {
		script string
		status int
		want   []string
	}{
		{pass, 0, []string{"ok  \texample.com/fixture/pass\t", "\nskipped tests: none\n"}},
		{"echo 'withpg: starting a throwaway PostgreSQL'; " + pass + "; echo not JSON: {", 0,
			[]string{"withpg: starting a throwaway PostgreSQL\nok  \texample.com/fixture/pass\t", "not JSON: {\n"}},
		{pass + "; " + skips, 0, []string{"ok  \texample.com/fixture/skip\t", "\nskipped tests: 3\n"}},
		{"cat testdata/gotest.jsonl; exit 3", 3, []string{"FAIL\texample.com/fixture/fail\t", "\nfailed:\n"}},
		{"cat testdata/gotest.jsonl", 1, []string{"FAIL\texample.com/fixture/fail\t"}},
		{pass + "; exit 2", 2, []string{"ok  \texample.com/fixture/pass\t"}},
		{"kill -TERM $$", 128 + 15, []string{"skipped tests: none"}},
		// A package that never ended: go test was stopped.
		{`grep '"Package":"example.com/fixture/hang"' testdata/gotest.jsonl | sed '/waiting forever/q'; exit 1`, 1,
			[]string{"=== RUN   TestHangs\n    h_test.go:9: waiting forever\nFAIL\texample.com/fixture/hang\t[no result", "example.com/fixture/hang: [no result], TestHangs (unfinished)"}},
	} {
		var out, errs bytes.Buffer
		status := run([]string{"sh", "-c", tc.script}, &out, &errs)
		if status != tc.status {
			t.Errorf("%s: status %d, want %d; stderr:\n%s", tc.script, status, tc.status, errs.String())
		}
		for _, want := range tc.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: the summary lacks %q:\n%s", tc.script, want, out.String())
			}
		}
	}
	var out, errs bytes.Buffer
	if status := run([]string{"/no/such/command"}, &out, &errs); status != 127 || !strings.Contains(errs.String(), "no such file") {
		t.Errorf("a command that does not exist: status %d, stderr %q", status, errs.String())
	}
}
