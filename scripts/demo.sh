#!/usr/bin/env bash
# make demo: run examples/handover, the recipe's story, against PostgreSQL.
#
# The server, in this order: DATABASE_URL if set; PostgreSQL on
# 127.0.0.1:5432 as user postgres, if it answers; the postgres service of
# docker-compose.yml, if a Docker engine answers (stopped again afterwards if
# this script started it). The demo creates a database of its own on that
# server and drops it at the end, so nothing of yours is changed.
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

if [ -n "${DATABASE_URL:-}" ]; then
	url=$DATABASE_URL
elif "$handover" -ping -database "$local_url" 2>/dev/null; then
	url=$local_url
elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
	echo "demo: no PostgreSQL on 127.0.0.1:5432; starting the compose file's (docker compose up -d postgres)" >&2
	if [ -z "$(docker compose ps --quiet 2>/dev/null)" ]; then
		started_compose=1
	fi
	docker compose up --detach --wait postgres
	url=$compose_url
	for _ in $(seq 1 30); do
		"$handover" -ping -database "$url" 2>/dev/null && break
		sleep 1
	done
else
	cat >&2 <<'MSG'
make demo needs a PostgreSQL server and found none. Provide one of:
  - DATABASE_URL=postgres://user:password@host:port/postgres, whose role may CREATE DATABASE
    (the demo creates a database of its own there and drops it at the end);
  - PostgreSQL on 127.0.0.1:5432 accepting user postgres without a password;
  - a running Docker engine: the demo then starts the postgres service of docker-compose.yml.
MSG
	exit 1
fi
"$handover" -database "$url"
