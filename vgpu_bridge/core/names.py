"""The names we add to the objects we write. The names users write are the dialects'
(`core/dialects/hami.py`, `volcano.py`, `kai.py`)."""

from __future__ import annotations

TRANSLATED_LABEL = "vgpu-bridge.io/translated"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "vgpu-bridge"
CLAIM_PREFIX = "gpu-"  # a translated pod's claim: gpu-<container>
OWN_MEMORY_ENV = "VGPU_CONTAINER_MEMORY_LIMIT"  # libvgpu: lowers CUDA_DEVICE_MEMORY_LIMIT_<i>
OWN_CORES_ENV = "VGPU_CONTAINER_SM_LIMIT"  # libvgpu: lowers CUDA_DEVICE_SM_LIMIT_<i>
