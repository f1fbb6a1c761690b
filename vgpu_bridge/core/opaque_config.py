"""`GpuShareConfig`: our driver's opaque claim config, the one contract from webhook to node.

Core writes it into a claim (`spec.devices.config[].opaque.parameters`); the node agent reads it
back from the allocation with `parse_share_config` and turns it into the container's environment
(`priority` -> `CUDA_TASK_PRIORITY`). Like the configs of the DRA example driver
(`gpu.resource.example.com/v1alpha1` `GpuConfig`) and of NVIDIA's driver
(`resource.nvidia.com/v1beta1` `GpuConfig`), it names itself with `apiVersion` and `kind`, which do
not change when the driver is renamed: `opaque.driver` says whose it is, `apiVersion` what it says.

Reading is strict: an unknown `apiVersion`/`kind`, an unknown field or a value out of range is a
`ShareConfigError` naming the field. Each readable `apiVersion` has an entry in `READERS`; a
future version adds its model and a reader that converts an older one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

API_VERSION: Final = "gpu.vgpu-bridge.io/v1alpha1"
KIND: Final = "GpuShareConfig"


class ShareConfigError(ValueError):
    """The parameters are not a config we can honour; the message names the field."""


class GpuShareConfig(BaseModel):
    """What a claim asks of our driver beyond its capacities (v1alpha1)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    api_version: Literal["gpu.vgpu-bridge.io/v1alpha1"] = Field(
        default=API_VERSION, alias="apiVersion"
    )
    kind: Literal["GpuShareConfig"] = KIND
    # HAMi's nvidia.com/priority: 0 is high, 1 is low (libvgpu's CUDA_TASK_PRIORITY)
    priority: int | None = Field(default=None, ge=0, le=1, strict=True)

    def to_parameters(self) -> dict[str, Any]:
        """The JSON object that goes into `opaque.parameters` (unset fields left out)."""
        return self.model_dump(by_alias=True, exclude_none=True)


def _read_v1alpha1(parameters: Mapping[str, Any]) -> GpuShareConfig:
    try:
        return GpuShareConfig.model_validate(dict(parameters))
    except ValidationError as error:
        raise ShareConfigError("; ".join(_describe(e) for e in error.errors())) from None


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


def _describe(error: Mapping[str, Any]) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "parameters"
    if error["type"] == "extra_forbidden":
        return f"{field}: unknown field"
    if field == "priority":
        return f"priority: must be 0 (high) or 1 (low), got {_short(error['input'])}"
    return f"{field}: {error['msg']}, got {_short(error['input'])}"


def _short(value: object, limit: int = 60) -> str:
    """A value as an error quotes it: strings and numbers cut at `limit`, containers by kind."""
    if isinstance(value, dict | list | tuple):
        return f"a {type(value).__name__}"
    text = repr(value) if not isinstance(value, str) or value else "''"
    return text if len(text) <= limit else text[: limit - 3] + "..."
