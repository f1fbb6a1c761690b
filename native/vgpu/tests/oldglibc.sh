#!/usr/bin/env bash
# usage: tests/oldglibc.sh LIBVGPU_SO
# libvgpu.so in an old image: a Debian bullseye root filesystem (glibc 2.31; made once with
# mmdebstrap, cached under ${VGPU_BRIDGE_CACHE:-~/.cache/vgpu-bridge}/oldglibc-rootfs), where
# bullseye's own gcc builds the fake driver and the enforcement tests (memory limit, SM limit,
# priority), which then run with the given library preloaded by LD_PRELOAD and, separately, by
# the rootfs's /etc/ld.so.preload. Everything runs chrooted in a private mount namespace
# (unshare), so its mounts (proc, dev, the sources, a work dir) go away with it.
# Prints one "ok"/"FAIL" line per case and, last, "N passed, N failed". Exit status 1 on failure.
set -euo pipefail
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 LIBVGPU_SO" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "$0: chroot and mount need root" >&2; exit 2; }
LIB=$(realpath "$1")
SRC=$(cd "$(dirname "$0")/.." && pwd)
SUITE=bullseye
PACKAGES="gcc libc6-dev make"
# bullseye left the main mirror's suites for the archive at some point: try both
MIRRORS=${OLDGLIBC_MIRRORS:-http://deb.debian.org/debian http://archive.debian.org/debian}
CACHE=${VGPU_BRIDGE_CACHE:-$HOME/.cache/vgpu-bridge}/oldglibc-rootfs
ROOT=$CACHE/$SUITE-$(echo "$SUITE $PACKAGES" | sha256sum | cut -c1-12)

if [ ! -e "$ROOT/.complete" ]; then
	rm -rf "$ROOT.partial"
	mkdir -p "$CACHE"
	made=
	for mirror in $MIRRORS; do
		echo "making the $SUITE rootfs from $mirror (once; cached in $ROOT)"
		if mmdebstrap --quiet --variant=minbase --include="${PACKAGES// /,}" \
			"$SUITE" "$ROOT.partial" "$mirror"; then
			made=1
			break
		fi
		rm -rf "$ROOT.partial"
	done
	[ -n "$made" ] || { echo "FAIL could not make a $SUITE rootfs from $MIRRORS"; exit 1; }
	mkdir -p "$ROOT.partial/vgpu/src" "$ROOT.partial/vgpu/work"
	: >"$ROOT.partial/etc/ld.so.preload" # empty: a mount point for the preload run
	touch "$ROOT.partial/.complete"
	rm -rf "$ROOT"
	mv "$ROOT.partial" "$ROOT"
fi

WORK=$(mktemp -d /tmp/libvgpu-oldglibc.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
chmod 711 "$WORK" # test_priority's workers may run as nobody
cp "$LIB" "$WORK/libvgpu.so"
echo /vgpu/work/libvgpu.so >"$WORK/ld.so.preload"
unshare --mount --propagation private -- /bin/bash -euc '
	root=$1
	mount --bind "$2" "$root/vgpu/src"
	mount -o remount,bind,ro "$root/vgpu/src"
	mount --bind "$3" "$root/vgpu/work"
	mount -t proc proc "$root/proc"
	mount --rbind /dev "$root/dev"
	exec chroot "$root" /bin/bash /vgpu/src/tests/oldglibc_inner.sh
' oldglibc "$ROOT" "$SRC" "$WORK"
