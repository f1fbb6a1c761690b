"""Prometheus and promtool from Debian bookworm's `prometheus` package, unpacked into the cache.

The package is fetched with `apt-get download` and unpacked with `dpkg -x`, never installed: its
maintainer scripts would start a Prometheus service on the host. Both binaries are static Go
programs, so the unpacked `usr/bin/` runs as is. They go to
`<cache>/prometheus-<version>/bin/` (`VGPU_BRIDGE_CACHE` moves the cache, as for the control
plane) and are reused while there; concurrent callers take turns on a lock file.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.settings import Settings

#: The upstream release in Debian bookworm's package (2.42.0+ds-5+deb12u1 when this was written;
#: a Debian security update keeps the upstream part).
PROMETHEUS_VERSION = "2.42.0"
PACKAGE = "prometheus"
BINARIES = ("prometheus", "promtool")


class PrometheusInstallError(RuntimeError):
    """The package could not be fetched or unpacked; the message says which step and why."""


@dataclass(frozen=True)
class PrometheusTools:
    prometheus: Path
    promtool: Path
    #: The Debian package version the binaries came from.
    package_version: str
    reused: bool


def tools_dir(settings: Settings) -> Path:
    return settings.cache_root / f"prometheus-{PROMETHEUS_VERSION}"


def ensure_prometheus(settings: Settings) -> PrometheusTools:
    """The cached binaries, fetched and unpacked first when missing."""
    directory = tools_dir(settings)
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        reused = _installed(directory)
        if not reused:
            _install(directory)
        return PrometheusTools(
            prometheus=directory / "bin" / "prometheus",
            promtool=directory / "bin" / "promtool",
            package_version=(directory / "PACKAGE_VERSION").read_text().strip(),
            reused=reused,
        )


def _installed(directory: Path) -> bool:
    binaries = [directory / "bin" / name for name in BINARIES]
    complete = (directory / "PACKAGE_VERSION").is_file()
    return complete and all(os.access(b, os.X_OK) for b in binaries)


def _install(directory: Path) -> None:
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        work = Path(scratch)
        deb = _download(work)
        version = deb.name.split("_")[1]
        if not version.startswith(f"{PROMETHEUS_VERSION}+"):
            raise PrometheusInstallError(
                f"{deb.name}: apt offers prometheus {version}, expected {PROMETHEUS_VERSION}+* "
                "(Debian bookworm); set PROMETHEUS_VERSION in e2e/prometheus/install.py"
            )
        _run(["dpkg-deb", "-x", str(deb), str(work / "root")], step="dpkg-deb -x")
        (directory / "bin").mkdir(exist_ok=True)
        for name in BINARIES:
            os.replace(work / "root" / "usr" / "bin" / name, directory / "bin" / name)
        (directory / "PACKAGE_VERSION").write_text(version + "\n")


def _download(work: Path) -> Path:
    """`apt-get download prometheus` into `work`; `apt-get update` first when the lists lack it."""
    apt = shutil.which("apt-get")
    if apt is None or shutil.which("dpkg-deb") is None:
        raise PrometheusInstallError("fetching prometheus needs apt-get and dpkg-deb (Debian)")
    download = [apt, "download", "-q", PACKAGE]
    try:
        _run(download, step="apt-get download prometheus", cwd=work)
    except PrometheusInstallError:
        _run([apt, "update", "-q"], step="apt-get update")
        _run(download, step="apt-get download prometheus", cwd=work)
    [deb] = work.glob(f"{PACKAGE}_*.deb")
    return deb


def _run(command: list[str], *, step: str, cwd: Path | None = None) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-2000:]
        raise PrometheusInstallError(f"{step} failed (exit {done.returncode}):\n{tail}")
