#!/bin/bash
# Inside the bullseye chroot of tests/oldglibc.sh: /vgpu/src is native/vgpu (read-only),
# /vgpu/work holds the libvgpu.so under test and the ld.so.preload file to mount.
set -u
S=/vgpu/src
W=/vgpu/work
B=$W/build
LIB=$W/libvgpu.so
TESTS="test_memory test_sm test_priority"
passed=0
failed=0
n=0

glibc=$(ldd --version | sed -n '1s/.* \([0-9][0-9.]*\)$/\1/p')
echo "glibc $glibc in the rootfs"
case $glibc in
2.2[0-9] | 2.3[0-3]) ;; # before the 2.34 libdl/libpthread merge: what this run is about
*) echo "FAIL the rootfs's glibc $glibc is not an old one"; echo "0 passed, 1 failed"; exit 1 ;;
esac
make -s -C "$S" B="$B" $(for t in $TESTS; do echo "$B/tests/$t"; done) >"$W/make.out" 2>&1 ||
	{ cat "$W/make.out"; echo "FAIL building the tests with the rootfs's gcc"; exit 1; }

# run LABEL EXPECT VAR=VALUE... -- BINARY [CASE...]: EXPECT ok = every case passes; EXPECT fail =
# the cases fail (without the library). A loader message about the preload is a failure.
run() {
	local label=$1 expect=$2 out err rc p f
	shift 2
	n=$((n + 1))
	out=$W/out.$n
	err=$W/err.$n
	env "$@" >"$out" 2>"$err"
	rc=$?
	p=$(grep -c '^ok ' "$out")
	f=$(grep -c '^FAIL ' "$out")
	if [ "$expect" = fail ]; then
		if [ "$rc" -ne 0 ] && [ "$f" -gt 0 ] && [ "$p" -eq 0 ]; then
			echo "ok $label (fails without the library)"
			passed=$((passed + 1))
		else
			echo "FAIL $label: passed without the library (rc $rc, $p ok, $f FAIL)"
			failed=$((failed + 1))
		fi
		return
	fi
	sed -E "s#^(ok|FAIL) [^:]*:#\1 $label:#" "$out"
	if grep -q 'ld.so' "$err"; then
		echo "FAIL $label: the loader complained"
		f=$((f + 1))
	elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "FAIL $label: exit status $rc"
		f=1
	elif [ "$p" -eq 0 ]; then
		echo "FAIL $label: no case ran"
		f=1
	fi
	[ "$f" -eq 0 ] || sed 's/^/    /' "$err" | tail -n 40
	passed=$((passed + p))
	failed=$((failed + f))
}

region() { # a fresh shared-region path
	n=$((n + 1))
	echo "$W/region.$n/shared-region"
}

# the enforcement cases; $@ = how the library is preloaded (VAR=VALUE... for env)
enforcement() {
	local how=$1
	shift
	# as tests/run.sh runs it: every case but the CUDA_VISIBLE_DEVICES one
	run "test_memory[$how]" ok LD_LIBRARY_PATH="$B/fake" "$@" CUDA_DEVICE_MEMORY_LIMIT=1Gi \
		CUDA_DEVICE_MEMORY_LIMIT_1=256m FAKE_CUDA_DEVICES=2 \
		CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" timeout 60 "$B/tests/test_memory" \
		$(sed -n 's/^[[:space:]]*CASE(\([a-z_0-9]*\)),$/\1/p' "$S/tests/test_memory.c" | grep -v reordered)
	run "test_sm[50%, $how]" ok LD_LIBRARY_PATH="$B/fake" "$@" FAKE_CUDA_KERNEL_US=500 \
		CUDA_DEVICE_SM_LIMIT=50 TEST_EXPECT_UTIL=50 CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		timeout 60 "$B/tests/test_sm" device_utilisation_follows_the_limit
	run "test_sm[2 processes, 50%, $how]" ok LD_LIBRARY_PATH="$B/fake" "$@" \
		FAKE_CUDA_KERNEL_US=500 CUDA_DEVICE_SM_LIMIT=50 TEST_EXPECT_UTIL=50 \
		FAKE_GPU_STATE="$(region).gpu" CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		timeout 60 "$B/tests/test_sm" processes_share_one_sm_limit
	run "test_priority[$how]" ok LD_LIBRARY_PATH="$B/fake" "$@" FAKE_CUDA_KERNEL_US=100 \
		TEST_TMP="$W" timeout 240 "$B/tests/test_priority" \
		low_waits_while_high_launches_and_resumes_after_the_hold \
		kill9_of_the_high_task_lets_the_low_one_resume every_launch_kind_stamps_and_waits \
		a_forked_child_stamps_the_board_with_its_own_pid
}

# without the library the same cases fail: what makes the runs below mean something
run "test_memory[no library]" fail LD_LIBRARY_PATH="$B/fake" CUDA_DEVICE_MEMORY_LIMIT=1Gi \
	CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" timeout 60 "$B/tests/test_memory" \
	the_whole_limit_is_usable_and_not_a_byte_more
run "test_priority[no library]" fail LD_LIBRARY_PATH="$B/fake" FAKE_CUDA_KERNEL_US=100 \
	TEST_TMP="$W" timeout 120 "$B/tests/test_priority" \
	low_waits_while_high_launches_and_resumes_after_the_hold

enforcement LD_PRELOAD "LD_PRELOAD=$LIB"

# /etc/ld.so.preload: every process of the rootfs loads the library from now on
mount --bind "$W/ld.so.preload" /etc/ld.so.preload
if grep -q "$LIB" /proc/self/maps 2>"$W/maps.err" && ! grep -q ld.so "$W/maps.err"; then
	echo "ok ld.so.preload[a plain process maps libvgpu]"
	passed=$((passed + 1))
else
	echo "FAIL ld.so.preload[a plain process maps libvgpu]"
	sed 's/^/    /' "$W/maps.err"
	failed=$((failed + 1))
fi
enforcement ld.so.preload
umount /etc/ld.so.preload

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
