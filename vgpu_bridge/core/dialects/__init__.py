"""The request dialects users write today, one file each: `hami`, `volcano`, `kai`.

`translate()` reads them only through the `Dialect` interface and the merged lists below.
"""

from __future__ import annotations

from vgpu_bridge.core.dialects import hami, kai, volcano
from vgpu_bridge.core.dialects.dialect import AnnotationNames, Dialect, PodRequest

DIALECTS: tuple[Dialect, ...] = (hami.DIALECT, volcano.DIALECT, kai.DIALECT)

#: every dialect's annotations, HAMi's first where two mean the same
ANNOTATIONS = AnnotationNames.merged(d.annotations for d in DIALECTS)
#: extended resources translated into claims, then removed from the container
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
    "hami",
    "kai",
    "volcano",
]
