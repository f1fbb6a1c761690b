"""The request dialects users write today, one file each: `hami`, `volcano`, `kai`.

`translate()` reads them only through the `Dialect` interface and the merged lists below.
"""

from __future__ import annotations

import functools

from vgpu_bridge.core.config import TranslatorConfig
from vgpu_bridge.core.dialects import hami, kai, volcano
from vgpu_bridge.core.dialects.dialect import AnnotationNames, Dialect, PodRequest

DIALECTS: tuple[Dialect, ...] = (hami.DIALECT, volcano.DIALECT, kai.DIALECT)


@functools.lru_cache(maxsize=16)  # a process has one config; made anew, 2 copies a translation
def dialects_for(config: TranslatorConfig) -> tuple[Dialect, ...]:
    """The dialects as this cluster names them (HAMi's resource names are configurable); the
    same (frozen) dialects for an equal config."""
    return (hami.for_config(config), volcano.for_config(config), kai.DIALECT)


def translated_resources(config: TranslatorConfig) -> frozenset[str]:
    """The extended resources translated under this cluster's names."""
    return frozenset(name for d in dialects_for(config) for name in d.resources)


#: every dialect's annotations, HAMi's first where two mean the same
ANNOTATIONS = AnnotationNames.merged(d.annotations for d in DIALECTS)
#: extended resources translated into claims under the default names, then removed
TRANSLATED_RESOURCES = frozenset(name for d in DIALECTS for name in d.resources)
#: pod annotations translated, then removed from the pod
TRANSLATED_ANNOTATIONS = frozenset(ANNOTATIONS.translated())

__all__ = [
    "ANNOTATIONS",
    "DIALECTS",
    "TRANSLATED_ANNOTATIONS",
    "TRANSLATED_RESOURCES",
    "AnnotationNames",
    "Dialect",
    "PodRequest",
    "dialects_for",
    "hami",
    "kai",
    "translated_resources",
    "volcano",
]
