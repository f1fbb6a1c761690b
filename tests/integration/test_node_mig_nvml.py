"""The agent's real NVML code path (pynvml over native/vgpu's fake libnvidia-ml.so.1, found on
LD_LIBRARY_PATH as the real one is) on a node with two cards, the second in MIG mode: only the
first is listed as shareable, under its NVML index, and the second is skipped with its reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.integration.waiting_agent import first_healthz, get
from tests.integration.webhook_harness import free_port
from tests.native_workload import NATIVE, build_workload

REPO = Path(__file__).resolve().parents[2]
FAKE_NVML = NATIVE / "build" / "fake"
LIST_CARDS = """
import json
from vgpu_bridge.node.gpus import nvml_gpus
shareable = [[gpu.device_name, gpu.uuid, gpu.minor, gpu.driver_version] for gpu in nvml_gpus()]
print(json.dumps({"shareable": shareable}))
from vgpu_bridge.node.gpus import nvml_inventory
skipped = [[card.index, card.uuid, card.reason] for card in nvml_inventory().skipped]
print(json.dumps({"skipped": skipped}))
"""
CARD = "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae0{}"  # the fake's uuid of card i


def list_cards(mig_modes: str) -> dict[str, list[list[object]]]:
    env = {**os.environ, "LD_LIBRARY_PATH": str(FAKE_NVML), "FAKE_CUDA_DEVICES": "2",
           "FAKE_NVML_MIG_MODES": mig_modes, "FAKE_NVML_DRIVER_VERSION": "570.124.06"}  # fmt: skip
    env.pop("NVIDIA_VISIBLE_DEVICES", None)
    done = subprocess.run([sys.executable, "-c", LIST_CARDS], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    answers: dict[str, list[list[object]]] = {}
    for line in done.stdout.splitlines():
        answers.update(json.loads(line))
    assert "skipped" in answers, done.stdout + done.stderr
    return answers


def test_of_two_fake_cards_the_one_in_mig_mode_is_skipped_and_the_other_keeps_gpu_0(
    tmp_path: Path,
) -> None:
    build_workload(tmp_path, "int main(void) { return 0; }\n")  # builds the fake driver
    answers = list_cards("0,1")
    assert answers["shareable"] == [["gpu-0", CARD.format(0), 0, "570.124.06"]]
    assert answers["skipped"] == [[1, CARD.format(1), "mig-enabled"]]


def test_a_card_in_mig_mode_before_a_whole_one_leaves_the_whole_one_its_own_index(
    tmp_path: Path,
) -> None:
    build_workload(tmp_path, "int main(void) { return 0; }\n")
    answers = list_cards("1")  # missing entries are 0: the second card runs whole
    assert answers["shareable"] == [["gpu-1", CARD.format(1), 1, "570.124.06"]]
    assert answers["skipped"] == [[0, CARD.format(0), "mig-enabled"]]


def test_the_agent_whose_cards_are_all_in_mig_mode_waits_healthy_and_says_why(
    tmp_path: Path,
) -> None:
    """`vgpu-bridge node` itself over the fake NVML: nothing to publish, so it waits as on a node
    without GPUs, its /healthz and /metrics saying which cards are skipped and why."""
    build_workload(tmp_path, "int main(void) { return 0; }\n")
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("VGPU_")}
    env |= {"VGPU_BRIDGE_NODE_NAME": "mig-node", "LD_LIBRARY_PATH": str(FAKE_NVML),
            "FAKE_CUDA_DEVICES": "2", "FAKE_NVML_MIG_MODES": "1,1"}  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "vgpu_bridge.cli", "node", "--metrics-listen", f"127.0.0.1:{port}",
         "--kubeconfig", str(tmp_path / "no-kubeconfig")],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        status, body = first_healthz(process, port)
        assert status == 200
        assert json.loads(body)["waiting"] == (
            f"every card on this node is skipped: {CARD.format(0)} (mig-enabled), "
            f"{CARD.format(1)} (mig-enabled)"
        )
        metrics = get(port, "/metrics")[1]
        for index in (0, 1):
            gauge = (
                f'vgpu_bridge_agent_gpus_skipped{{gpu="{CARD.format(index)}",reason="mig-enabled"}}'
            )
            assert f"{gauge} 1.0" in metrics
        assert "vgpu_bridge_agent_waiting_for_gpus 1.0" in metrics
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=60)[0]
        assert process.returncode == 0, output
        assert output.count("card not published") == 2
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
