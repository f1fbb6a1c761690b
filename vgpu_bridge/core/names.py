"""The names we add to the objects we write. The names users write are the dialects'
(`core/dialects/hami.py`, `volcano.py`, `kai.py`)."""

from __future__ import annotations

TRANSLATED_LABEL = "vgpu-bridge.io/translated"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "vgpu-bridge"
