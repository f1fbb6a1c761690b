"""The images `make images` ships, checked without Docker: what the Dockerfiles declare (OCI
labels, the webhook's non-root user, a final stage of COPY only so an arm64 image is assembled
without running arm64 code, build stages on the build machine's platform and the target's
architecture from BuildKit's automatic arguments, the extra each image installs, what BuildKit
sends of the context), that the sh and Python halves agree on pip's platforms, and how the sizes
table is made from a `docker save` archive."""

from __future__ import annotations

import hashlib
import io
import json
import platform
import re
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest

from images import build, check

REPO = Path(__file__).resolve().parents[2]
OCI_LABELS = {"version": "${VERSION}", "revision": "${REVISION}", "source": "${SOURCE}"}


def instructions(part: str) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments left out."""
    text = build.DOCKERFILES[part].read_text()
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line for line in joined.splitlines() if line and not line.startswith("#")]


def stages(part: str) -> list[list[str]]:
    """The instructions of each stage, its FROM first; the global ARGs before them left out."""
    found: list[list[str]] = []
    for line in instructions(part):
        if line.startswith("FROM "):
            found.append([])
        if found:
            found[-1].append(line)
    return found


def final_stage(part: str) -> list[str]:
    """The last stage's instructions."""
    return stages(part)[-1]


def labels(part: str) -> dict[str, str]:
    (line,) = [line for line in final_stage(part) if line.startswith("LABEL ")]
    return dict(re.findall(r'(\S+)="([^"]*)"', line))


@pytest.mark.parametrize("part", build.PARTS)
def test_images_carry_the_oci_labels(part: str) -> None:
    found = labels(part)
    for key, value in OCI_LABELS.items():
        assert found[f"org.opencontainers.image.{key}"] == value
    license_expression = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"]
    assert found["org.opencontainers.image.licenses"] == license_expression == build.LICENSE
    assert found["org.opencontainers.image.title"] == f"vgpu-bridge-{part}"
    arguments = {
        line.split()[1].split("=")[0] for line in final_stage(part) if line.startswith("ARG")
    }
    assert {"VERSION", "REVISION", "SOURCE"} <= arguments


def test_the_labels_built_name_the_checkout() -> None:
    labels = build.Labels.of_checkout().oci()
    revision = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert labels["org.opencontainers.image.revision"] == revision
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.source"].startswith("https://")


def test_the_webhook_runs_as_65532_and_the_agent_as_root() -> None:
    users = {
        part: [line for line in final_stage(part) if line.startswith("USER ")]
        for part in build.PARTS
    }
    assert users["webhook"] == [f"USER {check.WEBHOOK_USER}"]
    assert users["agent"] == []
    passwd = (REPO / "images" / "base" / "etc" / "passwd").read_text()
    assert "nonroot:x:65532:65532:" in passwd


@pytest.mark.parametrize("part", build.PARTS)
def test_the_image_itself_only_copies(part: str) -> None:
    """No RUN in the last stage: nothing of the image's architecture runs while it is built."""
    instructions = {line.split()[0] for line in final_stage(part)}
    assert instructions <= {"FROM", "ARG", "LABEL", "COPY", "ENV", "USER", "ENTRYPOINT", "CMD"}
    assert any(
        line.startswith("COPY --from=site /opt/vgpu-bridge/site ") for line in final_stage(part)
    )


#: the arguments BuildKit sets itself from --platform and the build machine (none in the legacy
#: builder of docker 20.10, which `make images` uses)
AUTOMATIC_PLATFORM_ARGS = (
    "BUILDPLATFORM", "BUILDOS", "BUILDARCH", "BUILDVARIANT",
    "TARGETPLATFORM", "TARGETOS", "TARGETARCH", "TARGETVARIANT",
)  # fmt: skip


@pytest.mark.parametrize("part", build.PARTS)
def test_the_stages_that_run_run_on_the_build_machine(part: str) -> None:
    """`docker buildx build --platform linux/amd64,linux/arm64` builds a stage without
    --platform once per target: a build stage would RUN arm64 code (under emulation, or not at
    all); the image's own stage must be per target, so it gets each target's base."""
    *build_stages, image = stages(part)
    assert build_stages
    for stage in build_stages:
        assert stage[0].startswith("FROM --platform=$BUILDPLATFORM "), stage[0]
    assert not image[0].startswith("FROM --platform"), image[0]


def automatic_args_read(part: str) -> set[str]:
    """Those the Dockerfile expands, or declares for its RUNs' environment (site.sh's)."""
    text = "\n".join(instructions(part))
    return {
        name
        for name in AUTOMATIC_PLATFORM_ARGS
        if re.search(rf"\$\{{?{name}\b|^ARG {name}\b", text, flags=re.MULTILINE)
    }


@pytest.mark.parametrize("part", build.PARTS)
def test_the_automatic_platform_args_have_no_defaults(part: str) -> None:
    """A default in an ARG line replaces BuildKit's value (an arm64 image of amd64 wheels); the
    legacy builder expands a FROM's --platform only with a global ARG, so BUILDPLATFORM is one."""
    declared = [
        line.split(maxsplit=1)[1]
        for line in instructions(part)
        if line.startswith("ARG ") and line.split()[1].split("=")[0] in AUTOMATIC_PLATFORM_ARGS
    ]
    assert declared
    assert all("=" not in name for name in declared), declared
    global_args = instructions(part)[: instructions(part).index(stages(part)[0][0])]
    assert "ARG BUILDPLATFORM" in global_args
    assert "TARGETARCH" in automatic_args_read(part)
    assert "WHEEL_MACHINE" not in build.DOCKERFILES[part].read_text()


@pytest.mark.parametrize("arch", build.ARCHES.values(), ids=lambda arch: arch.name)
def test_the_legacy_builder_gets_every_automatic_arg_the_dockerfiles_read(arch: build.Arch) -> None:
    given = build.platform_args(arch)
    for part in build.PARTS:
        assert automatic_args_read(part) <= set(given)
    this_machine = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}[platform.machine()]
    assert given["BUILDPLATFORM"] == this_machine
    assert given["TARGETARCH"] == arch.name


def ignore_patterns(part: str) -> list[str]:
    ignore = build.DOCKERFILES[part].with_name("Dockerfile.dockerignore")
    lines = ignore.read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


@pytest.mark.parametrize("part", build.PARTS)
def test_buildkit_sends_what_make_images_copies_and_no_build_output(part: str) -> None:
    """BuildKit reads ``<Dockerfile>.dockerignore`` beside the Dockerfile: the context a
    platform team sends from the repository root is what images/build.py copies, without
    __pycache__ or native/vgpu's build directories (make would take a host's stale
    build-arm64/libvgpu.so as up to date)."""
    patterns = ignore_patterns(part)
    assert patterns[0] == "*"
    kept = [pattern[1:] for pattern in patterns if pattern.startswith("!")]
    assert sorted(kept) == sorted([*build.CONTEXT_PATHS, build.WHEELHOUSE])
    for excluded in ("**/__pycache__", "native/vgpu/build", "native/vgpu/build-*"):
        assert excluded in patterns
        assert patterns.index(excluded) > patterns.index("!native/vgpu")
    sources = [
        word
        for line in instructions(part)
        if line.startswith("COPY ") and "--from=" not in line
        for word in line.split()[1:-1]
    ]
    for source in sources:
        assert any(source == kept_path or source.startswith(kept_path + "/") for kept_path in kept)


@pytest.mark.parametrize("part", build.PARTS)
def test_each_image_installs_its_roles_extra(part: str) -> None:
    text = build.DOCKERFILES[part].read_text()
    extra = build.EXTRAS[part]
    assert f"RUN sh /usr/local/bin/vgpu-bridge-site {extra}\n" in text
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert extra in extras
    for requirement in extras[extra]:
        assert requirement in build.requirements()


def test_site_sh_gives_pip_the_platforms_of_its_glibc_and_prunes_the_site(tmp_path: Path) -> None:
    """site.sh runs with a stand-in python3 that prints pip's arguments and compiles nothing."""
    stand_in = tmp_path / "python3"
    stand_in.write_text(
        '#!/bin/sh\ncase "$*" in *sys.version_info*) echo 3.11 ;; *" install "*) echo "$@" ;;'
        ' *" wheel "*) : ;; esac\n'
    )
    stand_in.chmod(0o755)
    wheels = tmp_path / "wheels"
    (tmp_path / "src").mkdir()
    site = tmp_path / "site"
    for arch in build.ARCHES.values():
        for name in ("kubernetes/aio/api.py", "aiohttp/__init__.py", "kubernetes/client/api.py"):
            (site / name).parent.mkdir(parents=True, exist_ok=True)
            (site / name).touch()
        (site / "aiohttp-3.13.dist-info").mkdir(exist_ok=True)
        script = (REPO / "images" / "site.sh").read_text().replace("/wheels", str(wheels))
        script = script.replace("/opt/vgpu-bridge/site", str(site))
        wheels.mkdir(exist_ok=True)
        (wheels / "vgpu_bridge-0.1.0-py3-none-any.whl").touch()
        done = subprocess.run(
            ["sh", "-c", script, "site.sh", "webhook"],
            env={
                "PATH": f"{tmp_path}:/usr/bin:/bin",
                "PYTHON_VERSION": build.PYTHON_VERSION,
                "GLIBC_MINOR": str(build.GLIBC_MINOR),
                "TARGETARCH": arch.name,
                "PIP_OPTIONS": "",
            },
            cwd=tmp_path / "src",
            capture_output=True,
            text=True,
            check=True,
        )
        (install,) = [line for line in done.stdout.splitlines() if " install " in line]
        given = install.split()
        platforms = [given[i + 1] for i, word in enumerate(given) if word == "--platform"]
        assert platforms == build.pip_platforms(arch)[1::2]  # the wheelhouse's (site.sh's own)
        assert platforms[0] == f"manylinux_2_{build.GLIBC_MINOR}_{arch.machine}"
        assert platforms[build.GLIBC_MINOR - 5] == f"manylinux_2_5_{arch.machine}"
        assert f"manylinux_2_17_{arch.machine}" in platforms
        assert f"manylinux2014_{arch.machine}" in platforms
        assert given[-1].endswith("vgpu_bridge-0.1.0-py3-none-any.whl[webhook]")
        # the asyncio client and its helpers go; the client's sources give way to bytecode
        assert sorted(p.name for p in site.iterdir()) == ["kubernetes"]
        assert sorted(p.name for p in (site / "kubernetes").iterdir()) == ["client"]
        assert list((site / "kubernetes" / "client").iterdir()) == []


#: what the Dockerfiles' ARGs always give site.sh
WHEEL_TARGET = {"TARGETARCH": "amd64", "GLIBC_MINOR": "36"}


def test_site_sh_refuses_a_build_image_of_another_python(tmp_path: Path) -> None:
    stand_in = tmp_path / "python3"
    stand_in.write_text("#!/bin/sh\necho 3.12\n")
    stand_in.chmod(0o755)
    done = subprocess.run(
        ["sh", str(REPO / "images" / "site.sh"), "webhook"],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "PYTHON_VERSION": "3.11", **WHEEL_TARGET},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "BUILD_IMAGE has Python 3.12; PYTHON_VERSION is 3.11" in done.stderr


@pytest.mark.parametrize("given", ["", "riscv64"])
def test_site_sh_refuses_a_target_it_has_no_wheels_for(tmp_path: Path, given: str) -> None:
    """An empty TARGETARCH is a legacy build that was not given it: say so, not `unbound`."""
    done = subprocess.run(
        ["sh", str(REPO / "images" / "site.sh"), "webhook"],
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHON_VERSION": "3.11",
            **WHEEL_TARGET,
            "TARGETARCH": given,
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert f"TARGETARCH={given!r}: not amd64 or arm64" in done.stderr
    assert "docker buildx build" in done.stderr


def layer(files: dict[str, int]) -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as archive:
        for name, size in files.items():
            info = tarfile.TarInfo(name)
            info.size = size
            archive.addfile(info, io.BytesIO(b"\0" * size))
    return data.getvalue()


def test_sizes_are_grouped_by_what_takes_the_room(tmp_path: Path) -> None:
    saved = tmp_path / "image.tar"
    base = layer({
        "usr/lib/python3.11/os.py": 300,
        "usr/lib/x86_64-linux-gnu/libssl.so.3": 500,
        "usr/bin/python3.11": 200,
        "etc/passwd": 7,
    })  # fmt: skip
    site = layer({
        "opt/vgpu-bridge/site/kubernetes/client/api.py": 900,
        "opt/vgpu-bridge/site/kubernetes-37.0.2.dist-info/RECORD": 100,
        "opt/vgpu-bridge/site/grpc/_cython/cygrpc.so": 800,
        "opt/vgpu-bridge/site/six.py": 10,
        "opt/vgpu-bridge/lib/libvgpu.so": 50,
    })  # fmt: skip
    with tarfile.open(saved, "w") as archive:
        for name, content in (("a/layer.tar", base), ("b/layer.tar", site)):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
        manifest = json.dumps([{"Layers": ["a/layer.tar", "b/layer.tar"]}]).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        archive.addfile(info, io.BytesIO(manifest))
    groups = check.sizes_by_group(saved)
    assert groups == {
        "kubernetes": 1000,
        "grpc": 800,
        "Debian shared libraries": 500,
        "Python 3.11 stdlib": 300,
        "python3 binary": 200,
        "libvgpu.so": 50,
        "six": 10,
        "other Debian files": 7,
    }
    row = check.Row("webhook", "arm64", 151 * 10**6, groups)
    assert row.over_budget
    assert row.dominated_by(2) == "kubernetes 0, grpc 0"
    table = check.table([row, check.Row("agent", "amd64", 10**6, groups)])
    assert "150 OVER" in table.splitlines()[1]
    assert "OVER" not in table.splitlines()[2]


def test_a_base_is_one_layer_whose_config_names_its_architecture(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs.tar"
    rootfs.write_bytes(layer({"usr/bin/python3.11": 10, "etc/passwd": 3}))
    arch = build.ARCHES["arm64"]
    archive = build.rootfs_image_archive(rootfs, "vgpu-bridge-images/base-arm64:abc", arch)
    (manifest,) = json.loads(member(archive, "manifest.json"))
    config_bytes = member(archive, manifest["Config"])
    config = json.loads(config_bytes)
    (layer_name,) = manifest["Layers"]
    assert manifest["RepoTags"] == ["vgpu-bridge-images/base-arm64:abc"]
    assert manifest["Config"] == hashlib.sha256(config_bytes).hexdigest() + ".json"
    assert config["architecture"] == "arm64"
    assert config["os"] == "linux"
    assert member(archive, layer_name) == rootfs.read_bytes()
    diff_id = hashlib.sha256(rootfs.read_bytes()).hexdigest()
    assert config["rootfs"] == {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]}


def member(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as image:
        content = image.extractfile(name)
        assert content is not None
        return content.read()
