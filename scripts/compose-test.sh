#!/usr/bin/env bash
# make compose-test: run docker-compose.yml (PostgreSQL, migrate, two
# publishers, watch) as it is, wait until one publisher leads, stop it, and
# check from the table published that the other took over with a higher
# token and that no unit of the old term landed after the new term's first;
# then docker compose down --volumes.
#
# It builds from a copy of the working tree with the module's dependencies
# vendored, so the image build needs no network; it never pulls. The base
# images are the compose file's variables (POSTGRES_IMAGE, GOLANG_IMAGE,
# RUNTIME_IMAGE), by default the public ones; ci/images/build.sh makes local
# stand-ins and prints the variables that name them. Needs a Docker engine
# and Docker Compose (the docker compose plugin, else docker-compose).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
log() { echo "compose-test: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

docker info >/dev/null 2>&1 || fail "no Docker engine answers (docker info)"
if docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
	compose=(docker-compose)
else
	fail "neither docker compose nor docker-compose is installed"
fi
log "$("${compose[@]}" version | head -n 1)"

stage=$(mktemp -d -t pgleader-compose-XXXX)
project=pgleader-compose-test-$$
dc() { "${compose[@]}" --project-name "$project" --project-directory "$stage" --file "$stage/docker-compose.yml" "$@"; }
cleanup() {
	status=$?
	if [ "$status" != 0 ]; then
		dc ps -a >&2 || true
		dc logs --no-color --tail 40 >&2 || true
	fi
	dc down --volumes --remove-orphans --rmi local >/dev/null 2>&1 || true
	rm -rf "$stage"
	exit "$status"
}
trap cleanup EXIT

git ls-files -z --cached --others --exclude-standard | tar --null -T - -c | tar -C "$stage" -x
(cd "$stage" && "$GO" mod vendor)
# The stage's own image name, so that the test never replaces a user's.
sed -i "s|image: pgleader-publisher$|image: $project-publisher|" "$stage/docker-compose.yml"
# The test reaches PostgreSQL through docker compose exec, never through the
# host port the file publishes for the demo (55432): a port any other program
# may hold (CI's throwaway servers take free ports from the same range). Let
# the engine choose one instead, so that a busy 55432 cannot fail the test.
grep -q '"127.0.0.1:55432:5432"' "$stage/docker-compose.yml" || fail "docker-compose.yml no longer publishes 127.0.0.1:55432; update this script"
sed -i 's|"127.0.0.1:55432:5432"|"127.0.0.1::5432"|' "$stage/docker-compose.yml"

sql() { dc exec -T postgres psql --quiet --no-psqlrc --username postgres --dbname pgleader -Atc "$1"; }
# wait_for SECONDS WHAT QUERY: until QUERY prints something other than "" or "0".
wait_for() {
	local deadline=$(( $(date +%s) + $1 )) out
	while :; do
		out=$(sql "$3" 2>/dev/null || true)
		if [ -n "$out" ] && [ "$out" != 0 ]; then echo "$out"; return 0; fi
		[ "$(date +%s)" -lt "$deadline" ] || fail "timed out after $1s waiting for $2"
		sleep 0.5
	done
}

log "building the publisher image and starting the services"
build_args=()
docker compose version >/dev/null 2>&1 && build_args=(--pull never)
dc build >&2
dc up --detach --no-build "${build_args[@]}" >&2

first=$(wait_for 180 "a publisher to lead" "SELECT owner || ' ' || token FROM published ORDER BY id DESC LIMIT 1")
read -r leader token1 <<<"$first"
log "$leader leads with token $token1"
case $leader in
publisher-a) other=publisher-b ;;
publisher-b) other=publisher-a ;;
*) fail "the leader $leader is not one of the compose file's publishers" ;;
esac
wait_for 30 "$leader's third unit" "SELECT 1 WHERE (SELECT count(*) FROM published WHERE token = $token1) >= 3" >/dev/null
dc ps --services --filter status=running | grep -qx "$other" || fail "$other is not running"

log "docker compose stop $leader"
dc stop "$leader" >&2
second=$(wait_for 60 "$other to take over" "SELECT owner || ' ' || token FROM published WHERE token > $token1 ORDER BY id LIMIT 1")
read -r successor token2 <<<"$second"
[ "$successor" = "$other" ] || fail "the unit after $leader's term is by $successor, not $other"
[ "$token2" -gt "$token1" ] || fail "the new token $token2 is not above $token1"
wait_for 30 "$other's third unit" "SELECT 1 WHERE (SELECT count(*) FROM published WHERE token = $token2) >= 3" >/dev/null

late=$(sql "SELECT count(*) FROM published WHERE token < $token2 AND id > (SELECT min(id) FROM published WHERE token = $token2)")
[ "$late" = 0 ] || fail "$late units of an older term landed after token $token2's first"
lower=$(sql "SELECT count(*) FROM published a JOIN published b ON b.id > a.id AND b.token < a.token")
[ "$lower" = 0 ] || fail "$lower units have a lower token than a unit published before them"
gaps=$(sql "SELECT count(*) FROM (SELECT token, seq, row_number() OVER (PARTITION BY token ORDER BY id) AS n FROM published) s WHERE seq <> n")
[ "$gaps" = 0 ] || fail "$gaps units are out of sequence within their term"
sql "SELECT token, owner, count(*) AS units, min(seq), max(seq) FROM published GROUP BY token, owner ORDER BY token" | sed 's/^/compose-test:   /' >&2
echo "compose-test: ok: $leader led with token $token1; after docker compose stop $leader, $other leads with token $token2; no unit of token $token1 after token $token2's first"
