#!/usr/bin/env bash
# Checks the Promela models of pgleader (model/lease.pml, and
# model/setsession.pml for a Set's session-bound leases) with SPIN: every
# real check must pass after a complete, exhaustive search, and every mutant
# must produce a counterexample, found breadth-first so that it is a
# shortest one. Prints a table and each mutant's trail. See
# docs/model-checking.md. Needs spin and a C compiler.
#
# The checks run MODEL_JOBS at a time (default: every core, nproc). Each
# check prints one line when it ends; the table, in the order below, comes
# when all have ended. Arguments, if any, name the checks to run.
set -euo pipefail
cd "$(dirname "$0")"

CC=${CC:-gcc}
MAXDEPTH=10000   # pan -m: a complete search never reaches it
MEMLIM=2048      # MB per search; a search that hits it is incomplete

for tool in spin "$CC"; do
	command -v "$tool" >/dev/null 2>&1 || { echo "model: $tool not found (apt-get install spin gcc)" >&2; exit 1; }
done

JOBS=${MODEL_JOBS:-$(nproc 2>/dev/null || echo 1)}

work=$(mktemp -d)
cleanup() {
	# the searches this script started, if it is interrupted
	local p
	for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# name | expect | spin -D flags [| model file, default lease.pml]
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
	"handoff-failover|pass|-DHANDOFF -DFAILOVER -DRESTARTS=1 -DRETURNS=2 -DFAULT_BUDGET=0 -DFO_END=3"
	"handoff-failover-fault|pass|-DHANDOFF -DFAILOVER -DRESTARTS=1 -DRETURNS=2 -DFAULT_BUDGET=1 -DFAULT_END=1 -DFO_END=1"
	"job|pass|-DJOB -DFAULT_BUDGET=1"
	"job-at-least-once|pass|-DJOB -DATLEASTONCE -DFAULT_BUDGET=1"
	"job-two-faults|pass|-DJOB -DDRIFT=0"
	"job-at-least-once-two-faults|pass|-DJOB -DATLEASTONCE -DDRIFT=0"
	"session|pass|-DSESSION"
	"session-failover|pass|-DSESSION -DFAILOVER -DFAULT_BUDGET=1 -DFO_END=3"
	"session-restart|pass|-DSESSION -DSRV_RESTART -DFAULT_BUDGET=1"
	"liveness-session-crash|pass|-DSESSION -DSESS_LIVE -DFAULT_BUDGET=1"
	"session-handoff|pass|-DSESSION -DHANDOFF -DFAULT_BUDGET=1"
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
	"mutant-handoff-grace-confirm|fail|-DHANDOFF -DFAILOVER -DRESTARTS=1 -DRETURNS=2 -DMUTANT_HANDOFF_GRACE_CONFIRM -DFAULT_BUDGET=0 -DFO_END=1"
	"mutant-job-no-lease|fail|-DJOB -DMUTANT_JOB_NO_LEASE -DDRIFT=0"
	"mutant-job-retry-any|fail|-DJOB -DATLEASTONCE -DMUTANT_JOB_RETRY_ANY -DDRIFT=0"
	"mutant-session-takeover-without-end|fail|-DSESSION -DMUTANT_SESSION_TAKEOVER_NO_END"
	"mutant-session-holder-ignores-end|fail|-DSESSION -DMUTANT_SESSION_IGNORES_END"
	"mutant-session-no-pending-read|fail|-DSESSION -DMUTANT_SESSION_NO_READ"
	"mutant-session-restart-no-grace|fail|-DSESSION -DFAILOVER -DMUTANT_SESSION_RESTART_NO_GRACE -DFAULT_BUDGET=1 -DFO_END=3"
	"mutant-session-clean-restart|fail|-DSESSION -DSRV_RESTART -DMUTANT_SESSION_RESTART_NO_GRACE -DFAULT_BUDGET=1"
	"mutant-session-short-keepalive|fail|-DSESSION -DMUTANT_SESSION_SHORT_KEEPALIVE"
	"mutant-session-handoff-keeps-binding|fail|-DSESSION -DHANDOFF -DMUTANT_SESSION_HANDOFF_KEEPS_BINDING -DFAULT_BUDGET=1"
	"set-session|pass||setsession.pml"
	"set-session-restart|pass|-DSRV_RESTART -DFAULT_BUDGET=1|setsession.pml"
	"set-session-ring|pass|-DNO_STORE -DFAULT_BUDGET=4|setsession.pml"
	"set-session-ring-3-keys|pass|-DNO_STORE -DNK=3 -DFAULT_BUDGET=3|setsession.pml"
	"set-session-ring-restart|pass|-DNO_STORE -DSRV_RESTART -DFAULT_BUDGET=2|setsession.pml"
	"mutant-set-session-takeover-no-end|fail|-DMUTANT_SET_TAKE_NO_END|setsession.pml"
	"mutant-set-session-ignores-end|fail|-DMUTANT_SET_IGNORES_END|setsession.pml"
	"mutant-set-session-watch-not-moved|fail|-DMUTANT_SET_NO_MOVE|setsession.pml"
	"mutant-set-session-watched-only|fail|-DMUTANT_SET_WATCHED_ONLY|setsession.pml"
	"mutant-set-session-restart-takeover|fail|-DSRV_RESTART -DMUTANT_SET_OLD_RUN -DFAULT_BUDGET=1|setsession.pml"
)

# check NAME EXPECT FLAGS MODEL: one search of MODEL in $work/NAME. Writes its table row
# to row, its counterexample to trail, and ok or FAILED to result; prints
# one line when it ends.
check() {
	local name=$1 expect=$2 flags=$3 model=$4
	local dir=$work/$name t0=$SECONDS
	local cc_flags="-O2 -DSAFETY -DMEMLIM=$MEMLIM"
	# A mutant's counterexample is searched breadth-first: the first one
	# found is a shortest. Its search is short, so it is compiled with -O1,
	# which compiles several times faster than -O2.
	[ "$expect" = fail ] && cc_flags="-O1 -DSAFETY -DMEMLIM=$MEMLIM -DBFS"
	mkdir -p "$dir"
	cp "$model" spec.pml "$dir"
	# shellcheck disable=SC2086 # flags are words
	if ! (
		cd "$dir" &&
		spin $flags -a "$model" >spin.out 2>&1 &&
		$CC $cc_flags -o pan pan.c 2>cc.out
	); then
		echo FAILED >"$dir/result"
		printf '%-36s %-6s %-7s %s\n' "$name" "$expect" FAILED "spin or $CC failed" >"$dir/row"
		{ echo "model: $name: spin or $CC failed:"; cat "$dir"/spin.out "$dir"/cc.out 2>/dev/null || true; } >"$dir/error"
		printf 'model: %-36s FAILED (spin or %s failed, %ss)\n' "$name" "$CC" $((SECONDS - t0))
		return
	fi
	(cd "$dir" && ./pan -m$MAXDEPTH -w25 >pan.out 2>&1) || true
	local secs=$((SECONDS - t0)) out=$dir/pan.out errors states depth complete result
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
		(cd "$dir" && spin -t $flags "$model" 2>&1) |
			sed -n 's/^[[:space:]]*\(t[0-9][0-9]* .*\|set .*\|violated: .*\)$/\1/p' | paste -sd ';' - | sed 's/;/; /g' |
			sed "s/^/$name: /" >"$dir/trail"
	fi
	printf '%-36s %-6s %-7s %-7s %12s %6s %9s %5ss\n' "$name" "$expect" "$result" "$complete" "$states" "$depth" "$MAXDEPTH" "$secs" >"$dir/row"
	echo $result >"$dir/result"
	printf 'model: %-36s %-6s (%s states, %ss)\n' "$name" "$result" "${states:-?}" "$secs"
}

# Checks that make model leaves out for time (docs/model-checking.md,
# Bounds); each runs when named on the command line.
extra=(
	"handoff-restart|pass|-DHANDOFF -DRESTARTS=1 -DRETURNS=2 -DFAULT_BUDGET=1"
	"handoff-failover-store-same|pass|-DHANDOFF -DFAILOVER -DSTORE_SAME -DSTRICT_P2 -DRESTARTS=1 -DRETURNS=2 -DFAULT_BUDGET=0 -DFO_END=3"
)

# Which checks: all of checks, or those named on the command line.
run=()
if [ $# = 0 ]; then
	run=("${checks[@]}")
else
	for c in "${checks[@]}" "${extra[@]}"; do
		IFS='|' read -r name _ _ <<<"$c"
		if printf '%s\n' "$@" | grep -qxF "$name"; then run+=("$c"); fi
	done
fi
[ ${#run[@]} -gt 0 ] || { echo "model: no check named $*" >&2; exit 1; }

echo "model: ${#run[@]} check(s), $JOBS at a time"
start=$SECONDS
running=0
for c in "${run[@]}"; do
	IFS='|' read -r name expect flags model <<<"$c"
	if [ $running -ge "$JOBS" ]; then
		wait -n || true
		running=$((running - 1))
	fi
	check "$name" "$expect" "$flags" "${model:-lease.pml}" &
	running=$((running + 1))
done
wait || true
echo

failed=0
printf '%-36s %-6s %-7s %-7s %12s %6s %9s %6s\n' check expect result full "states" depth "max depth" time
for c in "${run[@]}"; do
	IFS='|' read -r name _ _ <<<"$c"
	if [ -f "$work/$name/row" ]; then cat "$work/$name/row"; else printf '%-36s %s\n' "$name" "FAILED (no result)"; fi
	[ "$(cat "$work/$name/result" 2>/dev/null)" = ok ] || failed=1
done
echo
echo "Counterexamples (shortest, breadth-first):"
for c in "${run[@]}"; do
	IFS='|' read -r name _ _ <<<"$c"
	[ -s "$work/$name/trail" ] && sed 's/^/  /' "$work/$name/trail"
done
for c in "${run[@]}"; do
	IFS='|' read -r name _ _ <<<"$c"
	[ -s "$work/$name/error" ] && cat "$work/$name/error" >&2
done
echo
echo "model: $((SECONDS - start))s in all, $JOBS at a time"
if [ $failed != 0 ]; then
	echo "model: FAILED: a real check found an error or did not finish, or a mutant survived" >&2
	exit 1
fi
