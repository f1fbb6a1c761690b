#!/usr/bin/env bash
# libvgpu benchmarks over the fake driver, printed as tables, with and without the library.
# usage: bench/vgpu/run.sh [BUILD_DIR]   (make -C native/vgpu bench builds and calls it)
# The fake driver's own cost is in every number; the "overhead" columns are the difference.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
B=$(cd "${1:-$HERE/../../native/vgpu/build}" && pwd)
TMP=$(mktemp -d /tmp/libvgpu-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export LD_LIBRARY_PATH=$B/fake
LIB=$B/libvgpu.so
N_START=${N_START:-300}
region() { echo "$TMP/region.$RANDOM$RANDOM"; }

echo "## libvgpu per-call cost (ns/call: best of 3 interleaved runs, each the median of 9 batches;"
echo "## fake driver with address-only allocations, so the fake's own cost is small)"
: >"$TMP/none"
: >"$TMP/lib"
: >"$TMP/lim"
: >"$TMP/prio1"
: >"$TMP/prio0"
mkdir -m 1777 "$TMP/boards"
for _ in 1 2 3; do # interleaved, so a busy moment of the machine hits every column alike
	FAKE_CUDA_FAST_ALLOC=1 "$B/bench/bench_calls" >>"$TMP/none"
	FAKE_CUDA_FAST_ALLOC=1 LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_SHARED_CACHE=$(region) \
		"$B/bench/bench_calls" >>"$TMP/lib"
	FAKE_CUDA_FAST_ALLOC=1 LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_LIMIT=8Gi \
		CUDA_DEVICE_MEMORY_SHARED_CACHE=$(region) "$B/bench/bench_calls" >>"$TMP/lim"
	for p in 1 0; do # a priority board, no other task on the GPU: priority 1 reads it, 0 stamps it
		FAKE_CUDA_FAST_ALLOC=1 LD_PRELOAD=$LIB CUDA_TASK_PRIORITY_DIR=$TMP/boards \
			CUDA_TASK_PRIORITY=$p CUDA_DEVICE_MEMORY_SHARED_CACHE=$(region) \
			"$B/bench/bench_calls" | grep '^cuLaunchKernel ' >>"$TMP/prio$p"
	done
done
best() { awk '!($1 in m) || $2 < m[$1] {m[$1] = $2} END {for (k in m) print k, m[k]}' "$1" | sort; }
printf "%-40s %12s %12s %12s %14s\n" "call" "without" "libvgpu" "with limit" "overhead(lim)"
join <(best "$TMP/none") <(best "$TMP/lib") | join - <(best "$TMP/lim") | while read -r op a b c; do
	printf "%-40s %12.1f %12.1f %12.1f %14.1f\n" "$op" "$a" "$b" "$c" "$(echo "$c - $a" | bc -l)"
done

echo
echo "## cuLaunchKernel with a priority board (CUDA_TASK_PRIORITY_DIR set, no priority-0 task"
echo "## elsewhere): priority 1 reads the board per launch, priority 0 stamps it (once per ms)"
printf "%-40s %12s %12s %12s\n" "call" "without" "priority 1" "priority 0"
join <(best "$TMP/none") <(best "$TMP/prio1") | join - <(best "$TMP/prio0") | while read -r op a b c; do
	printf "%-40s %12.1f %12.1f %12.1f\n" "$op" "$a" "$b" "$c"
done

echo
N_INIT=${N_INIT:-200}
echo "## first-call initialisation (µs, $N_INIT fresh processes each, each with a new region file;"
echo "## HAMi-core: 84 ms; target p99 < 1 ms)"
stats() { # median and p99 of column $1 of file $2, ns → µs
	sort -n -k"$1" "$2" | awk -v c="$1" '{v[NR]=$c} END {printf "%10.1f %10.1f", v[int((NR+1)/2)]/1000, v[int(NR*0.99+0.999)]/1000}'
}
for cfg in without libvgpu; do
	: >"$TMP/init.$cfg"
	for _ in $(seq "$N_INIT"); do
		if [ $cfg = without ]; then
			"$B/bench/bench_init" >>"$TMP/init.$cfg"
		else
			LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_LIMIT=8Gi CUDA_DEVICE_MEMORY_SHARED_CACHE=$(region) \
				"$B/bench/bench_init" >>"$TMP/init.$cfg"
		fi
	done
done
printf "%-28s %10s %10s %10s %10s\n" "" "without" "" "libvgpu" ""
printf "%-28s %10s %10s %10s %10s\n" "" "p50" "p99" "p50" "p99"
printf "%-28s %s %s\n" "first cuInit" "$(stats 1 "$TMP/init.without")" "$(stats 1 "$TMP/init.libvgpu")"
printf "%-28s %s %s\n" "first cuMemAlloc_v2" "$(stats 2 "$TMP/init.without")" "$(stats 2 "$TMP/init.libvgpu")"

echo
echo "## memory-limit accuracy (limit 4Gi; fill with chunks, then halves down to 1 MiB; HAMi-core: 91%)"
echo "## 'asked' counts the bytes the program asked for; 'device' the driver's pages (2 MiB) they"
echo "## occupy: a chunk that is not a whole number of pages wastes its last page's tail with or"
echo "## without libvgpu, so 'device' is what the limit lets a program use. 'bare 4Gi card': the"
echo "## same program without libvgpu on a card of 4 GiB, the most any limit could give."
printf "%-16s %14s %12s %12s %16s %12s\n" "first chunk" "asked bytes" "asked/limit" "device/limit" "device over limit" "bare 4Gi card"
for chunk in 1048576 2097152 67108864 100000000 1073741824 3000000000; do
	read -r usable device limit < <(LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_LIMIT=4Gi \
		CUDA_DEVICE_MEMORY_SHARED_CACHE=$(region) "$B/bench/bench_accuracy" $chunk)
	over=$((device > limit ? device - limit : 0))
	read -r bare _ _ < <(FAKE_CUDA_MEMORY=$limit "$B/bench/bench_accuracy" $chunk)
	printf "%-16s %14d %11.3f%% %11.3f%% %16d %11.3f%%\n" "$chunk" "$usable" \
		"$(echo "100 * $usable / $limit" | bc -l)" "$(echo "100 * $device / $limit" | bc -l)" "$over" \
		"$(echo "100 * $bare / $limit" | bc -l)"
done

echo
echo "## $N_START processes of one container starting at once (ms from start to first allocation; HAMi-core: p99 227 s at 300)"
printf "%-12s %10s %10s %10s %10s\n" "" "p50" "p99" "max" "failures"
read -r p50 p99 mx fl < <("$B/bench/bench_start" "$N_START")
printf "%-12s %10s %10s %10s %10s\n" "without" "$p50" "$p99" "$mx" "$fl"
read -r p50 p99 mx fl < <(LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_LIMIT=8Gi \
	CUDA_DEVICE_MEMORY_SHARED_CACHE=$(region) "$B/bench/bench_start" "$N_START")
printf "%-12s %10s %10s %10s %10s\n" "libvgpu" "$p50" "$p99" "$mx" "$fl"

echo
echo "## SM share accuracy (fake device busy %, kernels of 500 µs, 2 s after 1 s of warm-up;"
echo "## range over 3 runs; the tests only assert 'never above the share + 5' and the ordering)"
echo "## load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-34s %8s %22s\n" "case" "share" "measured (min..max)"
sm_util() { # sm_util VAR=VALUE...: one run's busy percent
	env LD_PRELOAD="$LIB" FAKE_CUDA_KERNEL_US=500 CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" "$@" \
		"$B/tests/test_sm" device_utilisation_follows_the_limit 2>/dev/null | awk '/^# util/ {print $4}'
}
sm_row() { # sm_row LABEL SHARE VAR=VALUE...
	local label=$1 share=$2 runs=""
	shift 2
	for _ in 1 2 3; do runs="$runs $(sm_util CUDA_DEVICE_SM_LIMIT="$share" TEST_EXPECT_UTIL="$share" "$@")"; done
	printf "%-34s %7s%% %22s\n" "$label" "$share" "$(echo $runs | tr ' ' '\n' | sort -n | sed -n '1p;$p' | paste -sd' ' | awk '{printf "%.1f..%.1f", $1, $2}')"
}
for sms in 16 188; do
	for share in 25 50 75; do
		sm_row "$sms SMs" "$share" FAKE_CUDA_SM_COUNT=$sms
	done
done
sm_row "1 s NVML window (warm-up 4 s)" 50 FAKE_NVML_WINDOW_MS=1000 TEST_WARMUP_S=4 TEST_MEASURE_S=3
sm_row "graph launches" 50 TEST_LAUNCH=graph
