#!/usr/bin/env bash
# usage: tests/arm64.sh BUILD_DIR   (make arm64-test; root)
# Runs the plain suite (tests/run.sh) of an aarch64 build under qemu-user. The tests exec
# themselves and each other, so aarch64 ELF files must run as programs: a binfmt_misc entry
# hands them to qemu-aarch64-static (with the cross toolchain's libraries as the guest's root,
# QEMU_LD_PREFIX). An aarch64 entry already registered is used as it is; what this script
# registers or mounts it removes again on exit.
set -euo pipefail
B=$1
HERE=$(cd "$(dirname "$0")" && pwd)
QEMU=$(command -v qemu-aarch64-static) || { echo "no qemu-aarch64-static (qemu-user-static)" >&2; exit 2; }
export QEMU_LD_PREFIX=${QEMU_LD_PREFIX:-/usr/aarch64-linux-gnu}
BINFMT=/proc/sys/fs/binfmt_misc
NAME=vgpu-bridge-aarch64
AARCH64_MAGIC='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
AARCH64_MASK='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'

for f in libvgpu.so tests/test_hooks; do
	readelf -h "$B/$f" | grep -q 'Machine:.*AArch64' || { echo "$B/$f is not an aarch64 build" >&2; exit 2; }
done
[ "$(id -u)" -eq 0 ] || { echo "$0: registering a binfmt_misc entry needs root" >&2; exit 2; }

mounted=
registered=
cleanup() {
	if [ -n "$registered" ]; then echo -1 >"$BINFMT/$NAME"; fi
	if [ -n "$mounted" ]; then umount "$BINFMT"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ ! -e "$BINFMT/register" ]; then
	mount -t binfmt_misc binfmt_misc "$BINFMT"
	mounted=1
fi
if ! grep -qs '^magic 7f454c460201010000000000000000000200b700$' "$BINFMT"/*; then
	echo ":$NAME:M::$AARCH64_MAGIC:$AARCH64_MASK:$QEMU:" >"$BINFMT/register"
	registered=1
fi
"$B/tests/unit_config" >/dev/null 2>&1 ||
	{ echo "FAIL $B/tests/unit_config does not run under qemu-user"; exit 1; }
TEST_ARCH=arm64 "$HERE/run.sh" "$B"
