#!/usr/bin/env bash
# Checks the Promela model of pgleader (model/lease.pml) with SPIN: every
# real check must pass after a complete, exhaustive search, and every mutant
# must produce a counterexample, found breadth-first so that it is a
# shortest one. Prints a table and each mutant's trail. See
# docs/model-checking.md. Needs spin and a C compiler.
set -euo pipefail
cd "$(dirname "$0")"

CC=${CC:-gcc}
MAXDEPTH=10000   # pan -m: a complete search never reaches it
MEMLIM=2048      # MB per search; a search that hits it is incomplete

for tool in spin "$CC"; do
	command -v "$tool" >/dev/null 2>&1 || { echo "model: $tool not found (apt-get install spin gcc)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name | expect | spin -D flags
checks=(
	"safety|pass|"
	"safety-lost-row|pass|-DWIPE"
	"safety-lost-row-no-floor|pass|-DWIPE -DNO_FLOOR"
	"safety-3-replicas|pass|-DNR=3 -DFAULT_BUDGET=1"
	"liveness|pass|-DFENCE0=3 -DFAULT_END=6"
	"failover|pass|-DFAILOVER -DFAULT_BUDGET=1 -DFO_END=3"
	"failover-store-same|pass|-DFAILOVER -DSTORE_SAME -DSTRICT_P2 -DFAULT_BUDGET=1 -DFO_END=3"
	"failover-any-tick|pass|-DFAILOVER -DSTORE_SAME -DSTRICT_P2 -DFAULT_BUDGET=0"
	"liveness-failover|pass|-DFAILOVER -DSTORE_SAME -DSTRICT_P2 -DFO_END=2 -DFAULT_END=2 -DTMAX=19"
	"handoff|pass|-DHANDOFF -DFAULT_BUDGET=1"
	"liveness-handoff|pass|-DHANDOFF -DFENCE0=3 -DFAULT_END=6"
	"handoff-two-returns|pass|-DHANDOFF -DRETURNS=2 -DFAULT_BUDGET=1"
	"mutant-no-yield|fail|-DMUTANT_NO_YIELD"
	"mutant-receive-time|fail|-DMUTANT_RECV_TIME"
	"mutant-claim-le|fail|-DMUTANT_CLAIM_LE -DWIPE"
	"mutant-write-lt|fail|-DMUTANT_WRITE_LT"
	"mutant-floor-ignored|fail|-DNO_FLOOR -DFENCE0=3 -DFAULT_END=6"
	"mutant-margin-0|fail|-DMUTANT_MARGIN0"
	"mutant-no-grace|fail|-DFAILOVER -DMUTANT_NO_GRACE -DFAULT_BUDGET=1 -DFO_END=3"
	"mutant-no-epoch|fail|-DFAILOVER -DSTORE_SAME -DSTRICT_P2 -DMUTANT_NO_EPOCH -DFAULT_BUDGET=1 -DFO_END=1"
	"mutant-handoff-no-check|fail|-DHANDOFF -DMUTANT_HANDOFF_NO_CHECK -DFAULT_BUDGET=1"
	"mutant-handoff-ttl-bound|fail|-DHANDOFF -DMUTANT_HANDOFF_TTL_BOUND -DFENCE0=3 -DFAULT_END=6"
	"mutant-handoff-relead|fail|-DHANDOFF -DMUTANT_HANDOFF_RELEAD -DRETURNS=2 -DFAULT_BUDGET=1"
)

rows=()
trails=()
failed=0
start=$SECONDS
for c in "${checks[@]}"; do
	IFS='|' read -r name expect flags <<<"$c"
	dir=$work/$name
	mkdir -p "$dir"
	cp lease.pml spec.pml "$dir"
	cc_flags="-O2 -DSAFETY -DMEMLIM=$MEMLIM"
	# A mutant's counterexample is searched breadth-first: the first one
	# found is a shortest. Its search is short, so it is compiled with -O1,
	# which compiles several times faster than -O2.
	[ "$expect" = fail ] && cc_flags="-O1 -DSAFETY -DMEMLIM=$MEMLIM -DBFS"
	t0=$SECONDS
	# shellcheck disable=SC2086 # flags are words
	(
		cd "$dir"
		spin $flags -a lease.pml >spin.out 2>&1
		$CC $cc_flags -o pan pan.c 2>cc.out
		./pan -m$MAXDEPTH -w25 >pan.out 2>&1 || true
	) || { echo "model: $name: spin or $CC failed:" >&2; cat "$dir"/spin.out "$dir"/cc.out >&2 || true; exit 1; }
	secs=$((SECONDS - t0))
	out=$dir/pan.out
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | head -n 1)
	states=$(awk '/states, stored/ {print $1; exit}' "$out")
	depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | head -n 1)
	complete=yes
	if grep -qE 'Search not completed|max search depth too small|out of memory' "$out" || [ "${depth:-$MAXDEPTH}" -ge $MAXDEPTH ]; then
		complete=no
	fi
	[ "$expect" = fail ] && complete=-   # the search stops at the first error
	case $expect in
	pass) if [ "${errors:-1}" = 0 ] && [ $complete = yes ]; then result=ok; else result=FAILED; fi ;;
	fail) if [ "${errors:-0}" -gt 0 ]; then result=ok; else result=FAILED; fi ;;
	esac
	if [ "${errors:-0}" -gt 0 ]; then
		# shellcheck disable=SC2086
		trail=$(cd "$dir" && spin -t $flags lease.pml 2>&1 |
			sed -n 's/^[[:space:]]*\(t[0-9][0-9]* .*\|violated: .*\)$/\1/p' | paste -sd ';' - | sed 's/;/; /g')
		trails+=("$name: $trail")
	fi
	[ $result = ok ] || failed=1
	rows+=("$(printf '%-26s %-6s %-7s %-7s %12s %6s %9s %5ss' "$name" "$expect" "$result" "$complete" "$states" "$depth" "$MAXDEPTH" "$secs")")
done

printf '%-26s %-6s %-7s %-7s %12s %6s %9s %6s\n' check expect result full "states" depth "max depth" time
for r in "${rows[@]}"; do echo "$r"; done
echo
echo "Counterexamples (shortest, breadth-first):"
for t in "${trails[@]}"; do echo "  $t"; done
echo
echo "model: $((SECONDS - start))s in all"
if [ $failed != 0 ]; then
	echo "model: FAILED: a real check found an error or did not finish, or a mutant survived" >&2
	exit 1
fi
