"""Mock GPU files (the tests' and the demo's GPUs) and the NVML conversion, without a GPU."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from vgpu_bridge.node.gpus import (
    Gpu,
    GpuDiscoveryError,
    load_mock_gpus,
    mock_gpus,
    nvml_gpus,
    parse_mock_gpus,
)

BAD = Path(__file__).resolve().parents[2] / "data" / "node" / "mock-bad"


def test_mock_gpus_are_indexed_in_file_order_with_memory_in_bytes() -> None:
    gpus = parse_mock_gpus(
        [
            {"uuid": "GPU-a", "productName": "NVIDIA H100", "memory": "80Gi"},
            {"uuid": "GPU-b", "productName": "NVIDIA A100", "memory": 42949672960},
        ]
    )
    assert gpus == (
        Gpu(index=0, uuid="GPU-a", product_name="NVIDIA H100", memory=80 * 2**30),
        Gpu(index=1, uuid="GPU-b", product_name="NVIDIA A100", memory=40 * 2**30),
    )
    assert [g.device_name for g in gpus] == ["gpu-0", "gpu-1"]
    assert gpus[0].device_node is None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("too-small.yaml", "at least 2Mi"),
        ("duplicate-uuid.yaml", "uuids must be unique"),
        ("bad-quantity.yaml", "'lots' is not a quantity"),
        ("not-a-list.yaml", "expected a list"),
        ("unknown-field.yaml", "colour"),
        ("missing-product.yaml", "productName"),
        ("not-yaml.yaml", "not-yaml.yaml"),
    ],
)
def test_a_bad_mock_file_is_refused_with_its_name_and_reason(name: str, message: str) -> None:
    with pytest.raises(GpuDiscoveryError, match=message) as caught:
        load_mock_gpus(BAD / name)
    assert name in str(caught.value)


def test_a_missing_mock_file_is_a_discovery_error(tmp_path: Path) -> None:
    with pytest.raises(GpuDiscoveryError, match=r"absent\.yaml"):
        load_mock_gpus(tmp_path / "absent.yaml")


def _fake_nvml(*, fail_init: bool = False) -> SimpleNamespace:
    """The slice of pynvml's API the backend calls, answering like a two-GPU node would."""
    calls: list[str] = []

    def init() -> None:
        if fail_init:
            raise OSError("NVML Shared Library Not Found")

    hopper, ampere = 9, 7
    return SimpleNamespace(
        calls=calls,
        NVML_DEVICE_ARCH_HOPPER=hopper,
        NVML_DEVICE_ARCH_AMPERE=ampere,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlSystemGetDriverVersion=lambda: b"570.124.06",
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0) if h == 0 else (8, 0),
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetName=lambda h: b"NVIDIA H200" if h == 0 else b"NVIDIA A100",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(
            total=150754820096 if h == 0 else 40 * 2**30
        ),
        nvmlDeviceGetMinorNumber=lambda h: h + 4,
        nvmlDeviceGetArchitecture=lambda h: hopper if h == 0 else 99,
    )


def test_nvml_gpus_carry_index_minor_versions_and_architecture() -> None:
    nvml = _fake_nvml()
    h200, other = nvml_gpus(nvml)
    assert h200 == Gpu(
        index=0,
        uuid="GPU-0",
        product_name="NVIDIA H200",
        memory=150754820096,
        minor=4,
        architecture="Hopper",
        compute_capability="9.0",
        driver_version="570.124.06",
    )
    assert h200.device_node == "/dev/nvidia4"
    assert other.architecture is None  # an architecture NVML names but we do not know
    assert nvml.calls == ["shutdown"]


def test_nvml_without_a_driver_is_a_discovery_error() -> None:
    with pytest.raises(GpuDiscoveryError, match="NVML is unavailable"):
        nvml_gpus(_fake_nvml(fail_init=True))


def test_the_real_nvml_module_imports_and_fails_cleanly_without_a_gpu() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        with pytest.raises(GpuDiscoveryError, match="NVML is unavailable"):
            nvml_gpus()
    else:  # a machine with a GPU: the real backend must list it
        pynvml.nvmlShutdown()
        assert nvml_gpus()


def test_mock_gpus_come_from_a_file_or_inline_yaml(tmp_path: Path) -> None:
    listed = "[{uuid: GPU-a, productName: NVIDIA L4, memory: 24Gi}]"
    (tmp_path / "gpus.yaml").write_text(listed)
    expected = (Gpu(index=0, uuid="GPU-a", product_name="NVIDIA L4", memory=24 * 2**30),)
    assert mock_gpus(str(tmp_path / "gpus.yaml")) == expected
    assert mock_gpus(listed) == expected
    with pytest.raises(GpuDiscoveryError, match="inline mock GPUs"):
        mock_gpus("[{uuid: GPU-a")
