#!/usr/bin/env bash
# libvgpu on a real NVIDIA GPU (H100/H200 class): one script, about 6 minutes, well inside 10.
#
#   native/vgpu/tests/gpu/run.sh            from anywhere in the repository, on the GPU machine
#   GPU_CHECK_FAKE=1 native/vgpu/tests/gpu/run.sh   dry run of this script over the fake driver
#
# Needs: gcc + make (builds libvgpu.so and gpu_check, a driver-API program with a PTX kernel, so
# no CUDA toolkit is needed), libcuda.so.1 + libnvidia-ml.so.1 of the driver. PyTorch is used
# for the matmul checks when `python3 -c "import torch"` works (or PYTHON=/path/to/python);
# without it those checks are reported as skipped, not passed.
# Checks: the limited total is what CUDA/NVML/PyTorch see; past the limit allocation fails with
# OOM while a neighbour keeps running; two processes share one limit; stream-ordered and pool
# allocations are charged to their stream's or pool's device with no context current; SM limits 25/50/75% give
# throughput within ±10% of target; with no limits the overhead is under 2% (busy kernels,
# launch microbenchmark, matmul loop); a priority-0 task holds a priority-1 task of another
# container on the same GPU (<= 10% of its rate alone) and lets it resume after the 200 ms HOLD
# (>= 80%). Results: bench/results/vgpu-gpu-<UTC time>.txt.
# GPU_CHECK_ONLY=memory,sm,overhead,priority runs only those groups (to rerun part in a budget);
# GPU_CHECK_LIB=path tests another build of the library.
# SM runs also leave the controller's trace in bench/results/vgpu-gpu-<time>-sm<limit>.log, the
# priority run the low task's libvgpu log (its first hold) in …-priority.log.
# Last line: "N passed, N failed"; exit status 1 if anything failed.
# Through the project's device tool (files come back only from $OUT):
#   native/vgpu/tests/gpu/run.sh; rc=$?; cp bench/results/vgpu-gpu-* "$OUT"/; exit $rc
set -u
ROOT=$(cd "$(dirname "$0")/../../../.." && pwd)
V=$ROOT/native/vgpu
B=$V/build
SECONDS_PER_RUN=${GPU_CHECK_SECONDS:-10}
PY=${PYTHON:-python3}
TMP=$(mktemp -d /tmp/libvgpu-gpu.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
RESULTS=$ROOT/bench/results
[ -z "${GPU_CHECK_FAKE:-}" ] || RESULTS=$TMP/results # a dry run leaves nothing behind
mkdir -p "$RESULTS"
REPORT=$RESULTS/vgpu-gpu-$(date -u +%Y%m%dT%H%M%SZ).txt
passed=0
failed=0
skipped=0

log() { echo "$*" | tee -a "$REPORT"; }
pass() { log "ok   $1${2:+  ($2)}"; passed=$((passed + 1)); }
fail() { log "FAIL $1${2:+  ($2)}"; failed=$((failed + 1)); }
skip() { log "skip $1${2:+  ($2)}"; skipped=$((skipped + 1)); }
verdict() { if [ "$2" = 1 ]; then pass "$1" "$3"; else fail "$1" "$3"; fi; } # NAME 0|1 DETAIL
within() { awk -v v="$1" -v t="$2" -v tol="$3" 'BEGIN { exit !(v >= t * (1 - tol) && v <= t * (1 + tol)) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", (b > 0 ? a / b : 0) }'; }

if ! make -s -C "$V" build/libvgpu.so build/gpu_check >/dev/null; then
	# no compiler here: use a build carried over from another machine, if there is one
	[ -x "$B/gpu_check" ] && [ -f "$B/libvgpu.so" ] || { echo "build failed"; exit 1; }
	echo "# make failed; using the existing $B/libvgpu.so and $B/gpu_check"
fi
LIB=${GPU_CHECK_LIB:-$B/libvgpu.so}
CHECK=$B/gpu_check
ONLY=${GPU_CHECK_ONLY:-memory,sm,overhead,priority}
group() { [[ ",$ONLY," == *",$1,"* ]]; }
if [ -n "${GPU_CHECK_FAKE:-}" ]; then
	export LD_LIBRARY_PATH=$B/fake FAKE_CUDA_KERNEL_US=2000 FAKE_CUDA_MEMORY=80G
fi
GiB=$((1 << 30))
MiB=$((1 << 20))
{
	echo "# libvgpu GPU checks, $(date -u +%FT%TZ), $(hostname)"
	echo "# commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
	nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/# gpu: /'
} | tee "$REPORT"

# with: run with libvgpu preloaded and a fresh or given shared region
region() { echo "$TMP/region.$RANDOM$RANDOM"; }
with() { env LD_PRELOAD="$LIB" "$@"; }
have_torch=0
if [ -z "${GPU_CHECK_FAKE:-}" ] && "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
	have_torch=1
fi

cat >"$TMP/mm.py" <<'PYEOF'
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
seconds = float(sys.argv[1])
for _ in range(20):
    a @ b
torch.cuda.synchronize()
end = time.time() + 5
while time.time() < end:
    a @ b
torch.cuda.synchronize()
n, t0 = 0, time.time()
while time.time() - t0 < seconds:
    for _ in range(10):
        a @ b
    n += 10
    torch.cuda.synchronize()
print(f"{n * 2 * 8192**3 / (time.time() - t0) / 1e12:.2f}")
PYEOF

if group memory; then
# 1. the limited total is what everyone sees
read -r _ ct _ cf _ dt _ nt _ nu < <(with CUDA_DEVICE_MEMORY_LIMIT=4Gi \
	CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" "$CHECK" info)
verdict "cuda_and_nvml_see_the_4Gi_limit" \
	"$([ "$ct" = $((4 * GiB)) ] && [ "$dt" = $((4 * GiB)) ] && [ "$nt" = $((4 * GiB)) ] && echo 1)" \
	"cuMemGetInfo total $ct free $cf, cuDeviceTotalMem $dt, NVML total $nt used $nu"
if [ $have_torch = 1 ]; then
	tt=$(with CUDA_DEVICE_MEMORY_LIMIT=4Gi CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" "$PY" -c "
import torch
free, total = torch.cuda.mem_get_info()
print(total, torch.cuda.get_device_properties(0).total_memory)")
	read -r t1 t2 <<<"$tt"
	verdict "pytorch_sees_the_4Gi_limit" "$([ "$t1" = $((4 * GiB)) ] && [ "$t2" = $((4 * GiB)) ] && echo 1)" \
		"mem_get_info total $t1, device total_memory $t2"
else
	skip "pytorch_sees_the_4Gi_limit" "no PyTorch with CUDA"
fi

# 2. past the limit: OOM for the newcomer, the neighbour keeps running; 3. one shared limit
R=$(region)
with CUDA_DEVICE_MEMORY_LIMIT=4Gi CUDA_DEVICE_MEMORY_SHARED_CACHE="$R" \
	"$CHECK" hold $((3 * GiB)) $((have_torch ? 30 : 6)) >"$TMP/hold.out" 2>&1 &
holder=$!
for _ in $(seq 100); do grep -q held "$TMP/hold.out" && break; sleep 0.1; done
with CUDA_DEVICE_MEMORY_LIMIT=4Gi CUDA_DEVICE_MEMORY_SHARED_CACHE="$R" "$CHECK" alloc $((2 * GiB)) >/dev/null 2>&1
oom=$?
read -r _ _ _ sfree _ < <(with CUDA_DEVICE_MEMORY_LIMIT=4Gi CUDA_DEVICE_MEMORY_SHARED_CACHE="$R" "$CHECK" info)
with CUDA_DEVICE_MEMORY_LIMIT=4Gi CUDA_DEVICE_MEMORY_SHARED_CACHE="$R" "$CHECK" alloc $((512 * MiB)) >/dev/null 2>&1
small=$?
torch_oom=skip
if [ $have_torch = 1 ]; then
	with CUDA_DEVICE_MEMORY_LIMIT=4Gi CUDA_DEVICE_MEMORY_SHARED_CACHE="$R" "$PY" -c "
import sys, torch
try:
    torch.empty(2 << 30, dtype=torch.uint8, device='cuda')
except torch.cuda.OutOfMemoryError:
    sys.exit(0)
sys.exit(1)" 2>/dev/null && torch_oom=1 || torch_oom=0
fi
alive=$(kill -0 $holder 2>/dev/null && echo 1)
wait $holder
holder_rc=$?
verdict "over_the_limit_is_cuda_error_out_of_memory" "$([ $oom = 2 ] && echo 1)" "exit $oom (2 = OOM)"
verdict "the_neighbour_keeps_running" "$([ "$alive" = 1 ] && [ $holder_rc = 0 ] && echo 1)" \
	"holder alive during the refusal: ${alive:-0}, exit $holder_rc"
verdict "two_processes_share_one_limit" \
	"$([ "$sfree" -le $((1 * GiB)) ] && [ $small = 0 ] && echo 1)" \
	"second process sees free $sfree with 3 GiB held next door; 512 MiB alloc exit $small"
if [ $torch_oom = skip ]; then skip "pytorch_raises_OutOfMemoryError_past_the_limit" "no PyTorch"; else
	verdict "pytorch_raises_OutOfMemoryError_past_the_limit" "$torch_oom" ""; fi

# 4. stream-ordered memory is charged to the stream's or pool's device, context current or not
for how in stream pool; do
	with CUDA_DEVICE_MEMORY_LIMIT=4Gi CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		"$CHECK" async $((5 * GiB)) $how >/dev/null 2>&1
	over=$?
	with CUDA_DEVICE_MEMORY_LIMIT=4Gi CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		"$CHECK" async $((1 * GiB)) $how >/dev/null 2>&1
	under=$?
	if [ $under = 3 ]; then # this driver allocates nothing without a context: no escape to close
		skip "async_${how}_allocation_without_a_current_context_is_charged" \
			"the driver wants a current context"
		continue
	fi
	verdict "async_${how}_allocation_without_a_current_context_is_charged" \
		"$([ $over = 2 ] && [ $under = 0 ] && echo 1)" "5 GiB exit $over (2 = OOM), 1 GiB exit $under"
done

# 5. graph memory nodes (added, or captured from cuMemAllocAsync) are charged when made
for how in node capture; do
	with CUDA_DEVICE_MEMORY_LIMIT=4Gi CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		"$CHECK" graph $((5 * GiB)) $how >/dev/null 2>&1
	over=$?
	with CUDA_DEVICE_MEMORY_LIMIT=4Gi CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		"$CHECK" graph $((1 * GiB)) $how >/dev/null 2>&1
	under=$?
	verdict "graph_memory_${how}_past_the_limit_is_refused" \
		"$([ $over = 2 ] && [ $under = 0 ] && echo 1)" "5 GiB exit $over (2 = OOM), 1 GiB exit $under"
done

fi

if group sm; then
# 4. SM limits: throughput relative to the unthrottled run, within ±10% of the target
base=$(with CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" "$CHECK" throughput "$SECONDS_PER_RUN")
log "# busy-kernel throughput, unlimited: $base kernels/s"
for lim in 25 50 75; do
	# the controller's trace (one line per 100 ms tick) goes next to the results, for tuning
	t=$(with CUDA_DEVICE_SM_LIMIT=$lim CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" \
		LIBVGPU_LOG_LEVEL=debug "$CHECK" throughput "$SECONDS_PER_RUN" 2>"${REPORT%.txt}-sm$lim.log")
	r=$(ratio "$t" "$base")
	verdict "sm_limit_${lim}_gives_${lim}%_throughput" "$(within "$r" "0.$lim" 0.10 && echo 1)" \
		"$t kernels/s = $(awk -v r="$r" 'BEGIN{printf "%.1f", r*100}')% of unlimited"
done
if [ $have_torch = 1 ]; then
	mbase=$(with CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" "$PY" "$TMP/mm.py" "$SECONDS_PER_RUN")
	log "# matmul fp16 8192³, unlimited: $mbase TFLOPS"
	for lim in 25 50 75; do
		t=$(with CUDA_DEVICE_SM_LIMIT=$lim CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" "$PY" "$TMP/mm.py" "$SECONDS_PER_RUN")
		r=$(ratio "$t" "$mbase")
		verdict "sm_limit_${lim}_gives_${lim}%_matmul_throughput" "$(within "$r" "0.$lim" 0.10 && echo 1)" \
			"$t TFLOPS = $(awk -v r="$r" 'BEGIN{printf "%.1f", r*100}')% of unlimited"
	done
else
	skip "sm_limit_matmul_throughput" "no PyTorch"
fi

fi

if group overhead; then
# 5. no limits set: overhead under 2%
plain=$("$CHECK" throughput "$SECONDS_PER_RUN")
hooked=$(with CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" "$CHECK" throughput "$SECONDS_PER_RUN")
r=$(ratio "$hooked" "$plain")
verdict "no_limit_busy_kernel_overhead_under_2%" "$(awk -v r="$r" 'BEGIN{exit !(r >= 0.98)}' && echo 1)" \
	"$plain → $hooked kernels/s (×$r)"
lp=()
lh=()
for _ in 1 2 3; do # interleaved, median of three (empty kernels: the fake's take no time)
	lp+=("$(FAKE_CUDA_KERNEL_US=0 "$CHECK" launch 200000)")
	lh+=("$(FAKE_CUDA_KERNEL_US=0 with CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" "$CHECK" launch 200000)")
done
mp=$(printf "%s\n" "${lp[@]}" | sort -n | sed -n 2p)
mh=$(printf "%s\n" "${lh[@]}" | sort -n | sed -n 2p)
r=$(ratio "$mh" "$mp")
verdict "no_limit_launch_overhead_under_2%" "$(awk -v r="$r" 'BEGIN{exit !(r <= 1.02)}' && echo 1)" \
	"$mp → $mh ns/launch (×$r)"
if [ $have_torch = 1 ]; then
	mp=$("$PY" "$TMP/mm.py" "$SECONDS_PER_RUN")
	mh=$(with CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" "$PY" "$TMP/mm.py" "$SECONDS_PER_RUN")
	r=$(ratio "$mh" "$mp")
	verdict "no_limit_matmul_overhead_under_2%" "$(awk -v r="$r" 'BEGIN{exit !(r >= 0.98)}' && echo 1)" \
		"$mp → $mh TFLOPS (×$r)"
else
	skip "no_limit_matmul_overhead_under_2%" "no PyTorch"
fi

fi

if group priority; then
# 6. task priority: two containers (own regions, one priority dir) on GPU 0; the priority-1 one
# runs busy kernels throughout, the priority-0 one for the middle window. The low one's rate
# while the high one runs must fall to <= 10% of its rate alone, and come back to >= 80% once
# the high one has stopped (after the 200 ms HOLD). Rates from gpu_check's CLOCK_BOOTTIME lines.
P=$TMP/priority
mkdir -m 1777 "$P"
share=() # over the fake driver both processes must queue on one device, as on a GPU
[ -z "${GPU_CHECK_FAKE:-}" ] || share=(FAKE_GPU_STATE="$TMP/gpu-state")
with "${share[@]}" CUDA_TASK_PRIORITY_DIR="$P" CUDA_TASK_PRIORITY=1 LIBVGPU_LOG_LEVEL=info \
	CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" "$CHECK" progress $((3 * SECONDS_PER_RUN + 2)) \
	>"$TMP/low.out" 2>"${REPORT%.txt}-priority.log" & # its first hold, logged by libvgpu
low=$!
for _ in $(seq 300); do [ "$(wc -l <"$TMP/low.out")" -ge 2 ] && break; sleep 0.1; done
sleep $((SECONDS_PER_RUN + 1)) # 1 s warm-up, then the low one alone
with "${share[@]}" CUDA_TASK_PRIORITY_DIR="$P" CUDA_TASK_PRIORITY=0 \
	CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region)" "$CHECK" progress "$SECONDS_PER_RUN" >"$TMP/high.out"
wait $low
# kernels/s of the low one: alone (warm-up to the high one's start), while the high one runs
# (from 250 ms after its setup to its last line), after (HOLD + 300 ms on); and the high one's
read -r alone during after high < <(awk -v hold=0.2 '
	FNR == 1 { f++ }
	f == 1 { lt[++ln] = $1; lc[ln] = $2 }
	f == 2 { ht[++hn] = $1; hc[hn] = $2 }
	function done_by(x, i, c) { for (i = 1; i <= ln && lt[i] <= x; i++) c = lc[i]; return c + 0 }
	function rate(a, b) { return b > a ? (done_by(b) - done_by(a)) / (b - a) : 0 }
	END {
		if (ln < 3 || hn < 3) { print "0 0 0 0"; exit }
		printf "%.1f %.1f %.1f %.1f\n", rate(lt[2] + 1, ht[1]), rate(ht[2] + 0.25, ht[hn]),
			rate(ht[hn] + hold + 0.3, lt[ln]), hc[hn] / (ht[hn] - ht[2])
	}' "$TMP/low.out" "$TMP/high.out")
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b > 0 ? 100 * a / b : 0) }'; }
log "# priority: low (1) alone $alone kernels/s, while high (0) runs $during, after $after; high $high"
verdict "priority_0_holds_a_priority_1_neighbour" \
	"$(awk -v d="$during" -v a="$alone" 'BEGIN{exit !(a > 0 && d <= 0.10 * a)}' && echo 1)" \
	"low $alone → $during kernels/s = $(pct "$during" "$alone")% of alone while high runs"
verdict "priority_1_resumes_after_the_hold" \
	"$(awk -v r="$after" -v a="$alone" 'BEGIN{exit !(a > 0 && r >= 0.80 * a)}' && echo 1)" \
	"low $after kernels/s after high stops = $(pct "$after" "$alone")% of alone"
fi

log "# results in $REPORT; $skipped skipped"
log "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
