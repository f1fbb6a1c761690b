#!/usr/bin/env bash
# Runs every libvgpu test over the fake driver, plain and under ASan/UBSan.
# usage: tests/run.sh BUILD_DIR      (make test calls it)
#        TEST_ARCH=arm64 tests/run.sh build-arm64   (make arm64-test, via tests/arm64.sh: aarch64
#        binaries run by qemu-user; the plain variant only, none of the host-only checks)
# Prints one "ok"/"FAIL" line per case and, last, "N passed, N failed". Exit status 1 on failure.
set -u
B=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d /tmp/libvgpu-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
chmod 711 "$TMP" # test_priority's workers may run as nobody (an unwritable dir for root)
passed=0
failed=0
n=0

# run LABEL VAR=VALUE... -- BINARY [CASE...]: a binary's ok/FAIL lines count; a crash, a hang or
# a non-zero exit without a FAIL line counts as one failure of LABEL.
run() {
	local label=$1$SUFFIX out err rc p f
	shift
	n=$((n + 1))
	out="$TMP/out.$n"
	err="$TMP/err.$n"
	env "$@" >"$out" 2>"$err"
	rc=$?
	# name each case after the run (binary[variant]) so repeated binaries stay apart
	sed -E "s#^(ok|FAIL) [^:]*:#\1 $label:#" "$out"
	p=$(grep -c '^ok ' "$out")
	f=$(grep -c '^FAIL ' "$out")
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "FAIL $label: exit status $rc"
		f=1
	fi
	if [ "$f" -ne 0 ]; then
		sed 's/^/    /' "$err" | tail -n 40
	fi
	passed=$((passed + p))
	failed=$((failed + f))
}

check() { # check LABEL COMMAND...: a shell-level check
	local label=$1
	shift
	if "$@" >"$TMP/check.out" 2>&1; then
		echo "ok $label"
		passed=$((passed + 1))
	else
		echo "FAIL $label"
		sed 's/^/    /' "$TMP/check.out" | tail -n 20
		failed=$((failed + 1))
	fi
}

exports_match_table() { # the library exports exactly the names the version script lists
	local lib=$1
	diff <(nm -D --defined-only "$lib" | awk '{print $3}' | sort) \
		<(sed -n 's/^[[:space:]]*\([A-Za-z_][A-Za-z0-9_]*\);$/\1/p' "$B/libvgpu.map" | sort)
}

# libvgpu.so is preloaded into old images too (RHEL/UBI 8: glibc 2.28): no glibc symbol version
# newer than 2.28 (src/glibc_compat.h), and the check itself catches a newer one (2.17 > 2.16)
glibc_2_28_is_enough() {
	"$HERE/glibc_versions.sh" "$B/libvgpu.so" 2.28 && ! "$HERE/glibc_versions.sh" "$B/libvgpu.so" 2.16
}

# The stand-in driver (`make mock-driver`): a driver install, <name>.so.<version> under
# usr/lib/<triplet>, regular files whose SONAMEs are what loaders ask for, loadable in old images
# like libvgpu.so; mock_driver_links makes the SONAME links a CDI spec's mounts would give.
MOCK_LIB=$(ls -d "$B"/mock-driver/usr/lib/*-linux-gnu 2>/dev/null | head -n 1)
mock_driver_is_a_driver_install() {
	local version name file
	version=$(sed -n 's/^#define FAKE_DRIVER_VERSION "\([0-9.]*\)".*/\1/p' "$HERE/fake/fake.h")
	[ -n "$MOCK_LIB" ] || { echo "no $B/mock-driver/usr/lib/<triplet>"; return 1; }
	[ "$(ls "$MOCK_LIB")" = "$(printf 'libcuda.so.%s\nlibnvidia-ml.so.%s' "$version" "$version")" ] ||
		{ echo "$MOCK_LIB holds: $(ls "$MOCK_LIB")"; return 1; }
	for name in libcuda libnvidia-ml; do
		file=$MOCK_LIB/$name.so.$version
		[ -f "$file" ] && [ ! -L "$file" ] || { echo "$file: not a regular file"; return 1; }
		readelf -d "$file" | grep -q "(SONAME).*\[$name\.so\.1\]" ||
			{ echo "$file: SONAME is not $name.so.1"; return 1; }
		"$HERE/glibc_versions.sh" "$file" 2.28 || return 1
	done
}
mock_driver_links() {
	mkdir -p "$TMP/mock-driver"
	for file in "$MOCK_LIB"/*.so.*; do
		ln -sf "$file" "$TMP/mock-driver/$(basename "${file%%.so.*}").so.1"
	done
	echo "$TMP/mock-driver"
}

modules_form_no_circle() { # no module calls back into one that calls it (tests/module_graph.sh)
	"$HERE/module_graph.sh" "$B/obj"
}

region() { # a fresh shared-region path
	n=$((n + 1))
	echo "$TMP/region.$n/shared-region"
}

# beside_a_neighbour LABEL VAR=VALUE...: test_sm's measured_beside_a_neighbour, limited to 50%
# in a pid namespace with its own /proc, while a neighbour outside it keeps the device 40% busy
beside_a_neighbour() {
	local label=$1 dir neighbour
	shift
	n=$((n + 1))
	dir=$TMP/neighbour.$n
	mkdir -p "$dir"
	LD_LIBRARY_PATH=$B/fake FAKE_CUDA_KERNEL_US=500 FAKE_GPU_STATE="$dir/gpu" \
		TEST_NEIGHBOUR_UTIL=40 TEST_NEIGHBOUR_S=8 timeout 60 "$T/test_sm" \
		neighbour_keeps_the_device_busy >"$dir/neighbour.out" 2>&1 &
	neighbour=$!
	run "$label" "${SM[@]}" FAKE_GPU_STATE="$dir/gpu" CUDA_DEVICE_SM_LIMIT=50 \
		TEST_NEIGHBOUR_UTIL=40 FAKE_HOST_PROC=/proc/self/fd/9 \
		CUDA_DEVICE_MEMORY_SHARED_CACHE="$dir/shared/vgpu.cache" "$@" \
		unshare -p -f --mount-proc timeout 60 "$T/test_sm" measured_beside_a_neighbour 9</proc
	if ! wait $neighbour; then
		echo "FAIL $label: the neighbour"
		sed 's/^/    /' "$dir/neighbour.out"
		failed=$((failed + 1))
	fi
}

TEST_ARCH=${TEST_ARCH:-host}
# Under qemu-user (TEST_ARCH=arm64) two emulation gaps fail cases for qemu's reasons, not ours:
# they are skipped there, each with a printed reason, and run everywhere else.
ROBUST="set_robust_list is ENOSYS, so a robust mutex whose holder was killed is never recovered"
START="qemu's /proc/self/stat start time differs by a few ticks from the kernel's /proc/PID/stat, so another process's thorough sweep takes a live process for a reused pid"
HOSTPID="qemu's /proc/self/stat start time differs by a few ticks from the kernel's /proc/PID/stat, so the agent's lookup by (pid, start time) misses the worker"
declare -A QEMU_SKIP=(
	["unit_region_lock: a_lock_holder_killed_by_sigkill_does_not_deadlock"]=$ROBUST
	["unit_region_lock: refusals_are_counted_per_device_for_every_process"]=$START
	["test_region: kill9_at_any_instruction_neither_deadlocks_nor_leaks"]=$ROBUST
	["test_region: processes_share_one_limit"]=$START
	["test_sm[50% beside a 40% neighbour, host-pids file]"]=$HOSTPID
	["test_sm[50% beside a 40% neighbour, host-pids file v2]"]=$HOSTPID
	["test_bypass: a_private_region_file_escapes_unless_the_limits_file_names_the_region"]=$START
)
skipped=0

skipped_here() { # skipped_here KEY: true (and says why) when KEY is a case qemu-user cannot run
	[ "$TEST_ARCH" = arm64 ] && [ -n "${QEMU_SKIP[$1]:-}" ] || return 1
	echo "skip under qemu-user: $1: ${QEMU_SKIP[$1]}"
	skipped=$((skipped + 1))
}

pick() { # pick BINARY CASE...: CASES = those CASEs not skipped here
	local bin=$1 c
	shift
	CASES=()
	for c; do skipped_here "$bin: $c" || CASES+=("$c"); done
}

all_cases() { # every CASE(...) of tests/BINARY.c
	sed -n 's/^[[:space:]]*CASE(\([a-z0-9_]*\)),$/\1/p' "$HERE/$1.c"
}

# test_memory's cases but the reordered one (run alone, below), for every run of the whole file
MEMORY_CASES=$(all_cases test_memory | grep -v reordered)
VARIANTS="plain san"
[ "$TEST_ARCH" = host ] || VARIANTS=plain # no ASan runtime for the cross build
for variant in $VARIANTS; do
	if [ $variant = plain ]; then
		T=$B/tests
		SUFFIX=
		PRE=$B/libvgpu.so
		check "exports_match_symbol_table" exports_match_table "$B/libvgpu.so"
		check "modules_form_no_circle" modules_form_no_circle
		check "libvgpu_needs_at_most_glibc_2.28" glibc_2_28_is_enough
		check "mock_driver_is_a_driver_install" mock_driver_is_a_driver_install
	else
		T=$B/tests-san
		SUFFIX=[san]
		PRE="$(gcc -print-file-name=libasan.so) $B/asan/libvgpu.so"
		check "exports_match_symbol_table[asan library]" exports_match_table "$B/asan/libvgpu.so"
	fi
	SANENV=(ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
	FAKE=(LD_LIBRARY_PATH=$B/fake "LD_PRELOAD=$PRE" "${SANENV[@]}")
	LIM=(CUDA_DEVICE_MEMORY_LIMIT=1Gi)

	run unit_config "${SANENV[@]}" "$T/unit_config"
	run test_hooks "${FAKE[@]}" "${LIM[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		timeout 60 "$T/test_hooks" direct_calls_are_interposed \
		dlsym_on_driver_handle_gives_our_wrappers get_proc_address_honours_version_and_flags \
		allocation_through_get_proc_address_is_accounted threads_allocate_concurrently
	run test_hooks "${FAKE[@]}" "${LIM[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		FAKE_CUDA_PROC_INTERNAL=1 timeout 60 "$T/test_hooks" internal_entry_points_are_still_wrapped
	run test_hooks LD_LIBRARY_PATH="$B/fake-old" "LD_PRELOAD=$PRE" "${SANENV[@]}" "${LIM[@]}" \
		CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		timeout 60 "$T/test_hooks" missing_real_symbols_report_not_supported
	run test_memory "${FAKE[@]}" "${LIM[@]}" CUDA_DEVICE_MEMORY_LIMIT_1=256m FAKE_CUDA_DEVICES=2 \
		CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" timeout 60 "$T/test_memory" \
		$MEMORY_CASES
	if [ $variant = plain ] && [ -n "$MOCK_LIB" ]; then # the same, over the stand-in driver
		run "test_memory[mock-driver]" LD_LIBRARY_PATH="$(mock_driver_links)" "LD_PRELOAD=$PRE" \
			"${LIM[@]}" CUDA_DEVICE_MEMORY_LIMIT_1=256m FAKE_CUDA_DEVICES=2 \
			CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" timeout 60 "$T/test_memory" \
			$MEMORY_CASES
		run "test_hooks[mock-driver]" LD_LIBRARY_PATH="$(mock_driver_links)" "LD_PRELOAD=$PRE" \
			"${LIM[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" timeout 60 "$T/test_hooks" \
			direct_calls_are_interposed dlsym_on_driver_handle_gives_our_wrappers \
			get_proc_address_honours_version_and_flags allocation_through_get_proc_address_is_accounted
	fi
	run "test_memory[CUDA_VISIBLE_DEVICES=1,0]" "${FAKE[@]}" FAKE_CUDA_DEVICES=2 \
		CUDA_VISIBLE_DEVICES=1,0 CUDA_DEVICE_MEMORY_LIMIT_0=256m CUDA_DEVICE_MEMORY_LIMIT_1=1Gi \
		CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" timeout 60 "$T/test_memory" \
		reordered_devices_keep_their_limits
	run test_fail_closed "${FAKE[@]}" CUDA_DEVICE_MEMORY_LIMIT=4GX \
		'TEST_EXPECT_MSG=CUDA_DEVICE_MEMORY_LIMIT="4GX": unknown unit' \
		CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		timeout 60 "$T/test_fail_closed" gpu_work_is_refused_with_a_message
	run test_fail_closed "${FAKE[@]}" CUDA_DEVICE_SM_LIMIT_0=150 \
		'TEST_EXPECT_MSG=CUDA_DEVICE_SM_LIMIT_0="150": percentage above 100' \
		CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		timeout 60 "$T/test_fail_closed" gpu_work_is_refused_with_a_message
	head -c 100 /dev/zero >"$TMP/old-region"
	# version 1's header (magic "VGPU", version 1, size 230,464) and size, the rest zero
	{ printf 'VGPU\001\000\000\000\100\204\003\000\000\000\000\000'; head -c $((230464 - 16)) /dev/zero; } \
		>"$TMP/v1-region"
	run test_fail_closed "${FAKE[@]}" "${LIM[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/old-region" \
		"TEST_EXPECT_MSG=shared region $TMP/old-region has 100 bytes" \
		timeout 60 "$T/test_fail_closed" gpu_work_is_refused_with_a_message
	run test_fail_closed "${FAKE[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/old-region" \
		timeout 60 "$T/test_fail_closed" without_limits_an_unusable_region_is_not_fatal
	# a version-1 region (libvgpu before version 2) is refused, naming both versions
	run test_fail_closed "${FAKE[@]}" "${LIM[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/v1-region" \
		"TEST_EXPECT_MSG=shared region $TMP/v1-region is version 1 (230464 bytes), this libvgpu needs version 2 (230488 bytes)" \
		timeout 60 "$T/test_fail_closed" gpu_work_is_refused_with_a_message
	pick unit_region_lock $(all_cases unit_region_lock)
	run unit_region_lock "${SANENV[@]}" TEST_TMP="$TMP" timeout 120 "$T/unit_region_lock" \
		"${CASES[@]}"
	pick test_region processes_share_one_limit kill9_does_not_leak_a_share \
		kill9_at_any_instruction_neither_deadlocks_nor_leaks \
		many_short_lived_processes_leave_nothing_behind \
		usage_above_a_smaller_limit_never_underflows \
		a_childs_free_of_its_parents_allocation_keeps_the_parents_charge
	run test_region "${FAKE[@]}" "${LIM[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		timeout 120 "$T/test_region" "${CASES[@]}"
	# SM shares: the fake device's measured busy time never goes above the share (+5 points) and
	# does not stop; side by side, 25 < 50 < 75 < unlimited. What holds on a busy machine too:
	# how close to the share it lands is the bench's (make -C native/vgpu bench).
	SM=("${FAKE[@]}" FAKE_CUDA_KERNEL_US=500)
	if [ $variant = plain ]; then
		for sms in 16 188; do
			run "test_sm[25/50/75%/unlimited side by side, $sms SMs]" "${SM[@]}" \
				FAKE_CUDA_SM_COUNT=$sms CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
				timeout 60 "$T/test_sm" smaller_shares_get_less_side_by_side
		done
		# NVML averaging over a whole second (as real drivers may): slower, still held
		run "test_sm[50%, 1 s NVML window]" "${SM[@]}" FAKE_NVML_WINDOW_MS=1000 \
			CUDA_DEVICE_SM_LIMIT=50 TEST_EXPECT_UTIL=50 TEST_WARMUP_S=4 TEST_MEASURE_S=3 \
			CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" timeout 60 "$T/test_sm" \
			device_utilisation_follows_the_limit
		run "test_sm[2 processes, 50%]" "${SM[@]}" CUDA_DEVICE_SM_LIMIT=50 TEST_EXPECT_UTIL=50 \
			FAKE_GPU_STATE="$(region).gpu" CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
			timeout 60 "$T/test_sm" processes_share_one_sm_limit
		for kind in ptsz ex coop graph; do
			run "test_sm[$kind]" "${SM[@]}" CUDA_DEVICE_SM_LIMIT_0=50 TEST_EXPECT_UTIL=50 \
				TEST_LAUNCH=$kind CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
				timeout 60 "$T/test_sm" device_utilisation_follows_the_limit
		done
		# in a pid namespace of our own (as in a container) the host pid is unknown
		if unshare -p -f --mount-proc true 2>/dev/null; then
			run "unit_region_lock[pid namespace, host /proc]" TEST_TMP="$TMP" \
				unshare -p -f "$T/unit_region_lock" host_pid_comes_from_nstgid
			run "unit_region_lock[pid namespace, own /proc]" TEST_TMP="$TMP" \
				unshare -p -f --mount-proc "$T/unit_region_lock" host_pid_comes_from_nstgid
			run "test_sm[50%, pid namespace]" "${SM[@]}" CUDA_DEVICE_SM_LIMIT=50 \
				TEST_EXPECT_UTIL=50 CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
				unshare -p -f --mount-proc timeout 60 "$T/test_sm" device_utilisation_follows_the_limit
		else
			echo "skip pid-namespace cases (unshare -p needs privileges here)"
		fi
		# beside a neighbour (another container's process on the shared device, not in the
		# region, no libvgpu) that keeps the device 40% busy, a worker limited to 50% whose host
		# pid libvgpu cannot tell (pid namespace with its own /proc; the fake driver still
		# knows it through the host's /proc on fd 9) is measured by the device: ~10% for itself.
		# With the node agent's host-pids file (written by the test as the agent would) it is
		# measured by its own host pid and gets its 50%; a file of another version is ignored.
		# (at most 20% without the file; with it, its share and clearly more than 20%)
		if unshare -p -f --mount-proc true 2>/dev/null; then
			beside_a_neighbour "test_sm[50% beside a 40% neighbour, no host-pids file]" \
				TEST_EXPECT_UTIL=10 TEST_TOLERANCE=10 TEST_MIN_UTIL=1
			skipped_here "test_sm[50% beside a 40% neighbour, host-pids file]" ||
				beside_a_neighbour "test_sm[50% beside a 40% neighbour, host-pids file]" \
					TEST_EXPECT_UTIL=50 TEST_MIN_UTIL=25 TEST_HOST_PIDS_FILE=1
			skipped_here "test_sm[50% beside a 40% neighbour, host-pids file v2]" ||
				beside_a_neighbour "test_sm[50% beside a 40% neighbour, host-pids file v2]" \
					TEST_EXPECT_UTIL=10 TEST_TOLERANCE=10 TEST_MIN_UTIL=1 \
					TEST_HOST_PIDS_FILE=1 "TEST_HOST_PIDS_HEADER=vgpu-host-pids 2"
		fi
		# throttling follows what NVML measures, not what the library expects: a device NVML
		# reports 90% busy (a neighbour, say) holds a 50% share back to almost nothing
		run "test_sm[NVML says 90%, limit 50%: held back]" "${SM[@]}" FAKE_NVML_UTIL=90 \
			CUDA_DEVICE_SM_LIMIT=50 TEST_EXPECT_UTIL=0 TEST_TOLERANCE=15 \
			CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" timeout 60 "$T/test_sm" \
			device_utilisation_follows_the_limit
		run "test_sm[device utilisation fallback]" "${SM[@]}" FAKE_NVML_NO_PROCESS_UTIL=1 \
			CUDA_DEVICE_SM_LIMIT=40 TEST_EXPECT_UTIL=40 \
			CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" timeout 60 "$T/test_sm" device_utilisation_follows_the_limit
		# a real queue's depth (1024), so a busy 2-core box cannot starve the fake device
		for lim in unset 0 100; do
			run "test_sm[limit $lim: no throttling]" "${SM[@]}" \
				$([ $lim = unset ] || echo CUDA_DEVICE_SM_LIMIT=$lim) TEST_EXPECT_UTIL=100 \
				FAKE_CUDA_QUEUE=1024 CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
				timeout 60 "$T/test_sm" device_utilisation_follows_the_limit
		done
	else
		run "test_sm[50%]" "${SM[@]}" CUDA_DEVICE_SM_LIMIT=50 TEST_EXPECT_UTIL=50 \
			CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" timeout 60 "$T/test_sm" device_utilisation_follows_the_limit
	fi
	run "test_sm[fork after the watcher started]" "${SM[@]}" CUDA_DEVICE_SM_LIMIT=50 \
		CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" timeout 60 "$T/test_sm" \
		a_child_forked_after_the_watcher_started_starts_its_own
	# task priority: containers as processes sharing a board dir (each case starts its own)
	run test_priority "${FAKE[@]}" FAKE_CUDA_KERNEL_US=100 TEST_TMP="$TMP" \
		timeout 240 "$T/test_priority"
	# users of one container share its region in a sticky dir under fs.protected_regular
	run test_region_users "${FAKE[@]}" "${LIM[@]}" TEST_TMP="$TMP" timeout 60 "$T/test_region_users"
	# the node agent's limits file at the compiled-in path (a private mount namespace, as root)
	run test_limits_file "${FAKE[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" TEST_TMP="$TMP" \
		timeout 120 "$T/test_limits_file"
	# what an earlier release left on a node (tests/fixtures/ondisk/<commit>): its limits file,
	# region and board taken as written; a newer version of either file fails closed
	for fixture in "$HERE"/../../../tests/fixtures/ondisk/*/; do
		run "test_ondisk[$(basename "$fixture")]" "${FAKE[@]}" TEST_TMP="$TMP" \
			ONDISK_FIXTURE="$fixture" CUDA_TASK_PRIORITY=0 \
			CUDA_TASK_PRIORITY_DIR=/usr/local/vgpu/priority timeout 120 "$T/test_ondisk"
	done
	# what LD_PRELOAD enforcement cannot stop (SECURITY.md): these cases pass by escaping
	pick test_bypass $(all_cases test_bypass)
	run test_bypass "${FAKE[@]}" "${LIM[@]}" CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		TEST_TMP="$TMP" timeout 120 "$T/test_bypass" "${CASES[@]}"
	run test_dlsym "${FAKE[@]}" TEST_LIB_DIR="$B/testlib" \
		CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" timeout 60 "$T/test_dlsym"
done

# The priority cases can fail: without libvgpu nothing holds the low-priority task
priority_cases_fail_without_the_library() {
	! LD_LIBRARY_PATH=$B/fake TEST_TMP=$TMP FAKE_CUDA_KERNEL_US=100 timeout 120 \
		"$B/tests/test_priority" low_waits_while_high_launches_and_resumes_after_the_hold \
		kill9_of_the_high_task_lets_the_low_one_resume every_launch_kind_stamps_and_waits \
		>"$TMP/prio-none.out" 2>&1 || return 1
	cat "$TMP/prio-none.out"
	[ "$(grep -c '^FAIL ' "$TMP/prio-none.out")" -eq 3 ]
}
check "test_priority_fails_without_the_library" priority_cases_fail_without_the_library

# vgpu-region prints what a process left in the region: its device, its slot, its usage
region_dump_shows_usage() {
	local r pid
	r=$(region)
	LD_LIBRARY_PATH=$B/fake LD_PRELOAD=$B/libvgpu.so CUDA_DEVICE_MEMORY_LIMIT=1Gi \
		CUDA_DEVICE_MEMORY_SHARED_CACHE="$r" FAKE_CUDA_KERNEL_US=1000 \
		"$B/gpu_check" hold $((512 << 20)) 1 >"$TMP/hold" 2>&1 &
	pid=$!
	for _ in $(seq 100); do grep -q held "$TMP/hold" && break; sleep 0.05; done
	"$B/vgpu-region" "$r" | tee "$TMP/dump"
	wait $pid || return 1
	"$B/vgpu-region" "$r" | tee "$TMP/dump2"
	# 512 MiB + gpu_check's 1056 × 256 × 4-byte output buffer, charged to the live process
	grep -q "^region $r version 2 size 230488 " "$TMP/dump" &&
		grep -q "^device 0 uuid GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae00 mem_limit 1073741824 sm_limit 0 used 537952256$" \
			"$TMP/dump" &&
		grep -Eq "^slot 0 pid $pid host_pid [0-9]+ priority 1 .* used0 537952256$" "$TMP/dump" &&
		grep -q "used 0$" "$TMP/dump2" && ! grep -q "^slot" "$TMP/dump2" && # handed back at exit
		! "$B/vgpu-region" "$TMP/old-region" && ! "$B/vgpu-region" "$TMP/v1-region" 2>"$TMP/v1-dump" &&
		grep -q "a version 1 region (230464 bytes); this vgpu-region reads version 2" "$TMP/v1-dump"
}
check "vgpu_region_dump" region_dump_shows_usage

# The CUDA runtime's own path: it finds cuGetProcAddress_v2 by dlsym on the driver's handle and
# must be handed our wrapper for every entry point we account or throttle, with the right
# stream flavour. Needs libcudart.so.12 (make -C native/vgpu cudart fetches it from PyPI).
CUDART=${LIBCUDART:-$B/cudart/libcudart.so.12}
cudart_lookups_are_wrapped() {
	local log=$TMP/cudart.log
	LD_LIBRARY_PATH=$B/fake LD_PRELOAD=$B/libvgpu.so LIBVGPU_LOG_LEVEL=debug \
		CUDA_DEVICE_MEMORY_LIMIT=1Gi CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		"$B/tests/cudart_probe" "$CUDART" >"$log" 2>&1 || return 1
	for want in "cuMemAlloc, [0-9]+, 0" "cuMemFree, [0-9]+, 0" "cuMemGetInfo, [0-9]+, 0" \
		"cuMemAllocAsync, [0-9]+, 2" "cuMemFreeAsync, [0-9]+, 2" "cuLaunchKernel, [0-9]+, 0" \
		"cuLaunchKernel, [0-9]+, 2" "cuLaunchKernelEx, [0-9]+, 2" "cuGraphLaunch, [0-9]+, 2" \
		"cuGetProcAddress, 12000, 0" "cuMemPoolCreate, [0-9]+, 0" \
		"cuMemPoolDestroy, [0-9]+, 0" "cuGraphAddMemAllocNode, [0-9]+, 0" \
		"cuGraphAddMemFreeNode, [0-9]+, 0" "cuGraphAddNode, 12030, 0" \
		"cuGraphInstantiateWithParams, [0-9]+, 2" "cuGraphExecDestroy, [0-9]+, 0" \
		"cuGraphDestroy, [0-9]+, 0"; do
		grep -Eq "cuGetProcAddress_v2\($want\) = 0 \(wrapped\)" "$log" ||
			{ echo "not wrapped: $want"; grep -E "\($want\)" "$log"; return 1; }
	done
	grep -c "(wrapped)" "$log"
}
if [ "$TEST_ARCH" != host ]; then
	echo "skip cudart_lookups_are_wrapped and the GPU script's dry runs ($TEST_ARCH: they use the host's build)"
elif [ -e "$CUDART" ]; then
	check "cudart_lookups_are_wrapped" cudart_lookups_are_wrapped
else
	echo "skip cudart_lookups_are_wrapped (no libcudart.so.12: make -C native/vgpu cudart)"
fi

# The GPU script itself, dry run over the fake driver (it cannot meet a GPU here): it must run
# to its summary, pass the deterministic memory checks and the priority hold (the low task is
# blocked outright) and report every timing check. Timing accuracy on the fake is test_sm's and
# test_priority's job (a loaded 2-core box makes 2-second windows noisy).
gpu_script_dry_run() {
	local out=$TMP/gpu.out
	GPU_CHECK_FAKE=1 GPU_CHECK_SECONDS=2 "$HERE/gpu/run.sh" >"$out" 2>&1
	cat "$out"
	grep -Eq '^[0-9]+ passed, [0-9]+ failed$' "$out" || return 1
	for name in cuda_and_nvml_see_the_4Gi_limit over_the_limit_is_cuda_error_out_of_memory \
		the_neighbour_keeps_running two_processes_share_one_limit \
		priority_0_holds_a_priority_1_neighbour; do
		grep -q "^ok   $name" "$out" || return 1
	done
	for name in sm_limit_25_gives sm_limit_50_gives sm_limit_75_gives \
		no_limit_busy_kernel_overhead no_limit_launch_overhead priority_1_resumes_after_the_hold; do
		grep -Eq "^(ok  |FAIL) $name" "$out" || return 1
	done
}
[ "$TEST_ARCH" != host ] || check "gpu_script_dry_run_over_fake_driver" gpu_script_dry_run

# ... and it fails when the library does nothing (here: a preload that does not exist): memory
# is not limited and the priority-1 task shares the fake device with the priority-0 one (~50%)
gpu_script_catches_a_missing_library() {
	local out=$TMP/gpu-none.out
	! GPU_CHECK_FAKE=1 GPU_CHECK_SECONDS=2 GPU_CHECK_ONLY=memory,priority \
		GPU_CHECK_LIB=$TMP/no-such-libvgpu.so "$HERE/gpu/run.sh" >"$out" 2>&1 || return 1
	cat "$out"
	grep -q "^FAIL cuda_and_nvml_see_the_4Gi_limit" "$out" &&
		grep -q "^FAIL over_the_limit_is_cuda_error_out_of_memory" "$out" &&
		grep -q "^FAIL two_processes_share_one_limit" "$out" &&
		grep -q "^FAIL priority_0_holds_a_priority_1_neighbour" "$out" && ! grep -q "sm_limit" "$out"
}
[ "$TEST_ARCH" != host ] || check "gpu_script_catches_a_missing_library" gpu_script_catches_a_missing_library

[ "$skipped" -eq 0 ] || echo "$skipped cases skipped under qemu-user (the reasons above)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
