"""`GpuShareConfig`: our driver's opaque claim config, the one contract from webhook to node.

Core writes it into a claim (`spec.devices.config[].opaque.parameters`); the node agent reads it
back from the allocation with `parse_share_config` and turns it into the container's environment
(`priority` -> `CUDA_TASK_PRIORITY`). On NVIDIA's driver, where the card's own driver books the
share, our enforcer reads `cores` too: the SM limit the user asked for (HAMi's `gpucores`).
Like the configs of the DRA example driver (`gpu.resource.example.com/v1alpha1` `GpuConfig`) and
of NVIDIA's driver (`resource.nvidia.com/v1beta1` `GpuConfig`), it names itself with `apiVersion`
and `kind`, which do not change when the driver is renamed: `opaque.driver` says whose it is,
`apiVersion` what it says.

Reading is strict: an unknown `apiVersion`/`kind`, an unknown field or a value out of range is a
`ShareConfigError` naming the field. Each readable `apiVersion` has an entry in `READERS`; a
future version adds its model and a reader that converts an older one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

API_VERSION: Final = "gpu.vgpu-bridge.io/v1alpha1"
KIND: Final = "GpuShareConfig"


class ShareConfigError(ValueError):
    """The parameters are not a config we can honour; the message names the field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuShareConfig:
    """What a claim asks of our driver beyond its capacities (v1alpha1)."""

    # HAMi's nvidia.com/priority: 0 is high, 1 is low (libvgpu's CUDA_TASK_PRIORITY)
    priority: int | None = None
    # HAMi's gpucores as the SM limit in percent (0: none); written for shares on NVIDIA's driver
    cores: int | None = None

    def __post_init__(self) -> None:
        problems = []
        priority = self.priority  # strictly 0 or 1: never True, never "1"
        if priority is not None and not (type(priority) is int and priority in (0, 1)):
            problems.append(f"priority: must be 0 (high) or 1 (low), got {_short(priority)}")
        cores = self.cores  # strictly an int 0..100: never True, never "5", never 5.0
        if cores is not None and not (type(cores) is int and 0 <= cores <= 100):
            problems.append(f"cores: must be a whole percent 0..100, got {_short(cores)}")
        if problems:
            raise ShareConfigError("; ".join(problems))

    def to_parameters(self) -> dict[str, Any]:
        """The JSON object that goes into `opaque.parameters` (unset fields left out)."""
        parameters: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND}
        if self.priority is not None:
            parameters["priority"] = self.priority
        if self.cores is not None:
            parameters["cores"] = self.cores
        return parameters


def _read_v1alpha1(parameters: Mapping[str, Any]) -> GpuShareConfig:
    unknown = [str(name)[:60] for name in parameters if name not in _V1ALPHA1_FIELDS]
    problems = [f"{name}: unknown field" for name in unknown[:5]]
    try:
        config = GpuShareConfig(priority=parameters.get("priority"), cores=parameters.get("cores"))
    except ShareConfigError as error:
        problems.append(str(error))
    if problems:
        raise ShareConfigError("; ".join(problems))
    return config


_V1ALPHA1_FIELDS = frozenset({"apiVersion", "kind", "priority", "cores"})


READERS: Mapping[tuple[object, object], Callable[[Mapping[str, Any]], GpuShareConfig]] = {
    (API_VERSION, KIND): _read_v1alpha1,
}


def parse_share_config(parameters: object) -> GpuShareConfig:
    """The config in `parameters` (an `opaque.parameters` object), or ShareConfigError."""
    if not isinstance(parameters, Mapping):
        raise ShareConfigError(f"must be an object, got {type(parameters).__name__}")
    identity = (parameters.get("apiVersion"), parameters.get("kind"))
    reader = READERS.get(identity) if all(isinstance(i, str) for i in identity) else None
    if reader is None:
        raise ShareConfigError(
            f"apiVersion/kind: expected apiVersion {API_VERSION} kind {KIND}, "
            f"got {_short(identity[0])} {_short(identity[1])}"
        )
    return reader(parameters)


def _short(value: object, limit: int = 60) -> str:
    """A value as an error quotes it: strings and numbers cut at `limit`, containers by kind."""
    if isinstance(value, dict | list | tuple):
        return f"a {type(value).__name__}"
    text = repr(value) if not isinstance(value, str) or value else "''"
    return text if len(text) <= limit else text[: limit - 3] + "..."
