"""The node's GPUs: read from NVML on a real node, or from a mock file for tests and the demo.

The mock file is YAML, a list of `{uuid, productName, memory}` (memory a Kubernetes quantity),
optionally with `architecture`, `computeCapability` and `driverVersion`; the same list may be
given inline instead of a file's path. GPUs are indexed in the
order listed (NVML's order on a real node), and the device published for GPU `i` is `gpu-<i>`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from vgpu_bridge.core.quantity import QuantityError, parse_quantity


class GpuDiscoveryError(RuntimeError):
    """The GPUs could not be read: a bad mock file, or NVML unavailable."""


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU as the agent publishes and prepares it."""

    index: int
    uuid: str
    product_name: str
    memory: int  # bytes
    minor: int | None = None  # /dev/nvidia<minor>; None for a mock GPU (no device node)
    architecture: str | None = None
    compute_capability: str | None = None  # "9.0"
    driver_version: str | None = None  # "570.124.06"

    @property
    def device_name(self) -> str:
        """The device's name in the ResourceSlice (a DNS label, unique in the node's pool)."""
        return f"gpu-{self.index}"

    @property
    def device_node(self) -> str | None:
        return None if self.minor is None else f"/dev/nvidia{self.minor}"


class _MockGpu(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    uuid: str = Field(min_length=1, max_length=64)
    product_name: str = Field(alias="productName", min_length=1)
    memory: int
    architecture: str | None = None
    compute_capability: str | None = Field(default=None, alias="computeCapability")
    driver_version: str | None = Field(default=None, alias="driverVersion")

    @field_validator("memory", mode="before")
    @classmethod
    def _quantity(cls, value: object) -> int:
        try:
            size = parse_quantity(value)
        except QuantityError as exc:
            raise ValueError(str(exc)) from None
        if size < 2 * 2**20 or size != size.to_integral_value():
            raise ValueError(f"must be a whole number of bytes, at least 2Mi; got {value!r}")
        return int(size)


def parse_mock_gpus(document: object, *, source: str = "mock GPUs") -> tuple[Gpu, ...]:
    """GPUs from a parsed mock document (a list of mappings); GpuDiscoveryError says what is bad."""
    if not isinstance(document, Sequence) or isinstance(document, str):
        raise GpuDiscoveryError(f"{source}: expected a list of {{uuid, productName, memory}}")
    gpus = []
    for index, entry in enumerate(document):
        try:
            mock = _MockGpu.model_validate(entry)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors()
            )
            raise GpuDiscoveryError(f"{source}: [{index}]: {problems}") from None
        gpus.append(
            Gpu(
                index=index,
                uuid=mock.uuid,
                product_name=mock.product_name,
                memory=mock.memory,
                architecture=mock.architecture,
                compute_capability=mock.compute_capability,
                driver_version=mock.driver_version,
            )
        )
    uuids = [gpu.uuid for gpu in gpus]
    if len(set(uuids)) != len(uuids):
        raise GpuDiscoveryError(f"{source}: uuids must be unique")
    return tuple(gpus)


def load_mock_gpus(path: Path) -> tuple[Gpu, ...]:
    """GPUs from a mock YAML file."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise GpuDiscoveryError(f"{path}: {exc}") from None
    return parse_mock_gpus(document, source=str(path))


def mock_gpus(value: str) -> tuple[Gpu, ...]:
    """`--mock-gpus`: a YAML file's path, or the YAML list itself when it starts with `[`, handy
    in an env var: `VGPU_BRIDGE_MOCK_GPUS='[{uuid: GPU-0, productName: X, memory: 8Gi}]'`."""
    if value.lstrip().startswith("["):
        try:
            document = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise GpuDiscoveryError(f"inline mock GPUs: {exc}") from None
        return parse_mock_gpus(document, source="inline mock GPUs")
    return load_mock_gpus(Path(value))


def nvml_gpus(nvml: Any = None) -> tuple[Gpu, ...]:
    """GPUs from NVML (`pynvml`, from nvidia-ml-py); GpuDiscoveryError when NVML is unavailable.

    `nvml` is the module to use; tests of the conversion may pass an object with its API.
    """
    if nvml is None:
        import pynvml  # loaded only on nodes that use NVML

        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:  # pynvml raises NVMLError subclasses, or OSError without a driver
        raise GpuDiscoveryError(f"NVML is unavailable: {exc}") from None
    try:
        driver_version = _text(nvml.nvmlSystemGetDriverVersion())
        count = nvml.nvmlDeviceGetCount()
        return tuple(_nvml_gpu(nvml, index, driver_version) for index in range(count))
    except Exception as exc:  # any NVML failure while reading makes the list unusable
        raise GpuDiscoveryError(f"NVML failed while listing GPUs: {exc}") from None
    finally:
        nvml.nvmlShutdown()


def _nvml_gpu(nvml: Any, index: int, driver_version: str) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    major, minor_cc = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    return Gpu(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        product_name=_text(nvml.nvmlDeviceGetName(handle)),
        memory=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        minor=int(nvml.nvmlDeviceGetMinorNumber(handle)),
        architecture=_architecture(nvml, handle),
        compute_capability=f"{major}.{minor_cc}",
        driver_version=driver_version,
    )


_ARCHITECTURES: Mapping[str, str] = {
    "KEPLER": "Kepler",
    "MAXWELL": "Maxwell",
    "PASCAL": "Pascal",
    "VOLTA": "Volta",
    "TURING": "Turing",
    "AMPERE": "Ampere",
    "ADA": "Ada Lovelace",
    "HOPPER": "Hopper",
    "BLACKWELL": "Blackwell",
    "RUBIN": "Rubin",
}


def _architecture(nvml: Any, handle: object) -> str | None:
    """NVML's architecture constant by name (`NVML_DEVICE_ARCH_HOPPER` → "Hopper")."""
    try:
        value = nvml.nvmlDeviceGetArchitecture(handle)
    except Exception:  # older drivers lack the call: the attribute is simply not published
        return None
    for name, label in _ARCHITECTURES.items():
        if getattr(nvml, f"NVML_DEVICE_ARCH_{name}", object()) == value:
            return label
    return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
