"""What ``make images`` proves of each image it built, and the sizes table it prints.

Every image imports its role's modules, answers ``<command> --help``, and has every module it
loaded precompiled (it never writes bytecode); the agent's libvgpu.so is an ELF file of the
image's architecture, and its stand-in driver for mock cards (``MOCK_DRIVER``) a driver install
of that architecture, as the agent's driver-root discovery finds one. amd64 images run in the
private dockerd with a read-only root filesystem and no capabilities (the webhook as the image's
own user, which must be 65532); arm64 images cannot run in that dockerd (this amd64 machine has
no binfmt emulation), so their filesystem is exported and their Python runs under qemu-user.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from e2e.kind.dockerd import docker_env
from e2e.kind.steps import StepError, apt_install, run
from images.build import BUDGET_MB, PYTHON_VERSION, Arch

WEBHOOK_USER = "65532:65532"
SITE = "opt/vgpu-bridge/site"
MOCK_DRIVER = "opt/vgpu-bridge/mock-driver"
#: part of CHECK (and run by the unit tests on a root of their own): the agent's stand-in driver
#: for mock cards is a driver install of the image's architecture, as the agent's own driver-root
#: discovery takes it (libcuda and libnvidia-ml, regular files, SONAMEs .so.1, that machine's ELF)
MOCK_DRIVER_CHECK = f"""
def mock_driver_problems(root, machine):
    from pathlib import Path
    from vgpu_bridge.node.driver_root import DriverRootError, discover
    mock = Path(root) / "{MOCK_DRIVER}"
    cuda = sorted(mock.glob("usr/lib/*-linux-gnu/libcuda.so.*"))
    if len(cuda) != 1:
        return [f"{{mock}}: {{len(cuda)}} files usr/lib/<triplet>/libcuda.so.<version>, not 1"]
    version = cuda[0].name.removeprefix("libcuda.so.")
    name = {{62: "x86_64", 183: "aarch64"}}.get(machine, str(machine))
    try:
        stack = discover(root=mock, mount=mock, version=version, machine=name)
    except DriverRootError as error:
        return [str(error)]
    sonames = {{library.name: library.soname for library in stack.libraries}}
    if sonames != {{"libcuda": "libcuda.so.1", "libnvidia-ml": "libnvidia-ml.so.1"}}:
        return [f"{{mock}}: libraries {{sonames}}, not libcuda.so.1 and libnvidia-ml.so.1"]
    return [f"{{mock}}: {{odd}}" for odd in stack.passed_over]
"""
#: run by the image's python3: argv = part, ELF machine number
CHECK = (
    MOCK_DRIVER_CHECK
    + """
import importlib, os, sys
part, machine = sys.argv[1], int(sys.argv[2])
roles = {"webhook": ("webhook", ["vgpu_bridge.webhook.app"]),
         "agent": ("node", ["vgpu_bridge.node.app", "vgpu_bridge.node.library"])}
command, modules = roles[part]
for name in [*modules, "kubernetes", "kubernetes.config", "vgpu_bridge.kube"]:
    importlib.import_module(name)
from vgpu_bridge import cli
try:
    cli.main([command, "--help"])
except SystemExit as stop:
    if stop.code:
        raise
problems = mock_driver_problems("/", machine) if part == "agent" else []
if problems:
    sys.exit("the stand-in driver: " + "; ".join(problems))
loaded = list(sys.modules.values())
stale = sorted(m.__name__ for m in loaded
               if getattr(m, "__cached__", None) and not os.path.exists(m.__cached__))
if stale:
    sys.exit("modules without bytecode (the image would try to write it): " + ", ".join(stale))
if part == "agent":
    with open("/opt/vgpu-bridge/lib/libvgpu.so", "rb") as f:
        head = f.read(20)
    if head[:4] != b"\\x7fELF" or int.from_bytes(head[18:20], "little") != machine:
        sys.exit(f"libvgpu.so: not an ELF file for machine {machine}: {head!r}")
print(f"CHECKED {part} uid={os.getuid()} modules={len(loaded)}")
"""
)


def inspect(tag: str) -> dict[str, object]:
    (found,) = json.loads(run(["docker", "image", "inspect", tag], env=docker_env(), quiet=True))
    image: dict[str, object] = found
    return image


def check_config(part: str, arch: Arch, tag: str, labels: dict[str, str]) -> None:
    """The image's architecture, OCI labels and (webhook) non-root user, from its config."""
    image = inspect(tag)
    config = image["Config"]
    assert isinstance(config, dict)
    problems = []
    if image["Architecture"] != arch.name:
        problems.append(f"architecture {image['Architecture']}, not {arch.name}")
    have = config.get("Labels") or {}
    problems += [
        f"label {k}={have.get(k)!r}, not {v!r}" for k, v in labels.items() if have.get(k) != v
    ]
    if part == "webhook" and config.get("User") != WEBHOOK_USER:
        problems.append(f"user {config.get('User')!r}, not {WEBHOOK_USER}")
    if problems:
        raise StepError(f"{tag}: " + "; ".join(problems))


def check_runs(part: str, arch: Arch, tag: str) -> str:
    """Run CHECK in the image: in the dockerd (amd64) or under qemu-user (arm64); its last line."""
    arguments = ["-P", "-c", CHECK, part, str(arch.elf_machine)]
    if arch.qemu is None:
        sandbox = ["--read-only", "--network=none", "--cap-drop=ALL"]
        command = ["docker", "run", "--rm", *sandbox, "--entrypoint", "python3", tag, *arguments]
        output = run(command, env=docker_env(), quiet=True)
    else:
        output = _run_under_qemu(arch.qemu, tag, arguments)
    last = output.strip().splitlines()[-1]
    if part == "webhook" and arch.qemu is None and "uid=65532 " not in last:
        raise StepError(f"{tag}: the webhook runs as {last}, not as 65532")
    return last


def _run_under_qemu(qemu: str, tag: str, arguments: list[str]) -> str:
    env = docker_env()
    container = run(["docker", "create", tag], env=env, quiet=True).strip()
    with tempfile.TemporaryDirectory(prefix="vgpu-image-") as scratch:
        root = Path(scratch) / "root"
        root.mkdir()
        archive = Path(scratch) / "fs.tar"
        try:
            run(["docker", "export", "-o", str(archive), container], env=env, quiet=True)
        finally:
            run(["docker", "rm", container], env=env, quiet=True)
        run(["tar", "-xf", str(archive), "-C", str(root)], quiet=True)
        return python_under_qemu(qemu, root, arguments)


def python_under_qemu(qemu: str, root: Path, arguments: list[str]) -> str:
    """The image's python3 (unpacked at ``root``) under qemu-user, installed when missing."""
    if shutil.which(qemu) is None:
        apt_install(["qemu-user"])
    python = root / "usr" / "bin" / f"python{PYTHON_VERSION}"
    child = {"PYTHONPATH": str(root / SITE), "PYTHONDONTWRITEBYTECODE": "1", "PATH": os.defpath}
    return run([qemu, "-L", str(root), str(python), *arguments], env=child, quiet=True)


def check_unpacked(part: str, arch: Arch, root: Path, user: str | None) -> str:
    """Run CHECK in an image unpacked at ``root`` (no Docker engine): chrooted as ``user`` on
    this machine's architecture, else under qemu-user; its last line."""
    arguments = ["-P", "-c", CHECK, part, str(arch.elf_machine)]
    if arch.qemu is not None:
        output = python_under_qemu(arch.qemu, root, arguments)
    else:
        userspec = [f"--userspec={user}"] if user else []
        python = f"/usr/bin/python{PYTHON_VERSION}"
        child = {"PYTHONPATH": "/" + SITE, "PYTHONDONTWRITEBYTECODE": "1", "PATH": os.defpath}
        chroot = shutil.which("chroot") or "/usr/sbin/chroot"  # sbin: not on the child's PATH
        output = run([chroot, *userspec, str(root), python, *arguments], env=child, quiet=True)
    last = output.strip().splitlines()[-1]
    if part == "webhook" and arch.qemu is None and "uid=65532 " not in last:
        raise StepError(f"{part}/{arch.name}: the webhook runs as {last}, not as 65532")
    return last


def foreign_elf_files(root: Path, arch: Arch) -> list[str]:
    """Files under ``root`` that are ELF files of another machine than ``arch``'s (a wheel or a
    library of the build machine in an image of another architecture)."""
    foreign = []
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        with path.open("rb") as file:
            head = file.read(20)
        if head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") != arch.elf_machine:
            foreign.append(str(path.relative_to(root)))
    return foreign


def group(path: str) -> str:
    """What a file of an image counts towards in the sizes table."""
    parts = path.lstrip("./").split("/")
    if path.lstrip("./").startswith(SITE + "/") and len(parts) > 3:
        name = parts[3]
        for suffix in (".dist-info", ".libs", ".py", ".pth"):
            name = name.removesuffix(suffix)
        return name.split("-")[0].lower()
    if "/".join(parts[:3]) == MOCK_DRIVER:
        return "mock driver"
    if parts[:2] == ["opt", "vgpu-bridge"]:
        return "libvgpu.so"
    if parts[:3] == ["usr", "lib", f"python{PYTHON_VERSION}"]:
        return f"Python {PYTHON_VERSION} stdlib"
    if parts[:2] == ["usr", "bin"] and parts[-1].startswith("python"):
        return "python3 binary"
    if "-linux-gnu" in "/".join(parts[:3]):
        return "Debian shared libraries"
    return "other Debian files"


def sizes_by_group(archive: Path) -> Counter[str]:
    """Bytes per ``group`` over every layer of a ``docker save`` archive."""
    totals: Counter[str] = Counter()
    with tarfile.open(archive) as outer:
        for member in outer.getmembers():
            if not member.name.endswith("layer.tar"):
                continue
            layer = outer.extractfile(member)
            assert layer is not None
            with tarfile.open(fileobj=layer, mode="r|") as inner:
                add_sizes(totals, inner)
    return totals


def add_sizes(totals: Counter[str], layer: tarfile.TarFile) -> None:
    """Add the bytes of one layer's files (a tar stream) to ``totals`` per ``group``."""
    for entry in layer:
        if entry.isfile():
            totals[group(entry.name)] += entry.size


@dataclass(frozen=True)
class Row:
    part: str
    arch: str
    size: int
    groups: Counter[str]

    @property
    def over_budget(self) -> bool:
        return self.size > BUDGET_MB[self.part] * 10**6

    def dominated_by(self, count: int = 4) -> str:
        return ", ".join(
            f"{name} {size / 1e6:.0f}" for name, size in self.groups.most_common(count)
        )


def table(rows: Iterable[Row]) -> str:
    lines = [
        f"{'image':<22} {'arch':<6} {'MB':>5} {'budget':>6}  largest parts (MB)",
    ]
    for row in rows:
        budget = f"{BUDGET_MB[row.part]}" + (" OVER" if row.over_budget else "")
        name = f"vgpu-bridge-{row.part}"
        lines.append(
            f"{name:<22} {row.arch:<6} {row.size / 1e6:>5.0f} {budget:>6}  {row.dominated_by()}"
        )
    return "\n".join(lines)
