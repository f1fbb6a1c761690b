#!/usr/bin/env bash
# vgpu-bridge on a kind cluster someone else made: mock GPUs that hold their shares, for a CI
# suite with no GPU (docs/kind-e2e.md). Needs only bash, kind, kubectl and helm.
#
#   hack/kind-e2e.sh [options] load|install|wait|all [-- extra helm arguments]
#
#   load     kind load the webhook and agent images into every node of the cluster
#   install  helm upgrade --install the chart with agent.mock.enabled=true (agents on the nodes
#            that carry the mock-GPU label, each publishing its label's cards)
#   wait     until every labelled node's cards are in the driver's ResourceSlices; prints the
#            seconds it took
#   all      the three, each timed, then their total
#
# Label the GPU nodes first, e.g. in the kind config (nodes[].labels) or with
#   kubectl label node kind-worker vgpu-bridge.io/mock-gpus=2xh100-80gb
# (<count>x<profile|memory>: h100-80gb, h200-141gb, a100-40gb, a100-80gb, l4-24gb, t4-16gb,
# or a memory size such as 24Gi).
#
# Options (each also an environment variable):
#   --name NAME          kind cluster (KIND_CLUSTER_NAME; default kind)
#   --images SOURCE      where the images come from (VGPU_BRIDGE_IMAGES): a directory of
#                        `make images` archives (vgpu-bridge-<part>-<version>-<arch>.tar), or
#                        `docker` for images vgpu-bridge-<part>:<tag> in the local Docker
#                        (default: dist/images beside this script if it exists, else docker)
#   --tag TAG            the images' tag (VGPU_BRIDGE_TAG; default: read from the archives'
#                        names for this machine's architecture; required with --images docker)
#   --arch ARCH          amd64 or arm64 (VGPU_BRIDGE_ARCH; default: this machine's)
#   --chart PATH         chart directory or packaged .tgz (VGPU_BRIDGE_CHART; default:
#                        charts/vgpu-bridge beside this script)
#   --namespace NS       release namespace (VGPU_BRIDGE_NAMESPACE; default vgpu-bridge)
#   --release NAME       helm release (VGPU_BRIDGE_RELEASE; default vgpu-bridge)
#   --label KEY          the mock-GPU node label (VGPU_BRIDGE_MOCK_LABEL; default
#                        vgpu-bridge.io/mock-gpus); passed to the chart as agent.mock.nodeLabel
#   --driver NAME        the DRA driver name (VGPU_BRIDGE_DRIVER; default gpu.vgpu-bridge.io)
#   --kubeconfig FILE    for kubectl and helm (KUBECONFIG; default: kubectl's current context)
#   --timeout SECONDS    how long `wait` waits (VGPU_BRIDGE_WAIT_TIMEOUT; default 300)
#   --set KEY=VALUE      passed to helm (repeatable); --values FILE likewise
#   KIND, KUBECTL, HELM  the binaries (default: kind, kubectl, helm on PATH)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
KIND=${KIND:-kind}
KUBECTL=${KUBECTL:-kubectl}
HELM=${HELM:-helm}
NAME=${KIND_CLUSTER_NAME:-kind}
IMAGES=${VGPU_BRIDGE_IMAGES:-}
TAG=${VGPU_BRIDGE_TAG:-}
ARCH=${VGPU_BRIDGE_ARCH:-}
CHART=${VGPU_BRIDGE_CHART:-$ROOT/charts/vgpu-bridge}
NAMESPACE=${VGPU_BRIDGE_NAMESPACE:-vgpu-bridge}
RELEASE=${VGPU_BRIDGE_RELEASE:-vgpu-bridge}
LABEL=${VGPU_BRIDGE_MOCK_LABEL:-vgpu-bridge.io/mock-gpus}
DRIVER=${VGPU_BRIDGE_DRIVER:-gpu.vgpu-bridge.io}
KUBECONFIG_FILE=${KUBECONFIG:-}
TIMEOUT=${VGPU_BRIDGE_WAIT_TIMEOUT:-300}
HELM_ARGS=()
PARTS=(webhook agent)

die() {
  echo "kind-e2e: $*" >&2
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

need() {
  command -v "$1" >/dev/null 2>&1 || die "$1 not found (set ${2} to its path)"
}

kubectl_() {
  if [[ -n $KUBECONFIG_FILE ]]; then
    "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"
  else
    "$KUBECTL" "$@"
  fi
}

now() { date +%s.%N; }

seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

machine_arch() {
  case $(uname -m) in
    x86_64 | amd64) echo amd64 ;;
    aarch64 | arm64) echo arm64 ;;
    *) die "unknown machine architecture $(uname -m): give --arch amd64|arm64" ;;
  esac
}

images_source() {
  if [[ -n $IMAGES ]]; then
    echo "$IMAGES"
  elif [[ -d $ROOT/dist/images ]]; then
    echo "$ROOT/dist/images"
  else
    echo docker
  fi
}

# The one archive of PART for ARCH in DIR (and the TAG, when given, in its name).
archive_of() {
  local part=$1 dir=$2 found=()
  local pattern="vgpu-bridge-$part-${TAG:-*}-$ARCH.tar"
  shopt -s nullglob
  # shellcheck disable=SC2206  # the pattern is meant to expand here
  found=("$dir"/$pattern)
  shopt -u nullglob
  ((${#found[@]} == 1)) && {
    echo "${found[0]}"
    return
  }
  ((${#found[@]} == 0)) && die "no $dir/$pattern: build the images (make images ARCH=$ARCH) or give --images"
  die "several $dir/$pattern (${found[*]##*/}): give --tag"
}

# The images' tag: --tag, or the version-arch part of the webhook archive's name.
resolve_tag() {
  [[ -n $TAG ]] && return
  local source archive
  source=$(images_source)
  [[ $source == docker ]] && die "--images docker needs --tag (the images are vgpu-bridge-<part>:<tag>)"
  archive=$(archive_of webhook "$source")
  archive=${archive##*/vgpu-bridge-webhook-}
  TAG=${archive%.tar}
}

cmd_load() {
  need "$KIND" KIND
  resolve_tag
  local source
  source=$(images_source)
  [[ " $("$KIND" get clusters 2>/dev/null | tr '\n' ' ') " == *" $NAME "* ]] ||
    die "no kind cluster named $NAME (kind get clusters); give --name"
  if [[ $source == docker ]]; then
    local images=()
    for part in "${PARTS[@]}"; do images+=("vgpu-bridge-$part:$TAG"); done
    "$KIND" load docker-image --name "$NAME" "${images[@]}"
  else
    [[ -d $source ]] || die "--images $source: not a directory and not 'docker'"
    for part in "${PARTS[@]}"; do
      "$KIND" load image-archive --name "$NAME" "$(archive_of "$part" "$source")"
    done
  fi
}

cmd_install() {
  need "$HELM" HELM
  need "$KUBECTL" KUBECTL
  resolve_tag
  [[ -e $CHART ]] || die "no chart at $CHART: give --chart DIR|FILE.tgz"
  local kubeconfig=()
  [[ -n $KUBECONFIG_FILE ]] && kubeconfig=(--kubeconfig "$KUBECONFIG_FILE")
  local labelled
  labelled=$(kubectl_ get nodes --selector "$LABEL" --output name)
  [[ -n $labelled ]] || echo "kind-e2e: warning: no node has the label $LABEL yet: no agent runs until one has (kubectl label node NODE $LABEL=2xh100-80gb)" >&2
  "$HELM" upgrade --install "$RELEASE" "$CHART" "${kubeconfig[@]}" \
    --namespace "$NAMESPACE" --create-namespace --wait --timeout 5m \
    --set image.registry=docker.io/library --set "image.tag=$TAG" \
    --set image.pullPolicy=IfNotPresent \
    --set agent.mock.enabled=true --set-string "agent.mock.nodeLabel=$LABEL" \
    --set-string "driverName=$DRIVER" \
    ${HELM_ARGS[@]+"${HELM_ARGS[@]}"}
}

# "<node> <label value>" per labelled node.
labelled_nodes() {
  kubectl_ get nodes --selector "$LABEL" --label-columns "$LABEL" --no-headers |
    awk '{ print $1, $NF }'
}

# "<node> <devices>" per node, summed over the driver's ResourceSlices.
published() {
  kubectl_ get resourceslices --field-selector "spec.driver=$DRIVER" --output \
    go-template='{{range .items}}{{if and .spec.nodeName .spec.devices}}{{.spec.nodeName}} {{len .spec.devices}}{{"\n"}}{{end}}{{end}}' |
    awk 'NF == 2 { n[$1] += $2 } END { for (k in n) print k, n[k] }'
}

# The nodes whose cards are not all published yet, with what is missing; empty when done.
missing() {
  local nodes=$1 slices=$2 node value count have
  while read -r node value; do
    [[ -z $node ]] && continue
    if [[ $value =~ ^([0-9]+)x ]]; then
      count=${BASH_REMATCH[1]}
    else
      count=1 # agent.mockGpus: the label only places the agent; at least one card
    fi
    have=$(awk -v n="$node" '$1 == n { print $2 }' <<<"$slices")
    if ((${have:-0} < count)); then
      echo "$node: ${have:-0} of $count cards ($LABEL=$value)"
    fi
  done <<<"$nodes"
}

cmd_wait() {
  need "$KUBECTL" KUBECTL
  local started nodes slices left=""
  started=$(now)
  nodes=$(labelled_nodes)
  [[ -n $nodes ]] || die "no node has the label $LABEL (kubectl label node NODE $LABEL=2xh100-80gb)"
  while :; do
    slices=$(published)
    left=$(missing "$nodes" "$slices")
    [[ -z $left ]] && break
    if awk -v s="$(seconds_since "$started")" -v t="$TIMEOUT" 'BEGIN { exit !(s >= t) }'; then
      echo "kind-e2e: cards not published after ${TIMEOUT}s:" >&2
      echo "$left" >&2
      kubectl_ get pods --namespace "$NAMESPACE" --output wide >&2 || true
      exit 1
    fi
    sleep 1
  done
  echo "kind-e2e: cards published on $(wc -l <<<"$nodes") node(s) in $(seconds_since "$started")s"
}

timed() {
  local started
  started=$(now)
  "cmd_$1"
  echo "kind-e2e: $1: $(seconds_since "$started")s"
}

main() {
  local command=""
  while (($#)); do
    case $1 in
      --name) NAME=${2:?--name needs a value} && shift ;;
      --images) IMAGES=${2:?--images needs a value} && shift ;;
      --tag) TAG=${2:?--tag needs a value} && shift ;;
      --arch) ARCH=${2:?--arch needs a value} && shift ;;
      --chart) CHART=${2:?--chart needs a value} && shift ;;
      --namespace) NAMESPACE=${2:?--namespace needs a value} && shift ;;
      --release) RELEASE=${2:?--release needs a value} && shift ;;
      --label) LABEL=${2:?--label needs a value} && shift ;;
      --driver) DRIVER=${2:?--driver needs a value} && shift ;;
      --kubeconfig) KUBECONFIG_FILE=${2:?--kubeconfig needs a value} && shift ;;
      --timeout) TIMEOUT=${2:?--timeout needs a value} && shift ;;
      --set | --set-string | --values | -f) HELM_ARGS+=("$1" "${2:?$1 needs a value}") && shift ;;
      --) shift && HELM_ARGS+=("$@") && break ;;
      -h | --help) usage ;;
      load | install | wait | all)
        [[ -z $command ]] || die "one command only (got $command and $1)"
        command=$1
        ;;
      *) echo "kind-e2e: unknown argument $1" >&2 && usage ;;
    esac
    shift
  done
  [[ -n $command ]] || usage
  [[ $TIMEOUT =~ ^[0-9]+$ ]] || die "--timeout $TIMEOUT: whole seconds"
  ARCH=${ARCH:-$(machine_arch)}
  [[ $ARCH == amd64 || $ARCH == arm64 ]] || die "--arch $ARCH: amd64 or arm64"
  if [[ $command == all ]]; then
    local started
    started=$(now)
    timed load
    timed install
    timed wait
    echo "kind-e2e: all: $(seconds_since "$started")s"
  else
    "cmd_$command"
  fi
}

main "$@"
