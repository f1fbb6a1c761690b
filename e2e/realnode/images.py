"""Container images without a registry: OCI image-layout tarballs written with the standard library.

An image here is one layer built from host files (``{path in the image: host file}``) plus
directories, and a config with an entrypoint. ``write_oci_archive`` writes what
``ctr images import`` takes: ``oci-layout``, ``index.json`` (whose manifest entry carries the
``io.containerd.image.name`` annotation, the name containerd gives the image) and the blobs.
Everything is deterministic (mtime 0, sorted entries), so the same inputs give the same digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"


@dataclass(frozen=True)
class ImageSpec:
    """What goes into the one layer and the config of an image called ``name``."""

    name: str
    entrypoint: tuple[str, ...]
    #: image path (absolute) -> host file; symlinks are followed, the mode is kept
    files: Mapping[str, Path]
    directories: tuple[str, ...] = ("/etc", "/tmp", "/proc", "/sys", "/dev")
    env: tuple[str, ...] = ("PATH=/usr/local/bin:/usr/bin:/bin",)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WrittenImage:
    name: str
    archive: Path
    manifest_digest: str
    config_digest: str


def layer_bytes(spec: ImageSpec) -> bytes:
    """The uncompressed layer tar: parent directories first, then files, all owned by root."""
    directories: set[str] = set()
    for path in (*spec.directories, *spec.files):
        parts = Path(path).relative_to("/").parts
        limit = len(parts) if path in spec.directories else len(parts) - 1
        for depth in range(1, limit + 1):
            directories.add("/".join(parts[:depth]))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in sorted(directories):
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        for image_path in sorted(spec.files):
            host = spec.files[image_path].resolve()
            data = host.read_bytes()
            info = tarfile.TarInfo(image_path.lstrip("/"))
            info.size = len(data)
            info.mode = host.stat().st_mode & 0o7777
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def write_oci_archive(spec: ImageSpec, archive: Path) -> WrittenImage:
    """Write ``spec`` as an OCI image-layout tar at ``archive`` (replaced atomically)."""
    layer = layer_bytes(spec)
    layer_digest = _digest(layer)
    config = _json_bytes(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Entrypoint": list(spec.entrypoint),
                "Env": list(spec.env),
                "WorkingDir": "/",
                "Labels": dict(spec.labels),
            },
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "history": [{"created_by": "e2e/realnode/images.py"}],
        }
    )
    manifest = _json_bytes(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": _descriptor(CONFIG_MEDIA_TYPE, config),
            "layers": [_descriptor(LAYER_MEDIA_TYPE, layer)],
        }
    )
    manifest_entry = _descriptor(MANIFEST_MEDIA_TYPE, manifest)
    manifest_entry["annotations"] = {
        "io.containerd.image.name": spec.name,
        "org.opencontainers.image.ref.name": spec.name.rsplit(":", 1)[-1],
    }
    manifest_entry["platform"] = {"architecture": "amd64", "os": "linux"}
    index = _json_bytes(
        {"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": [manifest_entry]}
    )
    members = {
        "oci-layout": _json_bytes({"imageLayoutVersion": "1.0.0"}),
        "index.json": index,
        **{_blob_path(blob): blob for blob in (layer, config, manifest)},
    }
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for name in sorted(members):
            data = members[name]
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    partial.replace(archive)
    return WrittenImage(spec.name, archive, _digest(manifest), _digest(config))


_LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")


def shared_libraries(binary: Path) -> dict[str, Path]:
    """The loader and libraries ``ldd`` lists for a dynamic ``binary``, at the paths it names."""
    done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True)
    found: dict[str, Path] = {}
    for line in done.stdout.splitlines():
        match = _LDD_LINE.search(line)
        if match is not None:
            found[match.group(1)] = Path(match.group(1))
    if not found:
        raise ValueError(f"{binary}: ldd lists no shared library (is it static?)")
    return found


def _descriptor(media_type: str, blob: bytes) -> dict[str, object]:
    return {"mediaType": media_type, "digest": _digest(blob), "size": len(blob)}


def _digest(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def _blob_path(blob: bytes) -> str:
    return "blobs/sha256/" + hashlib.sha256(blob).hexdigest()


def _json_bytes(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
