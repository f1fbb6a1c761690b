"""The one interface `translate()` reads every request dialect (HAMi, Volcano, KAI) through."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Protocol

from vgpu_bridge.core.dialects.resources import ResourceNames, Resources, read_family
from vgpu_bridge.core.models import Problems, RawRequest
from vgpu_bridge.core.workloads import PodTemplate


@dataclass(frozen=True, slots=True)
class AnnotationNames:
    """The pod annotations a dialect reads, by what they mean."""

    use_types: tuple[str, ...] = ()  # product-name substrings to choose among
    avoid_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()  # exact uuids to choose among
    avoid_uuids: tuple[str, ...] = ()
    mode: tuple[str, ...] = ()  # the sharing mode ("mig" is refused)
    placement: tuple[str, ...] = ()  # hints left to the scheduler: kept, answered with a warning
    request: tuple[str, ...] = ()  # a GPU request stated in annotations (KAI)

    def device_choice(self) -> tuple[str, ...]:
        return self.use_types + self.avoid_types + self.use_uuids + self.avoid_uuids

    def translated(self) -> tuple[str, ...]:
        """Those translation removes from the pod."""
        return self.device_choice() + self.request

    def all(self) -> tuple[str, ...]:
        return self.translated() + self.mode + self.placement

    @staticmethod
    def merged(parts: Iterable[AnnotationNames]) -> AnnotationNames:
        """Every part's names, field by field, in the order of `parts`."""
        parts = tuple(parts)
        return AnnotationNames(
            **{
                f.name: sum((getattr(p, f.name) for p in parts), ())
                for f in fields(AnnotationNames)
            }
        )


@dataclass(frozen=True, slots=True)
class PodRequest:
    """A GPU request stated for the whole pod, and the container it belongs to."""

    raw: RawRequest
    container: object  # the container's name as the pod gives it
    container_path: str  # where that name came from, for error messages


class Dialect(Protocol):
    """One outside vocabulary for GPU requests: the names it owns and how it reads them."""

    @property
    def family(self) -> str:
        """How error messages name it, e.g. `HAMi`."""
        ...

    @property
    def resources(self) -> tuple[str, ...]:
        """The extended resources it owns (translated, then stripped), the count first."""
        ...

    @property
    def annotations(self) -> AnnotationNames:
        """The pod annotations it reads."""
        ...

    def read_resources(self, resources: Resources, *, path: str, problems: Problems) -> RawRequest:
        """A container's request from its own resources (called only when it names some)."""
        ...

    def read_pod(self, template: PodTemplate, *, problems: Problems) -> PodRequest | None:
        """A request stated for the pod as a whole; None when the dialect states none there."""
        ...

    def check_pod(
        self, template: PodTemplate, *, own: PodRequest | None, asks: bool, problems: Problems
    ) -> None:
        """The dialect's own rules for the pod as a whole. `own` is what `read_pod` returned;
        `asks` says whether any dialect found a GPU request in the pod."""
        ...


@dataclass(frozen=True, slots=True)
class ResourceDialect:
    """A dialect that states each container's request in its extended resources (HAMi, Volcano)."""

    names: ResourceNames
    annotations: AnnotationNames
    memory_factor: int = 1  # shapes the hint for a memory written with a unit

    @property
    def family(self) -> str:
        return self.names.family

    @property
    def resources(self) -> tuple[str, ...]:
        return self.names.all()

    def read_resources(self, resources: Resources, *, path: str, problems: Problems) -> RawRequest:
        return read_family(
            self.names, resources, path=path, problems=problems, memory_factor=self.memory_factor
        )

    def read_pod(self, template: PodTemplate, *, problems: Problems) -> PodRequest | None:
        return None

    def check_pod(
        self, template: PodTemplate, *, own: PodRequest | None, asks: bool, problems: Problems
    ) -> None:
        return None
