"""KAI's request dialect: sharing stated in pod annotations, without a prefix (kai.md §1).

- `gpu-fraction` (a decimal in (0, 1], the share of each card's memory) or `gpu-memory` (MiB),
  never both; `gpu-fraction-num-devices` (cards) only beside one of them.
- The request belongs to the container named by `gpu-fraction-container-name`, else to the first
  container; that container must not also ask through its resources.
- KAI refuses its own sharing on nodes with DRA GPUs, so every one of these annotations is
  removed once translated, `mps` too (KAI accepts it only beside a fraction).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from vgpu_bridge.core.dialects.dialect import AnnotationNames, PodRequest
from vgpu_bridge.core.dialects.resources import (
    MAX_DEVICES,
    MAX_MEMORY_MIB,
    Resources,
    plain_mib,
    whole_number,
)
from vgpu_bridge.core.errors import shown
from vgpu_bridge.core.models import Problems, RawRequest
from vgpu_bridge.core.workloads import PodTemplate

FRACTION = "gpu-fraction"
MEMORY = "gpu-memory"
NUM_DEVICES = "gpu-fraction-num-devices"
CONTAINER_NAME = "gpu-fraction-container-name"
MPS = "mps"
WHOLE_GPU = "nvidia.com/gpu"  # KAI's own name for whole cards (not HAMi's configurable one)
ANNOTATIONS = AnnotationNames(request=(FRACTION, MEMORY, NUM_DEVICES, CONTAINER_NAME, MPS))


def _path(meta_path: str, key: str) -> str:
    return f"{meta_path}.annotations[{key}]"


class KaiDialect:
    family = "KAI"
    resources: tuple[str, ...] = ()
    annotations = ANNOTATIONS

    def read_resources(self, resources: Resources, *, path: str, problems: Problems) -> RawRequest:
        """KAI states no request in resources: never called, as it owns none."""
        return RawRequest()

    def read_pod(self, template: PodTemplate, *, problems: Problems) -> PodRequest | None:
        """The pod's request and the container it belongs to; None when the pod states none."""
        annotations, meta_path = template.annotations, template.metadata_path
        raw = read_request(annotations, meta_path=meta_path, problems=problems)
        if raw is None:
            return None
        named = annotations.get(CONTAINER_NAME)
        containers = template.spec.get("containers") or ()
        target = named if named is not None else (containers[0].get("name") if containers else None)
        return PodRequest(raw, target, _path(meta_path, CONTAINER_NAME))

    def check_pod(
        self, template: PodTemplate, *, own: PodRequest | None, asks: bool, problems: Problems
    ) -> None:
        """KAI's validator (gpu_request_validator.go): `mps: "true"` only beside a fraction or
        gpu-memory, and a fraction or gpu-memory pod has no whole-GPU request anywhere."""
        meta_path = template.metadata_path
        if own is None:
            if asks and str(template.annotations.get(MPS, "")).strip() == "true":
                problems.add(
                    _path(meta_path, MPS), f"is only valid beside {FRACTION} or {MEMORY}, as in KAI"
                )
            return
        _refuse_whole_gpus(template, own, problems)


def _refuse_whole_gpus(template: PodTemplate, own: PodRequest, problems: Problems) -> None:
    """Other containers that ask for whole cards; the request's own container is refused for
    asking twice where requests are assembled."""
    spec_path = template.spec_path
    for list_name in ("initContainers", "containers"):
        for index, body in enumerate(template.spec.get(list_name) or ()):
            if not isinstance(body, Mapping) or body.get("name") == own.container:
                continue
            resources = body.get("resources")
            sections = resources if isinstance(resources, Mapping) else {}
            for section in ("limits", "requests"):
                names = sections.get(section)
                if isinstance(names, Mapping) and WHOLE_GPU in names:
                    problems.add(
                        f"{spec_path}.{list_name}[{index}].resources.{section}[{WHOLE_GPU}]",
                        f"cannot be combined with the pod's {FRACTION} or {MEMORY} annotation: "
                        "KAI refuses a whole GPU beside a fractional request",
                    )
                    break


def read_request(
    annotations: Mapping[str, Any], *, meta_path: str, problems: Problems
) -> RawRequest | None:
    """`gpu-fraction` / `gpu-memory` (+ `gpu-fraction-num-devices`) as a request."""
    fraction, memory = annotations.get(FRACTION), annotations.get(MEMORY)
    devices = annotations.get(NUM_DEVICES)
    if fraction is None and memory is None:
        if devices is not None:
            problems.add(_path(meta_path, NUM_DEVICES), f"needs {FRACTION} or {MEMORY} beside it")
        return None
    raw = RawRequest()
    if fraction is not None and memory is not None:
        problems.add(_path(meta_path, MEMORY), f"cannot be combined with {FRACTION}")
        return None
    if fraction is not None:
        raw.memory_percent = _fraction_percent(
            fraction, path=_path(meta_path, FRACTION), problems=problems
        )
        raw.sources["memory_percent"] = _path(meta_path, FRACTION)
    elif plain_mib(memory, name=MEMORY, factor=1, path=_path(meta_path, MEMORY), problems=problems):
        raw.memory_mib = whole_number(
            memory, path=_path(meta_path, MEMORY), low=1, high=MAX_MEMORY_MIB, unit=" of MiB",
            problems=problems,
        )  # fmt: skip
        raw.sources["memory_mib"] = _path(meta_path, MEMORY)
    if devices is not None:
        raw.count = whole_number(
            devices, path=_path(meta_path, NUM_DEVICES), low=1, high=MAX_DEVICES,
            unit=" of GPUs", problems=problems,
        )  # fmt: skip
        raw.sources["count"] = _path(meta_path, NUM_DEVICES)
    return raw if raw.asks_for_gpu() else None


def _fraction_percent(value: object, *, path: str, problems: Problems) -> Decimal | None:
    reason = f"must be a decimal greater than 0 and at most 1, got {shown(value)}"
    try:
        fraction = Decimal(str(value).strip()) if isinstance(value, str | int | float) else None
    except InvalidOperation:
        fraction = None
    if fraction is None or not fraction.is_finite() or not 0 < fraction <= 1:
        problems.add(path, reason)
        return None
    return fraction * 100


DIALECT = KaiDialect()
