# One command per gate. CI (.ci/run) calls `make test`, exactly as the README says.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: help venv fmt lint unit integration abuse e2e e2e-kai test test-first-tiers later-tier-builds bench bench-scale demo cluster-bin cluster-bin-pinned cluster-bin-current scheduler-bin native native-test clean

help:
	@echo "make test    lint + unit + integration + native + e2e (DRA scenarios on 1.36 and 1.37) + real node + kind (installs what it needs; root)"
	@echo "make fmt     format the code"
	@echo "make lint    ruff + mypy strict"
	@echo "make bench   benchmarks, printed as tables"
	@echo "make bench-scale   admission, the viewer, the webhook, the dense node and scheduling at 1,000, 2,500 and 10,000 simulated GPUs (issue 26)"
	@echo "make bench-day2   day two on kind: upgrades, outages, a node restart, uninstall, downgrade under load (issue 38; REUSE=1 keeps a running cluster)"
	@echo "make chart   check the chart's README, lint it, package it into dist/"
	@echo "make kubectl-plugin   the kubectl plugin as a zipapp and krew's archive, in dist/"
	@echo "make demo    the local cluster, the webhook, a node agent with mock GPUs, examples/ applied, a table (KEEP=1 keeps the cluster)"

# A fresh machine gets a virtual environment with the project and its dev tools.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

fmt: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

lint: venv
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

unit: venv
	$(PY) -m pytest tests/unit -q

integration: venv
	$(PY) -m pytest tests/integration -q

# Hostile input against the real binaries (tests/abuse/README.md); also part of `make test`,
# which collects everything under tests/.
abuse: venv
	$(PY) -m pytest tests/abuse -q

# The e2e tier: a private local control plane per pytest session (e2e/conftest.py), torn down
# after it; failed tests leave their dump in .cache/e2e-artifacts/. Also the harness's own tests.
e2e: venv cluster-bin-pinned scheduler-bin helm-bin
	$(PY) -m e2e.prometheus fetch
	$(PY) -m pytest e2e -q -m "not needs_kai_build"

# The real KAI scheduler and binder (e2e/kai/test_real_kai.py), from a KAI source tree you provide:
# KAI_SOURCE=DIR builds it first (python -m e2e.kai build --source DIR, into the cache); without it,
# the newest build made so (or KAI_BIN_DIR and KAI_CRD_DIR). The Go proxy does not serve KAI's
# module, so `make test` never builds it (docs/kai.md). A missing build fails, not skips.
e2e-kai: venv cluster-bin-pinned
	$(if $(KAI_SOURCE),$(PY) -m e2e.kai build --source $(KAI_SOURCE) $(if $(KAI_VERSION),--version $(KAI_VERSION)))
	KAI_REQUIRED=1 $(PY) -m pytest e2e/kai -q -m needs_kai_build

# NVIDIA's own DRA driver with our enforcement on top (issue 37), on kind (e2e/kind/nvidia): NVIDIA's
# gpu-kubelet-plugin and the mock NVML built from checkouts you provide (NVIDIA_DRA_SOURCE=DIR of
# kubernetes-sigs/dra-driver-nvidia-gpu, NVML_MOCK_SOURCE=DIR of NVIDIA/k8s-test-infra; offline from
# their vendor dirs, cached by a digest of their sources), the mock driver root on the host, NVIDIA's
# plugin as a DaemonSet with --consumable-shares=100, our chart with nvidiaDriver.enabled, then
# e2e/kind/nvidia/scenarios.py. NVIDIA_CONSUMABLE_SHARES=memory|unlimited|N picks the mode (default 100).
# Not in `make test`: CI has no such checkouts. Root, under the node-tier lock.
.PHONY: e2e-nvidia
e2e-nvidia: venv cluster-bin-pinned helm-bin
	$(if $(and $(NVIDIA_DRA_SOURCE),$(NVML_MOCK_SOURCE)),,$(error make e2e-nvidia needs NVIDIA_DRA_SOURCE=DIR and NVML_MOCK_SOURCE=DIR))
	$(PY) -m e2e.kind.nvidia build --nvidia-source $(NVIDIA_DRA_SOURCE) --nvml-mock-source $(NVML_MOCK_SOURCE)
	NVIDIA_DRA_SOURCE=$(NVIDIA_DRA_SOURCE) NVML_MOCK_SOURCE=$(NVML_MOCK_SOURCE) flock /tmp/vgpu-node-tier.lock bash -c \
		'$(PY) -m e2e.kind.nvidia up && $(PY) -m pytest e2e/kind/nvidia/scenarios.py -q; \
		status=$$?; $(PY) -m e2e.kind.nvidia down || status=1; exit $$status'

# The local control plane's one multi-call binary (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler), built from e2e/cluster/gotools into ~/.cache/vgpu-bridge/k8s-<version>/bin
# (VGPU_BRIDGE_CACHE moves it, K8S_VERSION picks the release); reused while its sources are unchanged.
# Both tested releases: the pinned one (K8S_VERSION or v1.36.3) and K8S_CURRENT for e2e-k8s137.
K8S_CURRENT := v1.37.2
cluster-bin: cluster-bin-pinned cluster-bin-current
cluster-bin-pinned: venv
	$(PY) -m e2e.cluster build
cluster-bin-current: venv
	K8S_VERSION=$(K8S_CURRENT) $(PY) -m e2e.cluster build

.PHONY: e2e-k8s137
# The e2e tier's DRA scenarios again on Kubernetes K8S_CURRENT (docs/kubernetes-versions.md):
# the same test files as in `make e2e`, in a pytest session whose private control plane is
# K8S_CURRENT's (webhook translation, kube-scheduler packing shares, node agent Prepare, the same
# on NVIDIA-shaped slices with our enforcer), and
# e2e/test_extended_resource.py, which needs 1.37 (whole GPUs through DeviceClass
# extendedResourceName; skipped in `make e2e` on the pinned 1.36).
E2E_DRA_SCENARIOS := e2e/webhook/test_admission.py e2e/test_dra_sharing.py \
	e2e/test_core_booking.py e2e/test_init_container_booking.py e2e/node/test_agent.py \
	e2e/node/test_prepare_input.py e2e/test_extended_resource.py e2e/test_k8s_versions.py \
	e2e/test_nvidia_enforcer.py e2e/test_api_outage.py
e2e-k8s137: venv cluster-bin-current
	K8S_VERSION=$(K8S_CURRENT) $(PY) -m pytest $(E2E_DRA_SCENARIOS) -q

# The real Volcano scheduler (issue 7), built from its Go module into the same cache. KAI's is
# built only from a source tree you provide (make e2e-kai KAI_SOURCE=DIR).
scheduler-bin: venv
	$(PY) -m e2e.volcano build

# native/vgpu: libvgpu.so and its tests over the fake driver (issue 6 fills native/vgpu/Makefile).
native:
	$(MAKE) -C native/vgpu

native-test:
	$(MAKE) -C native/vgpu cudart test
	$(MAKE) -C native/vgpu oldglibc-test

# The unit, native and e2e tiers leave one of two cores idle much of the time: K8S_CURRENT's
# control plane (about 10 min of Go build cold), then the real-node and kind tiers' Go programs
# (containerd, runc, kind, crictl, CNI plugins, CoreDNS), are built beside them, with `make -j2`.
test: lint
	$(MAKE) -j2 test-first-tiers later-tier-builds
	$(MAKE) e2e-k8s137
	$(MAKE) e2e-realnode
	$(MAKE) e2e-kind

.PHONY: later-tier-builds
later-tier-builds: cluster-bin-current
	$(PY) -m e2e.realnode build
	$(PY) -m e2e.kind build

test-first-tiers: venv
	$(PY) -m pytest tests -q -m "not e2e"
	$(MAKE) -j1 native-test
	$(MAKE) -j1 e2e

# 10,000 GPUs by simulation (bench/scale.py: fake nodes, our agent's slices, allocated claims
# on the local control plane): the viewer's and a webhook replica's cost per step, and scheduling
# on NVIDIA-shaped slices beside ours (bench/nvidia.py). Long (the
# 10,000-GPU step creates 30,000 objects); not part of `make bench`.
bench-scale: venv cluster-bin-pinned
	$(PY) bench/scale.py
	$(PY) bench/schedule.py --gpu-steps 1000,2500,10000 --repeats 1 --profile .cache/bench-profiles
	$(PY) bench/nvidia.py --parts schedule --gpus 1000

bench: venv cluster-bin-pinned helm-bin
	$(PY) bench/translate.py
	$(PY) bench/webhook.py
	$(PY) bench/claim_memory.py
	$(PY) bench/pending_pods.py
	$(PY) bench/schedule.py
	$(PY) bench/node.py
	$(PY) bench/nvidia.py --parts admission,prepare
	$(MAKE) -C native/vgpu bench
	flock /tmp/vgpu-node-tier.lock $(PY) bench/kind.py

# Day two on kind (issue 38, bench/day2.py): helm upgrade from the previous release under 20 GPU
# pod creates/s, agent upgrade with running shares, API server down 30 s and etcd paused, a node
# restarted, a webhook replica SIGKILLed, helm uninstall with running shares, downgrade; prints
# the table and appends it to bench/results/day2-<date>.md. Brings kind up and down itself
# (REUSE=1: the running cluster of `python -m e2e.kind up`). Root; not part of `make bench`.
.PHONY: bench-day2
bench-day2: venv cluster-bin-pinned helm-bin
	flock /tmp/vgpu-node-tier.lock $(PY) bench/day2.py $(if $(REUSE),--reuse) \
		--out bench/results/day2-$$(date -u +%Y-%m-%d).md

# The demo (e2e/demo): builds or reuses the local cluster, runs the webhook and a node agent with
# mock GPUs, applies examples/, prints what each workload got. KEEP=1 leaves the cluster up.
demo: venv cluster-bin-pinned scheduler-bin helm-bin
	$(PY) -m e2e.demo $(if $(KEEP),--keep)

.PHONY: helm-bin e2e-kind
# helm, built from its Go module (e2e/chart/helmtool) into ~/.cache/vgpu-bridge/helm-<version>/bin
# for the chart tests; reused while go.mod and go.sum are unchanged.
helm-bin: venv
	$(PY) -m e2e.chart build

.PHONY: chart
# The chart as users install it: its README matches values.yaml (scripts/chart_readme.py), helm
# lint --strict passes, and helm package writes dist/vgpu-bridge-<version>.tgz (path printed).
chart: venv helm-bin
	$(PY) scripts/chart_readme.py --check
	$(PY) -m e2e.chart package

.PHONY: kubectl-plugin
# The kubectl plugin as krew installs it (plugins/krew/vgpu-bridge.yaml): dist/kubectl-vgpu_bridge,
# a zipapp of the modules of ours `kubectl vgpu status` imports (the Python running it needs the
# bare install's dependencies), and dist/kubectl-vgpu_bridge-v<version>.tar.gz, reproducible.
kubectl-plugin: venv
	$(PY) scripts/build_kubectl_plugin.py --out dist

.PHONY: images
# The chart's two images (images/webhook, images/agent) for linux/amd64 and linux/arm64, with no
# registry, in the kind tier's private dockerd (started and stopped again unless it runs):
# checked, saved as dist/images/vgpu-bridge-<part>-<version>-<arch>.tar (`docker load -i`), and
# a table of their sizes against the budgets (images/README.md). ARCH=amd64 builds one. Root.
# Before an arm64 image, libvgpu's suite runs cross-built under qemu-user (native/vgpu arm64-test).
images: venv
	$(if $(filter amd64,$(ARCH)),,$(MAKE) -C native/vgpu arm64-test)
	flock /tmp/vgpu-node-tier.lock $(PY) -m images $(if $(ARCH),--arch $(ARCH))

.PHONY: images-buildx
# The same two images as a platform team's CI builds them: one `docker buildx build --platform
# linux/amd64,linux/arm64` per Dockerfile, here with no registry (a host buildkitd and buildx built
# from their Go modules, the bases given as OCI-layout named contexts), written as
# dist/images/vgpu-bridge-<part>-<version>.oci.tar and each platform checked (images/README.md).
# Root. Not part of `make test`.
images-buildx: venv
	flock /tmp/vgpu-node-tier.lock $(PY) -m images.buildx

# The kind tier (e2e/kind): its own dockerd (Debian's docker.io), a kind v0.33 cluster of one
# control plane and three workers (two with mock GPUs, the second tainted; one CPU-only) on a
# node image built here from Debian packages and Go modules (no registry), the chart's images built and loaded, `helm install` with mock GPUs, then
# Volcano (vc-scheduler, vc-controller-manager) on images built from the Volcano tier's module,
# then every e2e/kind/scenarios*.py (scenarios.py first: it ends by uninstalling the chart, which
# the others install again); `python -m e2e.kind down` always runs after and puts the host back.
# Then the kind e2e recipe as another project runs it (e2e/kind/recipe.py, docs/kind-e2e.md): the
# tier's cluster deleted, a cluster made with `kind create cluster --config
# e2e/kind/plain/kind-config.yaml`, `hack/kind-e2e.sh all`, examples/kind-e2e with kube-scheduler
# and with Volcano, that cluster deleted (about 3 min). `make e2e-kind-recipe` runs only that.
# Never at the same time as the real-node tier (one lock for both). Needs root.
KIND_SCENARIOS := $(sort $(wildcard e2e/kind/scenarios*.py))
e2e-kind: venv cluster-bin-pinned helm-bin
	flock /tmp/vgpu-node-tier.lock bash -c 'status=0; if $(PY) -m e2e.kind up; then \
		$(PY) -m pytest $(KIND_SCENARIOS) -q || status=1; \
		$(PY) -m e2e.kind.recipe --delete-tier-cluster || status=1; else status=1; fi; \
		$(PY) -m e2e.kind down || status=1; exit $$status'

.PHONY: e2e-kind-recipe
e2e-kind-recipe: venv cluster-bin-pinned helm-bin
	flock /tmp/vgpu-node-tier.lock bash -c 'status=0; if $(PY) -m e2e.kind up; then \
		$(PY) -m e2e.kind.recipe --delete-tier-cluster || status=1; else status=1; fi; \
		$(PY) -m e2e.kind down || status=1; exit $$status'

.PHONY: e2e-realnode
# The real-node tier (issue 10, e2e/realnode): a real kubelet + containerd 2.3 + runc 1.4 built
# from their Go modules (into ~/.cache/vgpu-bridge/realnode-*), joined to a private control plane;
# pods run as real containers. Needs root; changes three kernel tunables while it runs and puts
# them back; never beside the kind tier (both take /tmp/vgpu-node-tier.lock). `python -m e2e.realnode
# down` cleans up after a crash.
e2e-realnode: venv cluster-bin-pinned
	$(PY) -m e2e.realnode build
	VGPU_REALNODE=1 flock /tmp/vgpu-node-tier.lock $(PY) -m pytest e2e/realnode -q

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
