"""OCI image layouts and archives, read and written without a registry or a Docker engine.

``write_layout`` turns root filesystem tarballs (one per architecture) into an OCI image layout
that BuildKit takes as a named build context (``--build-context NAME=oci-layout://DIR@DIGEST``):
one uncompressed layer per image, a config naming its architecture, and, for several
architectures, an image index whose entries carry their platforms (BuildKit picks each target's).
``read_archive`` reads back what ``docker buildx build --output type=oci,dest=FILE`` wrote.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tarfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

LAYER = "application/vnd.oci.image.layer.v1.tar"
LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
#: Docker's media types, which BuildKit's docker exporter and older images use
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_INDEX = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
#: an index or manifest larger than this is not one of ours (JSON read whole into memory)
MAX_JSON_BYTES = 4 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def descriptor(media_type: str, digest: str, size: int, **extra: object) -> dict[str, object]:
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": size, **extra}


class Layout:
    """An OCI image layout directory being written: blobs by digest, then ``index.json``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.blobs = directory / "blobs" / "sha256"
        self.blobs.mkdir(parents=True, exist_ok=True)
        (directory / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))

    def add_json(self, media_type: str, content: object) -> dict[str, object]:
        data = json.dumps(content, sort_keys=True).encode()
        digest = hashlib.sha256(data).hexdigest()
        (self.blobs / digest).write_bytes(data)
        return descriptor(media_type, digest, len(data))

    def add_file(self, media_type: str, path: Path) -> dict[str, object]:
        """``path`` as a blob: hard-linked when on the same filesystem (a rootfs is large)."""
        digest = sha256_of(path)
        blob = self.blobs / digest
        if not blob.exists():
            try:
                os.link(path, blob)
            except OSError:
                blob.write_bytes(path.read_bytes())
        return descriptor(media_type, digest, path.stat().st_size)

    def finish(self, top: dict[str, object], ref_name: str) -> str:
        """Write ``index.json`` naming ``top`` as ``ref_name``; returns ``top``'s digest."""
        named = {**top, "annotations": {"org.opencontainers.image.ref.name": ref_name}}
        index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [named]}
        (self.directory / "index.json").write_text(json.dumps(index, sort_keys=True))
        return str(top["digest"])


def image_config(arch: str, diff_id: str, env: list[str], created_by: str) -> dict[str, object]:
    return {
        "architecture": arch,
        "os": "linux",
        "config": {"Env": env},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created_by": created_by}],
    }


def write_layout(
    directory: Path, rootfs: Mapping[str, Path], env: list[str], created_by: str
) -> str:
    """An OCI layout at ``directory`` of one image per architecture (``rootfs``: arch -> root
    filesystem tarball, one layer); returns the digest to name it by: the manifest's with one
    architecture, else the image index's."""
    layout = Layout(directory)
    manifests = []
    for arch, tarball in sorted(rootfs.items()):
        layer = layout.add_file(LAYER, tarball)
        diff_id = str(layer["digest"]).removeprefix("sha256:")
        config = layout.add_json(CONFIG, image_config(arch, diff_id, env, created_by))
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST, "config": config, "layers": [layer]}
        entry = layout.add_json(MANIFEST, manifest)
        manifests.append({**entry, "platform": {"architecture": arch, "os": "linux"}})
    if len(manifests) == 1:
        top = {k: v for k, v in manifests[0].items() if k != "platform"}
    else:
        top = layout.add_json(
            INDEX, {"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests}
        )
    return layout.finish(top, "latest")


@dataclass(frozen=True)
class Image:
    """One platform's image in an OCI archive: its config and its layers' blob names."""

    platform: str
    config: dict[str, Any]
    layers: list[tuple[str, str]]  # (blob member name, media type)


class Archive:
    """An OCI layout as a tar file (``--output type=oci,dest=FILE``), opened for reading."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar

    def json(self, name: str) -> Any:
        member = self.tar.getmember(name)
        if member.size > MAX_JSON_BYTES:
            raise ValueError(f"{name}: {member.size} bytes, more than {MAX_JSON_BYTES}")
        source = self.tar.extractfile(member)
        if source is None:
            raise ValueError(f"{name}: not a file")
        return json.loads(source.read())

    def blob(self, digest: str) -> Any:
        return self.json("blobs/" + digest.replace(":", "/"))

    def images(self) -> list[Image]:
        """Every platform's image: index.json -> (an index ->) manifests."""
        found: list[Image] = []
        pending = list(self.json("index.json")["manifests"])
        while pending:
            entry = pending.pop(0)
            if entry["mediaType"] in (INDEX, DOCKER_INDEX):
                pending += self.blob(entry["digest"])["manifests"]
                continue
            if entry["mediaType"] not in (MANIFEST, DOCKER_MANIFEST):
                continue
            manifest = self.blob(entry["digest"])
            if manifest["config"]["mediaType"] not in (CONFIG, DOCKER_CONFIG):
                continue  # not an image: BuildKit's attestation manifests (empty config)
            config = self.blob(manifest["config"]["digest"])
            platform = f"{config['os']}/{config['architecture']}"
            layers = [
                ("blobs/" + layer["digest"].replace(":", "/"), layer["mediaType"])
                for layer in manifest["layers"]
            ]
            found.append(Image(platform, config, layers))
        return found

    @contextmanager
    def layer(self, name: str, media_type: str) -> Iterator[tarfile.TarFile]:
        """One layer's tar stream (gzip or plain)."""
        source = self.tar.extractfile(name)
        if source is None:
            raise ValueError(f"{name}: not a file")
        stream: IO[bytes] | gzip.GzipFile = source
        if "gzip" in media_type:
            stream = gzip.GzipFile(fileobj=source)
        with tarfile.open(fileobj=stream, mode="r|") as layer:
            yield layer


@contextmanager
def read_archive(path: Path) -> Iterator[Archive]:
    with tarfile.open(path) as tar:
        yield Archive(tar)
