#!/usr/bin/env bash
# ci/install-compose.sh: make `docker compose` (Compose v2) work, for a
# machine whose registries are the Go module proxy and Debian's: build
# github.com/docker/compose/v2 at COMPOSE_VERSION from the Go module proxy
# (once; the binary is cached in $CACHE/bin) and install it as a Docker CLI
# plugin for this user. Does nothing if `docker compose` already works.
set -euo pipefail

COMPOSE_VERSION=${COMPOSE_VERSION:-v2.40.3}
CACHE=${CACHE:-/var/cache/pgleader-ci}
GO=${GO:-go}

if docker compose version >/dev/null 2>&1; then
	exit 0
fi
bin=$CACHE/bin/docker-compose-$COMPOSE_VERSION
if [ ! -x "$bin" ]; then
	echo "ci/install-compose: building Docker Compose $COMPOSE_VERSION from the Go module proxy (once)" >&2
	src=$("$GO" mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[ -d "$src" ] || { echo "ci/install-compose: could not download the module" >&2; exit 1; }
	# Built as the main module: its go.mod has exclude directives, which
	# `go install module@version` refuses.
	work=$(mktemp -d)
	cp -r "$src/." "$work"
	chmod -R u+w "$work"
	mkdir -p "$CACHE/bin"
	(cd "$work" && CGO_ENABLED=0 GOTOOLCHAIN=local "$GO" build -trimpath \
		-ldflags "-X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" -o "$bin.tmp" ./cmd)
	mv "$bin.tmp" "$bin"
	rm -rf "$work"
fi
mkdir -p "$HOME/.docker/cli-plugins"
ln -sf "$bin" "$HOME/.docker/cli-plugins/docker-compose"
docker compose version
