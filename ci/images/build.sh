#!/usr/bin/env bash
# ci/images/build.sh: build, from Debian packages and this machine's Go, the
# local stand-ins for the public images that docker-compose.yml,
# examples/publisher/Dockerfile and the tests' docker path name, for a
# machine that cannot pull from an image registry:
#
#   pgleader-ci/debian:bookworm    debootstrap --variant=minbase bookworm
#   pgleader-ci/postgres:15        + Debian's postgresql-15 and an entry point
#                                    like the official image's (postgres:16-alpine)
#   pgleader-ci/golang:1.26        + the Go toolchain at $(go env GOROOT) (golang:1.26-alpine)
#   pgleader-ci/static:nonroot     the Debian image as user 65532
#                                    (gcr.io/distroless/static-debian12:nonroot)
#
# Images already present are kept (FORCE=1 rebuilds); the debootstrap tree
# is cached in $CACHE (default /var/cache/pgleader-ci). Nothing is pulled:
# each image is a tree imported with docker import. Prints the variables
# to point docker-compose.yml and the tests at them. Needs root.
set -euo pipefail
cd "$(dirname "$0")"

CACHE=${CACHE:-/var/cache/pgleader-ci}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
GO=${GO:-go}
mkdir -p "$CACHE"

have() { [ -z "${FORCE:-}" ] && docker image inspect "$1" >/dev/null 2>&1; }
log() { echo "ci/images: $*" >&2; }

base=$CACHE/bookworm-minbase.tar
if [ ! -s "$base" ] || [ -n "${FORCE:-}" ]; then
	command -v debootstrap >/dev/null || { log "debootstrap is not installed"; exit 1; }
	log "debootstrap --variant=minbase bookworm (once; cached in $base)"
	root=$(mktemp -d "$CACHE/rootfs.XXXX")
	debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
		{ tail -n 20 "$CACHE/debootstrap.log" >&2; rm -rf "$root"; exit 1; }
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
	chmod 755 "$root" # mktemp's 0700 would become the image's /
	tar -C "$root" -cf "$base.tmp" .
	mv "$base.tmp" "$base"
	rm -rf "$root"
fi

# tree NAME: a fresh copy of the base tree, for one image.
tree() {
	local dir=$CACHE/tree-$1
	rm -rf "$dir"
	mkdir -p "$dir"
	tar -C "$dir" -xf "$base"
	chmod 755 "$dir"
	echo "$dir"
}

if ! have pgleader-ci/debian:bookworm; then
	log "pgleader-ci/debian:bookworm"
	dir=$(tree debian)
	tar -C "$dir" -c . | docker import --change 'CMD ["/bin/bash"]' - pgleader-ci/debian:bookworm >/dev/null
	rm -rf "$dir"
fi

if ! have pgleader-ci/postgres:15; then
	log "pgleader-ci/postgres:15 (apt-get install postgresql-15 in the tree)"
	dir=$(tree postgres)
	printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d" # start no service in the chroot
	chmod +x "$dir/usr/sbin/policy-rc.d"
	cp /etc/resolv.conf "$dir/etc/resolv.conf"
	echo "deb $MIRROR bookworm main" >"$dir/etc/apt/sources.list"
	chroot "$dir" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15' >"$CACHE/postgres-image.log" 2>&1 ||
		{ tail -n 20 "$CACHE/postgres-image.log" >&2; log "apt-get install postgresql-15 failed"; exit 1; }
	rm -rf "$dir"/var/lib/postgresql/15 "$dir"/etc/postgresql/15 "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/archives/*.deb "$dir/usr/sbin/policy-rc.d"
	: >"$dir/etc/resolv.conf"
	install -m 0755 postgres-entrypoint.sh "$dir/usr/local/bin/docker-entrypoint.sh"
	tar -C "$dir" -c . | docker import \
		--change 'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV PGDATA=/var/lib/postgresql/data' \
		--change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
		--change 'CMD ["postgres"]' \
		--change 'EXPOSE 5432' \
		- pgleader-ci/postgres:15 >/dev/null
	rm -rf "$dir"
fi

if ! have pgleader-ci/golang:1.26; then
	goroot=$("$GO" env GOROOT)
	log "pgleader-ci/golang:1.26 (Go $("$GO" env GOVERSION) from $goroot)"
	dir=$(tree golang)
	mkdir -p "$dir/usr/local/go" "$dir/go"
	cp -a "$goroot/." "$dir/usr/local/go/"
	tar -C "$dir" -c . | docker import \
		--change 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV GOPATH=/go' \
		--change 'ENV GOTOOLCHAIN=local' \
		--change 'WORKDIR /go' \
		- pgleader-ci/golang:1.26 >/dev/null
	rm -rf "$dir"
fi

if ! have pgleader-ci/static:nonroot; then
	log "pgleader-ci/static:nonroot"
	dir=$(tree static)
	tar -C "$dir" -c . | docker import --change 'USER 65532:65532' - pgleader-ci/static:nonroot >/dev/null
	rm -rf "$dir"
fi

cat <<'VARS'
export POSTGRES_IMAGE=pgleader-ci/postgres:15
export GOLANG_IMAGE=pgleader-ci/golang:1.26
export RUNTIME_IMAGE=pgleader-ci/static:nonroot
export PGLEADER_POSTGRES_IMAGE=pgleader-ci/postgres:15
VARS
