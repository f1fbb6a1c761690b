"""What can be checked of ``make e2e-nvidia`` without Docker or NVIDIA's checkouts: the mock
NVML's configuration names the fake driver's cards, the build digest ignores build outputs, a
wrong checkout is refused naming its variable, NVIDIA's objects are rendered as its chart does,
the mock root reaches one GPU worker only, and ``make e2e-kind`` does not collect the scenarios."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest
import yaml

from e2e.cluster.settings import REPO_ROOT
from e2e.kind.cluster import cluster_config
from e2e.kind.nvidia import driverroot, modes, plugin
from e2e.kind.nvidia.build import (
    NvidiaSourceError,
    build_inputs_digest,
    mock_checkout,
    plugin_checkout,
)
from e2e.kind.nvidia.tier import mount_mock_root
from e2e.kind.steps import StepError

pytestmark = pytest.mark.e2e
PROFILE = """\
version: "1.0"
system:
  driver_version: "550.163.01"
device_defaults:
  name: "NVIDIA H100 80GB HBM3"
  pci:
    device_id: 0x233010DE
devices:
  - index: 0
    uuid: "GPU-01000100-0000-0000-0000-000000000000"
    minor_number: 0
  - index: 1
    uuid: "GPU-01000100-0000-0000-0000-000000000001"
    minor_number: 1
  - index: 2
    uuid: "GPU-01000100-0000-0000-0000-000000000002"
    minor_number: 2
"""


def test_uuid_for_is_the_fake_drivers_uuid_of_each_device_node() -> None:
    """native/vgpu/tests/fake/fake.h: GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae<minor, 2 hex>."""
    assert driverroot.uuid_for(0) == "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae00"
    assert driverroot.uuid_for(10) == "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae0a"
    fake = (REPO_ROOT / "native/vgpu/tests/fake/fake.h").read_text()
    assert "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeXX with XX = i in hex" in fake


def test_mock_config_names_the_fake_drivers_cards_and_keeps_the_rest() -> None:
    config = yaml.safe_load(driverroot.mock_config(PROFILE, 2))
    assert config["system"]["num_devices"] == 2
    uuids = [d["uuid"] for d in config["devices"]]
    assert uuids[:2] == [driverroot.uuid_for(0), driverroot.uuid_for(1)]
    assert uuids[2] == "GPU-01000100-0000-0000-0000-000000000002"  # past num_devices: unused
    assert "device_id: 0x233010DE" in driverroot.mock_config(PROFILE, 2)  # spelling kept


def test_mock_config_refuses_a_profile_without_enough_devices() -> None:
    with pytest.raises(StepError, match=r"devices \[3\]"):
        driverroot.mock_config(PROFILE, 4)


def test_device_nodes_are_the_drivers_majors_and_minors() -> None:
    nodes = driverroot.device_nodes(2)
    assert nodes["nvidia0"] == (195, 0)
    assert nodes["nvidia1"] == (195, 1)
    assert nodes["nvidiactl"] == (195, 255)
    assert {nodes["nvidia-uvm"], nodes["nvidia-uvm-tools"]} == {(510, 0), (510, 1)}


def _checkout(root: Path, module: str, *dirs: str) -> Path:
    (root / "vendor").mkdir(parents=True)
    (root / "vendor/modules.txt").write_text("# vendored\n")
    (root / "go.mod").write_text(f"module {module}\n\ngo 1.26.0\n")
    for directory in dirs:
        (root / directory).mkdir(parents=True)
        (root / directory / "main.go").write_text("package main\n")
    return root


def test_the_digest_follows_sources_not_build_outputs(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "nv", "sigs.k8s.io/dra-driver-nvidia-gpu",
                     "cmd/gpu-kubelet-plugin")  # fmt: skip
    before = build_inputs_digest(root)
    (root / "gpu-kubelet-plugin").write_bytes(b"\x7fELF binary")
    (root / "cmd/gpu-kubelet-plugin/libnvidia-ml.so.550.163.h").write_text("/* cgo */\n")
    assert build_inputs_digest(root) == before
    (root / "cmd/gpu-kubelet-plugin/main.go").write_text("package main // changed\n")
    assert build_inputs_digest(root) != before


def test_a_checkout_of_another_module_is_refused_naming_its_variable(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "kai", "github.com/kai-scheduler/KAI-scheduler", "cmd/x")
    with pytest.raises(NvidiaSourceError, match=r"^NVIDIA_DRA_SOURCE=.*module github.com/kai"):
        plugin_checkout(root)
    with pytest.raises(NvidiaSourceError, match=r"^NVML_MOCK_SOURCE=.*not github.com/NVIDIA"):
        mock_checkout(root)


def test_a_checkout_without_vendor_is_refused(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "nv", "sigs.k8s.io/dra-driver-nvidia-gpu", "cmd/gpu-kubelet-plugin")
    (root / "vendor/modules.txt").unlink()
    with pytest.raises(NvidiaSourceError, match=r"missing vendor/modules.txt"):
        plugin_checkout(root)


def test_nvidias_plugin_runs_as_its_chart_renders_it_with_consumable_shares() -> None:
    objects = plugin.manifests("example/plugin:1")
    (daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["CONSUMABLE_SHARES"] == "100"
    assert env["FEATURE_GATES"] == "ConsumableShares=true"
    assert env["CDI_ROOT"] == "/var/run/cdi"
    assert env["NVIDIA_DRIVER_ROOT"] == str(driverroot.DRIVER_ROOT)
    assert env["NVIDIA_CDI_HOOK_PATH"]  # else it looks for its own hook in the image
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["driver-root"]["mountPath"] == "/driver-root"  # --container-driver-root default
    assert mounts["plugins"]["mountPropagation"] == "Bidirectional"
    (device_class,) = [o for o in objects if o["kind"] == "DeviceClass"]
    assert device_class["metadata"]["name"] == "gpu.nvidia.com"
    assert device_class["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    (selector,) = device_class["spec"]["selectors"]
    assert "device.attributes['gpu.nvidia.com'].type == 'gpu'" in selector["cel"]["expression"]


def test_the_mock_root_reaches_the_first_gpu_worker_only() -> None:
    config = cluster_config("node:1", local_image=True, v1=False, restrict_oom=False)
    mount_mock_root(config)
    mounted = [n for n in config["nodes"] if n.get("extraMounts")]
    (node,) = mounted
    assert node["labels"][plugin.MOCK_NODE_LABEL] == "true"
    assert node["labels"]["nvidia.com/gpu.present"] == "true"
    (mount,) = node["extraMounts"]
    assert mount["hostPath"] == mount["containerPath"] == str(driverroot.HOST_ROOT)
    assert driverroot.DRIVER_ROOT.is_relative_to(driverroot.HOST_ROOT)


def test_make_e2e_kind_does_not_collect_the_nvidia_scenarios() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    pattern = re.search(r"^KIND_SCENARIOS := \$\(sort \$\(wildcard (\S+)\)\)", makefile, re.M)
    assert pattern is not None
    collected = glob.glob(str(REPO_ROOT / pattern.group(1)))
    assert collected
    assert not any("nvidia" in Path(p).parts for p in collected)
    assert "e2e/kind/nvidia/scenarios.py" in makefile  # make e2e-nvidia runs them


def test_each_mode_expects_the_capacity_nvidias_source_publishes() -> None:
    """docs/reference/nvidia-dra-driver.md §1.3's table, per mode."""
    hundred = modes.card_capacity("100", "80Gi")
    assert hundred["memory"]["requestPolicy"] == {
        "default": "0", "validRange": {"min": "0", "max": "80Gi", "step": "1Mi"}}  # fmt: skip
    assert hundred["shares"] == {"value": "100", "requestPolicy": {
        "default": "1", "validRange": {"min": "1", "max": "100", "step": "1"}}}  # fmt: skip
    whole_card = {"min": "1Mi", "max": "80Gi", "step": "1Mi"}
    policy = {"default": "80Gi", "validRange": whole_card}
    memory = modes.card_capacity("memory", "80Gi")
    assert memory == {"memory": {"value": "80Gi", "requestPolicy": policy}}
    assert modes.card_capacity("unlimited", "80Gi") == {"memory": hundred["memory"]}
    assert modes.card_capacity("4", "80Gi")["shares"]["value"] == "4"


def test_a_share_consumes_memory_and_in_the_n_mode_the_shares_its_cores_round_up_to() -> None:
    assert modes.consumed("100", 3000, 30) == {"memory": "3000Mi", "shares": "30"}
    assert modes.consumed("4", 3000, 30) == {"memory": "3000Mi", "shares": "2"}
    assert modes.consumed("memory", 3000, 30) == {"memory": "3000Mi"}
    assert modes.consumed("100", 3000, 0) == {"memory": "3000Mi"}  # the policy default, 1 share


def test_the_sm_limit_is_the_cores_asked_in_every_mode() -> None:
    assert [modes.sm_limit(m, 30) for m in ("100", "4", "7", "memory", "unlimited")] == [30] * 5
    assert modes.sm_limit("100", 0) == 0


def test_a_mode_nvidia_refuses_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(modes.MODE_ENV, "disabled")
    with pytest.raises(ValueError, match="disabled"):
        modes.mode_from_env()
    monkeypatch.delenv(modes.MODE_ENV)
    assert modes.mode_from_env() == "100"
