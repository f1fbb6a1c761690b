"""The node's GPUs: read from NVML on a real node, or from a mock file for tests and the demo.

The mock file is YAML, a list of `{uuid, productName, memory}` (memory a Kubernetes quantity),
optionally with `architecture`, `computeCapability`, `driverVersion` and `smCount`; the same list
may be given inline instead of a file's path. Mock cards may instead come from a label on the
agent's Node (`mock_cards.py`). GPUs are indexed in the
order listed (NVML's order on a real node), and the device published for GPU `i` is `gpu-<i>`.

On a real node a card NVML reports in MIG mode is not shareable (it runs no CUDA as a whole card):
`nvml_inventory` lists it as skipped, with its reason, and keeps the others' indexes, so a skipped
card never renames its neighbours' devices (see docs/mig.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
    sm_count: int | None = None  # multiprocessors; given for mock GPUs (the stand-in driver's)

    @property
    def device_name(self) -> str:
        """The device's name in the ResourceSlice (a DNS label, unique in the node's pool)."""
        return f"gpu-{self.index}"

    @property
    def device_node(self) -> str | None:
        return None if self.minor is None else f"/dev/nvidia{self.minor}"


Cards = Sequence[Gpu] | Callable[[], Sequence[Gpu]]
"""The node's cards: fixed (ours, read at start), or read when asked (NVIDIA's, enforcer mode)."""


def cards_now(cards: Cards) -> Callable[[], Sequence[Gpu]]:
    """What gives the cards as they are now."""
    if callable(cards):
        return cards
    fixed = tuple(cards)
    return lambda: fixed


MIG_ENABLED = "mig-enabled"  # the card's current MIG mode is on: only its MIG instances run CUDA
MIG_MODE_UNKNOWN = "mig-mode-unknown"  # NVML failed to say: not published, to be safe

# NVML's "this card or driver has no MIG": the card runs CUDA as a whole card
_NVML_NOT_SUPPORTED = 3
_NVML_FUNCTION_NOT_FOUND = 13


@dataclass(frozen=True, slots=True)
class SkippedGpu:
    """A card the agent does not publish, and why (`MIG_ENABLED`, `MIG_MODE_UNKNOWN`)."""

    index: int
    uuid: str
    reason: str


@dataclass(frozen=True, slots=True)
class Inventory:
    """The node's cards as NVML lists them: the shareable ones, and those skipped."""

    gpus: tuple[Gpu, ...]
    skipped: tuple[SkippedGpu, ...] = ()


class _MockGpu(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    uuid: str = Field(min_length=1, max_length=64)
    product_name: str = Field(alias="productName", min_length=1)
    memory: int
    architecture: str | None = None
    compute_capability: str | None = Field(default=None, alias="computeCapability")
    driver_version: str | None = Field(default=None, alias="driverVersion")
    sm_count: int | None = Field(default=None, alias="smCount", ge=1, le=1024)

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
                sm_count=mock.sm_count,
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
    """The shareable GPUs NVML lists (`nvml_inventory` without the skipped cards)."""
    return nvml_inventory(nvml).gpus


def nvml_inventory(nvml: Any = None) -> Inventory:
    """The cards NVML lists (`pynvml`, from nvidia-ml-py), each shareable or skipped with its
    reason; GpuDiscoveryError when NVML is unavailable or fails while listing.

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
        cards = [
            _nvml_card(nvml, index, driver_version) for index in range(nvml.nvmlDeviceGetCount())
        ]
    except Exception as exc:  # any NVML failure while reading makes the list unusable
        raise GpuDiscoveryError(f"NVML failed while listing GPUs: {exc}") from None
    finally:
        nvml.nvmlShutdown()
    return Inventory(
        gpus=tuple(card for card in cards if isinstance(card, Gpu)),
        skipped=tuple(card for card in cards if isinstance(card, SkippedGpu)),
    )


def _nvml_card(nvml: Any, index: int, driver_version: str) -> Gpu | SkippedGpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    reason = _skip_reason(nvml, handle)
    if reason is not None:
        return SkippedGpu(index=index, uuid=_text(nvml.nvmlDeviceGetUUID(handle)), reason=reason)
    return _nvml_gpu(nvml, index, handle, driver_version)


def _skip_reason(nvml: Any, handle: object) -> str | None:
    """Why the card must not be shared, or None. A card in MIG mode runs CUDA only in its MIG
    instances; a card or driver without MIG (NOT_SUPPORTED, or no such call) is a whole card;
    any other failure to say is not published, since sharing a MIG card fails every workload."""
    get_mig_mode = getattr(nvml, "nvmlDeviceGetMigMode", None)
    if get_mig_mode is None:
        return None
    try:
        current, _pending = get_mig_mode(handle)  # pending takes effect only after a reset
    except Exception as exc:  # NVMLError subclasses carry NVML's return code as `value`
        if getattr(exc, "value", None) in (_NVML_NOT_SUPPORTED, _NVML_FUNCTION_NOT_FOUND):
            return None
        return MIG_MODE_UNKNOWN
    return MIG_ENABLED if current else None


def _nvml_gpu(nvml: Any, index: int, handle: object, driver_version: str) -> Gpu:
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
