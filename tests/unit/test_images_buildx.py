"""`make images-buildx`, checked without BuildKit: the OCI layouts its named contexts point at
(an index of both architectures for the base, each blob named by its digest), the archive reader
that checks BuildKit's output, the buildx command (both platforms, BuildKit's own platform
arguments, a named context for every image argument), buildkitd's config, and the clean-up."""

from __future__ import annotations

import hashlib
import io
import json
import re
import socket
import tarfile
import tomllib
from pathlib import Path

import pytest

from e2e.kind.steps import StepError
from images import build, buildx, check, oci


def rootfs(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return path


def blob(layout: Path, digest: str) -> bytes:
    return (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()


def packed(layout: Path, archive: Path) -> Path:
    with tarfile.open(archive, "w") as tar:
        for path in sorted(layout.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(layout)))
    return archive


def test_a_base_of_two_architectures_is_an_index_buildkit_picks_each_targets_from(
    tmp_path: Path,
) -> None:
    tarballs = {
        "amd64": rootfs(tmp_path / "amd64.tar", {"usr/bin/python3.11": b"x86"}),
        "arm64": rootfs(tmp_path / "arm64.tar", {"usr/bin/python3.11": b"aarch64"}),
    }
    layout = tmp_path / "layout"
    digest = oci.write_layout(layout, tarballs, ["PATH=/usr/bin"], "test")
    (named,) = json.loads((layout / "index.json").read_text())["manifests"]
    assert named["digest"] == digest
    assert named["mediaType"] == oci.INDEX
    assert named["annotations"] == {"org.opencontainers.image.ref.name": "latest"}
    index = json.loads(blob(layout, digest))
    assert [entry["platform"] for entry in index["manifests"]] == [
        {"architecture": "amd64", "os": "linux"},
        {"architecture": "arm64", "os": "linux"},
    ]
    for entry, (arch, tarball) in zip(index["manifests"], sorted(tarballs.items()), strict=True):
        manifest = json.loads(blob(layout, entry["digest"]))
        (layer,) = manifest["layers"]
        assert layer["mediaType"] == oci.LAYER
        assert layer["digest"] == "sha256:" + hashlib.sha256(tarball.read_bytes()).hexdigest()
        assert layer["size"] == tarball.stat().st_size
        config = json.loads(blob(layout, manifest["config"]["digest"]))
        assert config["architecture"] == arch
        assert config["rootfs"]["diff_ids"] == [layer["digest"]]
    for path in (layout / "blobs" / "sha256").iterdir():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}


def test_one_architecture_is_named_by_its_manifest_and_reads_back(tmp_path: Path) -> None:
    tarball = rootfs(tmp_path / "gcc.tar", {"usr/bin/gcc": b"cc", "etc/os-release": b"deb"})
    layout = tmp_path / "layout"
    digest = oci.write_layout(layout, {"amd64": tarball}, ["PATH=/usr/bin"], "test")
    assert json.loads(blob(layout, digest))["mediaType"] == oci.MANIFEST
    with oci.read_archive(packed(layout, tmp_path / "gcc.oci.tar")) as archive:
        (image,) = archive.images()
        assert image.platform == "linux/amd64"
        (name, media_type) = image.layers[0]
        with archive.layer(name, media_type) as layer:
            assert sorted(entry.name for entry in layer) == ["etc/os-release", "usr/bin/gcc"]


def test_the_reader_skips_attestations_and_bounds_what_it_reads(tmp_path: Path) -> None:
    """BuildKit adds an attestation manifest per image by default: an empty config, in-toto
    layers, platform unknown/unknown."""
    layout = tmp_path / "layout"
    tarball = rootfs(tmp_path / "a.tar", {"a": b"a"})
    oci.write_layout(layout, {"amd64": tarball, "arm64": tarball}, [], "test")
    (named,) = json.loads((layout / "index.json").read_text())["manifests"]
    index = json.loads(blob(layout, named["digest"]))
    writer = oci.Layout(layout)
    config = writer.add_json("application/vnd.oci.empty.v1+json", {})
    manifest = {"schemaVersion": 2, "mediaType": oci.MANIFEST, "config": config, "layers": []}
    platform = {"architecture": "unknown", "os": "unknown"}
    index["manifests"].append({**writer.add_json(oci.MANIFEST, manifest), "platform": platform})
    writer.finish(writer.add_json(oci.INDEX, index), "latest")
    with oci.read_archive(packed(layout, tmp_path / "x.tar")) as archive:
        assert [image.platform for image in archive.images()] == ["linux/amd64", "linux/arm64"]
    (layout / "index.json").write_bytes(b" " * (oci.MAX_JSON_BYTES + 1))
    big = packed(layout, tmp_path / "big.tar")
    with oci.read_archive(big) as archive, pytest.raises(ValueError, match="more than"):
        archive.images()


def image_arguments(part: str) -> set[str]:
    """The Dockerfile's global arguments that name an image (what FROM lines expand)."""
    text = build.DOCKERFILES[part].read_text()
    return set(re.findall(r"^ARG (\w+_IMAGE)=", text, flags=re.MULTILINE))


@pytest.mark.parametrize("part", build.PARTS)
def test_buildx_builds_both_platforms_from_named_contexts(part: str, tmp_path: Path) -> None:
    contexts = {name: f"oci-layout:///x/{name}@sha256:0" for name in buildx.CONTEXT_NAMES.values()}
    labels = build.Labels("0.1.0", "abc", "https://example.invalid/")
    command = buildx.buildx_command(part, contexts, labels, tmp_path / "ctx", tmp_path / "out")
    assert command[:3] == ["docker", "buildx", "build"]
    assert "--platform=linux/amd64,linux/arm64" in command
    assert "--network=none" in command
    out = tmp_path / "out" / f"vgpu-bridge-{part}-0.1.0.oci.tar"
    assert f"--output=type=oci,dest={out}" in command
    given = dict(
        word.removeprefix("--build-arg=").split("=", 1)
        for word in command
        if word.startswith("--build-arg=")
    )
    named = {
        word.removeprefix("--build-context=").split("=", 1)[0]
        for word in command
        if word.startswith("--build-context=")
    }
    for argument in image_arguments(part):
        assert given[argument] in named
    assert not set(given) & {"BUILDPLATFORM", "TARGETARCH", "TARGETPLATFORM"}
    assert command[command.index("-f") + 1] == str(build.DOCKERFILES[part])
    assert command[-1] == str(tmp_path / "ctx")


def test_buildkitd_runs_the_given_runc_under_its_own_cgroup_and_run_dir() -> None:
    config = tomllib.loads(buildx.buildkitd_config(Path("/cache/realnode/bin/runc")))
    oci_worker = config["worker"]["oci"]
    assert oci_worker["binary"] == "/cache/realnode/bin/runc"
    assert oci_worker["defaultCgroupParent"] == buildx.CGROUP_PARENT
    assert config["worker"]["containerd"]["enabled"] is False
    assert Path(config["otel"]["socketPath"]).parent == buildx.RUN_DIR
    assert config["cdi"]["disabled"] is True


def test_the_build_containers_cgroups_are_removed_and_nothing_else(tmp_path: Path) -> None:
    for hierarchy in ("memory", "cpu", "unified"):
        (tmp_path / hierarchy / buildx.CGROUP_PARENT / "abc" / "nested").mkdir(parents=True)
        (tmp_path / hierarchy / "other").mkdir()
    (tmp_path / "pids").mkdir()
    (tmp_path / "cpuacct").symlink_to(tmp_path / "cpu")
    removed = buildx.remove_cgroups(tmp_path, buildx.CGROUP_PARENT)
    assert removed == [
        f"cgroup {tmp_path / name / buildx.CGROUP_PARENT}: removed"
        for name in ("cpu", "memory", "unified")
    ]
    assert sorted(p.name for p in (tmp_path / "memory").iterdir()) == ["other"]


def test_on_a_cgroup2_host_the_build_containers_cgroups_are_removed_too(tmp_path: Path) -> None:
    """Under cgroup v2 alone (Debian 12's default) /sys/fs/cgroup is the one hierarchy: runc puts
    the build containers in <root>/<parent>/<id>, beside system.slice and the root's files."""
    (tmp_path / buildx.CGROUP_PARENT / "abc" / "nested").mkdir(parents=True)
    (tmp_path / "system.slice" / "other").mkdir(parents=True)
    (tmp_path / "cgroup.procs").write_text("")
    removed = buildx.remove_cgroups(tmp_path, buildx.CGROUP_PARENT)
    assert removed == [f"cgroup {tmp_path / buildx.CGROUP_PARENT}: removed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cgroup.procs", "system.slice"]
    assert (tmp_path / "system.slice" / "other").is_dir()


def elf_header(machine: int) -> bytes:
    return b"\x7fELF" + bytes(14) + machine.to_bytes(2, "little")


def test_an_elf_file_of_another_machine_is_found(tmp_path: Path) -> None:
    arm64 = build.ARCHES["arm64"]
    (tmp_path / "site" / "grpc").mkdir(parents=True)
    (tmp_path / "site" / "grpc" / "cygrpc.so").write_bytes(elf_header(62))  # x86-64
    (tmp_path / "libvgpu.so").write_bytes(elf_header(183))  # aarch64
    (tmp_path / "os.py").write_text("import sys\n")
    (tmp_path / "link.so").symlink_to(tmp_path / "site" / "grpc" / "cygrpc.so")
    assert check.foreign_elf_files(tmp_path, arm64) == ["site/grpc/cygrpc.so"]
    assert check.foreign_elf_files(tmp_path, build.ARCHES["amd64"]) == ["libvgpu.so"]


def test_a_socket_a_killed_run_left_is_taken_over_and_a_live_one_refused(tmp_path: Path) -> None:
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as gone:
        gone.bind(str(stale))
    buildx.claim_socket(stale)
    assert not stale.exists()
    live = tmp_path / "live.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(live))
        server.listen(1)
        with pytest.raises(StepError, match="another make images-buildx runs"):
            buildx.claim_socket(live)
    buildx.claim_socket(tmp_path / "absent.sock")
