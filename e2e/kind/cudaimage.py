"""The real-node tier's CUDA test image, for kind pods: ``cudaprobe`` and ``cudalaunch`` over the
fake libcuda.so.1 (``e2e.realnode.build.ensure_native``), written as an OCI archive by the
real-node tier's image writer and loaded into the kind nodes with ``kind load image-archive``.
libvgpu.so is not in it: the agent's CDI spec mounts the one the chart's init container
installed on the node."""

from __future__ import annotations

from pathlib import Path

from e2e.realnode.build import IMAGE_DRIVER_DIR, RuntimeBinaries, ensure_native
from e2e.realnode.images import ImageSpec, shared_libraries, write_oci_archive

CUDA_IMAGE = "localhost/vgpu-kind-cuda:1"


def write_cuda_image(runtime: RuntimeBinaries, archive: Path) -> Path:
    native = ensure_native(runtime)
    files = {
        "/cudaprobe": native.cudaprobe,
        "/cudalaunch": native.cudalaunch,
        f"{IMAGE_DRIVER_DIR}/libcuda.so.1": native.fake_cuda,
        f"{IMAGE_DRIVER_DIR}/libnvidia-ml.so.1": native.fake_nvml,
        **shared_libraries(native.cudaprobe),
        **shared_libraries(native.cudalaunch),
        **shared_libraries(native.libvgpu),
    }
    spec = ImageSpec(
        CUDA_IMAGE,
        entrypoint=("/cudaprobe",),
        files=files,
        env=("PATH=/usr/bin:/bin", f"LD_LIBRARY_PATH={IMAGE_DRIVER_DIR}"),
    )
    archive.parent.mkdir(parents=True, exist_ok=True)
    write_oci_archive(spec, archive)
    return archive
