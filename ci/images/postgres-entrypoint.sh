#!/bin/sh
# Entry point of the CI stand-in for the official postgres image: the same
# environment (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, PGDATA) and
# the same start-up as far as the compose file and testcontainers-go's
# postgres module rely on it: on first start, initdb and a temporary server
# that creates the database (its "ready to accept connections" is the
# first of two), then the server in the foreground, listening on all
# addresses, with password authentication over TCP.
set -eu
[ "${1#-}" != "$1" ] && set -- postgres "$@"
if [ "${1:-}" != postgres ]; then
	exec "$@"
fi
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
export PGDATA
if [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown -R postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 700 "$PGDATA"
	exec runuser -u postgres -- "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "${POSTGRES_HOST_AUTH_METHOD:-}" != trust ]; then
		echo "postgres stand-in: POSTGRES_PASSWORD is not set" >&2
		exit 1
	fi
	pwfile=$(mktemp)
	printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pwfile"
	initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust --auth-host="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}" -E UTF8 >/dev/null
	rm -f "$pwfile"
	echo "host all all all ${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}" >>"$PGDATA/pg_hba.conf"
	pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
	if [ "$POSTGRES_DB" != postgres ]; then
		psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -c "CREATE DATABASE \"$POSTGRES_DB\""
	fi
	pg_ctl -D "$PGDATA" -m fast -w stop
fi
shift
exec postgres -c listen_addresses='*' "$@"
