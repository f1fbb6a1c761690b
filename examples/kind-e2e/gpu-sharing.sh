#!/usr/bin/env bash
# GPU sharing in a kind cluster's e2e suite, the shell variant of test_gpu_sharing.py (same
# checks; bash and kubectl only). Copy it with cuda_share_probe.py (read from this directory).
#
#   KIND_E2E_SH=path/to/hack/kind-e2e.sh ./gpu-sharing.sh   # installs vgpu-bridge first (all)
#   ./gpu-sharing.sh                                        # on a cluster where it already ran
#
# Environment: KUBECTL (default kubectl; KUBECONFIG as usual), SCHEDULER (default-scheduler or
# volcano), PYTHON_IMAGE (any glibc image with python3; default python:3.12-slim), NAMESPACE
# (default gpu-sharing-e2e-sh; made and deleted), VGPU_BRIDGE_NAMESPACE (default vgpu-bridge),
# VGPU_BRIDGE_DRIVER (default gpu.vgpu-bridge.io), SHARE_MIB (default 4096).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KUBECTL=${KUBECTL:-kubectl}
SCHEDULER=${SCHEDULER:-default-scheduler}
PYTHON_IMAGE=${PYTHON_IMAGE:-python:3.12-slim}
NAMESPACE=${NAMESPACE:-gpu-sharing-e2e-sh}
CHART_NAMESPACE=${VGPU_BRIDGE_NAMESPACE:-vgpu-bridge}
DRIVER=${VGPU_BRIDGE_DRIVER:-gpu.vgpu-bridge.io}
SHARE_MIB=${SHARE_MIB:-4096}
METRICS_PORT=9401 # the chart's agent.metricsPort
MIB=1048576
PAST_BYTES=$((64 * MIB))

k() { "$KUBECTL" "$@"; }
kn() { "$KUBECTL" --namespace "$NAMESPACE" "$@"; }
fail() {
  echo "FAIL: $*" >&2
  kn get pods --output wide >&2 || true
  exit 1
}
pass() { echo "ok: $*"; }

# until "$@" succeeds, or fail after $TIMEOUT seconds naming what
TIMEOUT=180
until_ok() {
  local what=$1 deadline=$((SECONDS + TIMEOUT))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || fail "timed out waiting for $what"
    sleep 1
  done
}

# share_pod NAME MIB [UUID]: a pod asking for MIB of one card (of card UUID, HAMi's
# nvidia.com/use-gpuuuid), running the probe; it holds half its share for an hour.
share_pod() {
  kn apply --filename=- <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  annotations: {${3:+nvidia.com/use-gpuuuid: "$3"}}
spec:
  schedulerName: $SCHEDULER
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: probe
      image: $PYTHON_IMAGE
      imagePullPolicy: IfNotPresent
      command: [python3, /probe/cuda_share_probe.py, "$PAST_BYTES", --hold, "3600"]
      resources:
        limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: $2}
      volumeMounts: [{name: probe, mountPath: /probe}]
  volumes: [{name: probe, configMap: {name: cuda-share-probe}}]
EOF
}

# The probe's JSON line in pod $1's log (set in REPORT once printed).
REPORT=""
printed() {
  local phase
  phase=$(kn get pod "$1" --output 'jsonpath={.status.phase}')
  [[ $phase == Running || $phase == Succeeded || $phase == Failed ]] || return 1
  REPORT=$(kn logs "$1" | grep -m1 '^{') || return 1
}

# field KEY [N]: the N-th (default 1st) number or string after "KEY": in REPORT
field() {
  grep -oE "\"$1\": (\"[^\"]*\"|[0-9]+)" <<<"$REPORT" | sed -n "${2:-1}p" |
    sed -E 's/^"[^"]*": "?([^"]*)"?$/\1/'
}

mib_of() { # a whole-number quantity (80Gi, 81559Mi, bytes) in MiB
  local q=$1
  case $q in
    *Ti) echo $((${q%Ti} * 1048576)) ;;
    *Gi) echo $((${q%Gi} * 1024)) ;;
    *Mi) echo "${q%Mi}" ;;
    *[0-9]) echo $((q / MIB)) ;;
    *) fail "memory capacity $q: not a binary quantity" ;;
  esac
}

metric() { # metric NODE NAME CLAIM: the agent's sample of NAME for CLAIM
  local agent
  agent=$(k --namespace "$CHART_NAMESPACE" get pods --selector app.kubernetes.io/component=agent \
    --field-selector "spec.nodeName=$1" --output 'jsonpath={.items[0].metadata.name}')
  k get --raw "/api/v1/namespaces/$CHART_NAMESPACE/pods/$agent:$METRICS_PORT/proxy/metrics" |
    grep -E "^$2\{.*claim=\"$3\"" | awk '{ printf "%.0f\n", $NF }' | head -1 # as an integer: Prometheus may write 2.147483648e+09
}

if [[ -n ${KIND_E2E_SH:-} ]]; then
  "$KIND_E2E_SH" all
fi

k delete namespace "$NAMESPACE" --ignore-not-found --wait=true --timeout=180s >/dev/null
k create namespace "$NAMESPACE" >/dev/null
if [[ ${KEEP_NAMESPACE:-0} != 1 ]]; then
  trap 'k delete namespace "$NAMESPACE" --wait=true --timeout=180s >/dev/null' EXIT
fi
kn create configmap cuda-share-probe --from-file="$HERE/cuda_share_probe.py" >/dev/null

# 1. The share pod: its process sees the share as the card, allocates within it, is refused past it.
share_pod share "$SHARE_MIB" >/dev/null
until_ok "the share pod's probe report" printed share
echo "share: $REPORT"
[[ $(field cuInit) == 0 ]] || fail "cuInit: $(field cuInit)"
[[ $(field total) == $((SHARE_MIB * MIB)) ]] || fail "cuMemGetInfo total $(field total), not $SHARE_MIB MiB"
pass "cuMemGetInfo total is the share, $SHARE_MIB MiB"
[[ $(field result 1) == 0 ]] || fail "the allocation within the share returned $(field result 1)"
pass "an allocation within the share succeeds"
[[ $(field result 2) == 2 ]] || fail "the allocation past the share returned $(field result 2), not 2"
pass "an allocation past the share is refused with CUDA_ERROR_OUT_OF_MEMORY (2)"
[[ $(field total 2) == $((SHARE_MIB * MIB)) ]] || fail "NVML total $(field total 2)"
pass "nvmlDeviceGetMemoryInfo total is the share"
UUID=$(field uuid)
WITHIN=$(field bytes 1)

# 2. The node agent's metrics show what the pod holds (through the API server's pod proxy).
CLAIM=$(kn get pod share --output 'jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}')
NODE=$(kn get pod share --output 'jsonpath={.spec.nodeName}')
[[ $(kn get pod share --output 'jsonpath={.spec.schedulerName}') == "$SCHEDULER" ]] ||
  fail "share was not placed by $SCHEDULER"
held_shown() {
  USED=$(metric "$NODE" vgpu_bridge_claim_memory_used_bytes "$CLAIM")
  [[ -n $USED && $USED != 0 ]]
}
until_ok "vgpu_bridge_claim_memory_used_bytes of $CLAIM on $NODE" held_shown
((USED >= WITHIN && USED <= SHARE_MIB * MIB)) || fail "the agent shows $USED bytes used, the pod holds $WITHIN"
pass "the agent on $NODE shows the claim holding $USED bytes"

# 3. A second pod asking 1 MiB more than that card has left stays Pending, and runs once the
#    first share is gone.
CARD=$(k get resourceslices --field-selector "spec.driver=$DRIVER" --output go-template='{{range .items}}{{range .spec.devices}}{{.attributes.uuid.string}} {{.capacity.memory.value}}{{"\n"}}{{end}}{{end}}' |
  awk -v u="$UUID" '$1 == u { print $2 }')
[[ -n $CARD ]] || fail "no published device has uuid $UUID"
BEYOND=$(($(mib_of "$CARD") - SHARE_MIB + 1))
share_pod beyond "$BEYOND" "$UUID" >/dev/null
unschedulable() {
  [[ $(kn get pod beyond --output 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].status}') == False ]]
}
until_ok "beyond's PodScheduled=False" unschedulable
sleep 10
[[ $(kn get pod beyond --output 'jsonpath={.status.phase}/{.spec.nodeName}') == Pending/ ]] ||
  fail "beyond ($BEYOND MiB on a $CARD card holding $SHARE_MIB MiB) did not stay Pending"
pass "a second pod asking $BEYOND MiB of that card stays Pending: $(kn get pod beyond \
  --output 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}')"
kn delete pod share --wait=true >/dev/null
until_ok "beyond's probe report" printed beyond
[[ $(field total) == $((BEYOND * MIB)) ]] || fail "beyond sees $(field total) bytes"
pass "it runs once the first share is deleted, and sees its $BEYOND MiB"
echo "PASS"
