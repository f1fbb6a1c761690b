"""The kind node image, made without a registry (what ``kind build node-image`` does, offline).

``kind build node-image`` fetches kubeadm's images, pause, kindnetd and local-path-provisioner
even in its file mode, so the image is put together here: the Debian node rootfs
(``rootfs.py``), kind's own base files from its module zip (entrypoint, systemd units, containerd
config), the binaries (``build.py``, the real-node tier's containerd/runc, the cluster's
``vgpu-k8s``), and the images kubeadm's pods need, imported into the node's containerd pinned
(never pulled, never collected) under ``IMAGE_REPOSITORY``. The result is tagged by a hash of
everything that went in, so it is rebuilt only when an input changed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.settings import DEFAULT_K8S_VERSION, Settings
from e2e.gobuild import ModuleDownloadError, download_module
from e2e.kind.build import KIND_VERSION, KindTools
from e2e.kind.dockerd import docker_env
from e2e.kind.rootfs import ensure_rootfs_image, image_exists
from e2e.kind.steps import StepError, run

#: kubeadm's ``imageRepository``: every control-plane image is named under it
IMAGE_REPOSITORY = "vgpu-bridge.local/kind"
NODE_REPOSITORY = "vgpu-bridge-kind/node"
CSRC = Path(__file__).resolve().parent / "csrc"
#: commands of kubeadm's static pods, each a static launcher of ``vgpu-k8s <name>``
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
#: where each binary of the node goes (kind's base image's places)
NODE_PATHS = {
    "containerd": "usr/local/bin",
    "containerd-shim-runc-v2": "usr/local/bin",
    "ctr": "usr/local/bin",
    "crictl": "usr/local/bin",
    "vgpu-k8s": "usr/local/bin",
    "vgpu-kind-k8s": "usr/local/bin",
    "runc": "usr/local/sbin",
    "ptp": "opt/cni/bin",
    "host-local": "opt/cni/bin",
    "loopback": "opt/cni/bin",
    "portmap": "opt/cni/bin",
}
RUNTIME_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "pause")
TOOL_BINARIES = ("crictl", "vgpu-kind-k8s", "coredns", "ptp", "host-local", "loopback", "portmap")
#: sysctl files of Debian's systemd that would change the whole machine from a privileged node
HOST_WIDE_SYSCTL_FILES = ("/usr/lib/sysctl.d/*.conf", "/etc/sysctl.d/99-sysctl.conf")


@dataclass(frozen=True)
class NodeInputs:
    """What goes into the node image."""

    tools: KindTools
    runtime_dir: Path  # containerd, containerd-shim-runc-v2, ctr, runc, pause
    vgpu_k8s: Path
    kind_module: Path  # sigs.k8s.io/kind@KIND_VERSION in the Go module cache


def kind_module_dir(settings: Settings) -> Path:
    """Where ``go mod download`` put kind's module (its images/base/files are the node's)."""
    env = {**os.environ, **settings.go_env}
    try:
        found = download_module("sigs.k8s.io/kind", KIND_VERSION, env=env, cwd=Path("/"))
    except ModuleDownloadError as error:
        raise StepError(str(error)) from None
    return Path(found["Dir"])


def ensure_node_image(settings: Settings, inputs: NodeInputs) -> str:
    """The node image's tag, built when no image with this inputs' hash exists."""
    rootfs = ensure_rootfs_image(settings, "node")
    tag = f"{NODE_REPOSITORY}:{settings.k8s_version}-{_inputs_digest(inputs, rootfs)}"
    if image_exists(tag):
        print(f"node image: warm, reused {tag}", flush=True)
        return tag
    context = settings.cache_root / f"kind-{KIND_VERSION}" / "node-context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    images = _component_images(inputs, rootfs, context)
    _node_context(settings, inputs, context, rootfs)
    staged = f"{NODE_REPOSITORY}:staged"
    run(["docker", "build", "--network=none", "-t", staged, str(context)], env=docker_env())
    _import_and_commit(staged, images, tag)
    shutil.rmtree(context, ignore_errors=True)
    _remove_older_node_images(tag)
    return tag


def _remove_older_node_images(keep: str) -> None:
    """Node images of earlier inputs (~1 GB each) would pile up in the cached data root."""
    listing = ["docker", "images", NODE_REPOSITORY, "--format", "{{.Repository}}:{{.Tag}}"]
    older = [name for name in run(listing, env=docker_env(), quiet=True).split() if name != keep]
    if older:
        run(["docker", "rmi", *older], env=docker_env())


def _inputs_digest(inputs: NodeInputs, rootfs: str) -> str:
    sha = hashlib.sha256(f"{KIND_VERSION} {rootfs} {IMAGE_REPOSITORY}".encode())
    for source in (Path(__file__), *sorted(CSRC.glob("*.c"))):
        sha.update(source.read_bytes())
    for binary in _binaries(inputs).values():
        info = binary.stat()
        sha.update(f"{binary.name} {info.st_size} {info.st_mtime_ns}".encode())
    return sha.hexdigest()[:12]


def _binaries(inputs: NodeInputs) -> dict[str, Path]:
    """Every binary the node image holds, by its name there."""
    found = {name: inputs.runtime_dir / name for name in RUNTIME_BINARIES}
    found.update({name: inputs.tools.path(name) for name in TOOL_BINARIES})
    found["vgpu-k8s"] = inputs.vgpu_k8s
    return found


def _component_images(inputs: NodeInputs, rootfs: str, context: Path) -> Path:
    """Build the control-plane, kube-proxy, CoreDNS and pause images; save them in one archive."""
    names = kubeadm_images(inputs.tools)
    work = context.parent / "component-images"
    shutil.rmtree(work, ignore_errors=True)
    for name, recipe in _component_recipes(inputs, rootfs).items():
        directory = work / name
        directory.mkdir(parents=True)
        files, dockerfile = recipe
        for target, source in files.items():
            shutil.copy2(source, directory / target)
        (directory / "Dockerfile").write_text(dockerfile)
        tags = [t for t in names if _component_of(t) == name]
        flags = [flag for t in tags for flag in ("-t", t)]
        run(["docker", "build", "--network=none", *flags, str(directory)], env=docker_env())
    archive = context.parent / "images.tar"
    run(["docker", "save", "-o", str(archive), *names], env=docker_env())
    shutil.rmtree(work, ignore_errors=True)
    return archive


def kubeadm_images(tools: KindTools) -> list[str]:
    """kubeadm's own list of the images its pods run, under ``IMAGE_REPOSITORY``."""
    out = run(
        [
            str(tools.path("kubeadm")),
            "config",
            "images",
            "list",
            "--kubernetes-version",
            DEFAULT_K8S_VERSION,
            "--image-repository",
            IMAGE_REPOSITORY,
        ],
        quiet=True,
    )
    return out.split()


def _component_of(image: str) -> str:
    base = image.rsplit("/", 1)[1].split(":")[0]
    return base if base in ("pause", "coredns", "kube-proxy") else "control-plane"


def _component_recipes(inputs: NodeInputs, rootfs: str) -> dict[str, tuple[dict[str, Path], str]]:
    launcher = _launcher(inputs)
    control_plane = "FROM scratch\nCOPY vgpu-k8s /usr/local/bin/vgpu-k8s\n" + "".join(
        f"COPY launcher /usr/local/bin/{name}\n" for name in CONTROL_PLANE
    )
    return {
        "control-plane": ({"vgpu-k8s": inputs.vgpu_k8s, "launcher": launcher}, control_plane),
        "kube-proxy": (
            {"vgpu-kind-k8s": inputs.tools.path("vgpu-kind-k8s")},
            f"FROM {rootfs}\nCOPY vgpu-kind-k8s /usr/local/bin/vgpu-kind-k8s\n"
            "RUN ln -s vgpu-kind-k8s /usr/local/bin/kube-proxy\n",
        ),
        "coredns": (
            {"coredns": inputs.tools.path("coredns")},
            'FROM scratch\nCOPY coredns /coredns\nENTRYPOINT ["/coredns"]\n',
        ),
        "pause": (
            {"pause": inputs.runtime_dir / "pause"},
            'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n',
        ),
    }


def _launcher(inputs: NodeInputs) -> Path:
    out = inputs.tools.bin_dir / "launcher"
    run(["gcc", "-static", "-O2", "-std=c11", "-o", str(out), str(CSRC / "launcher.c")])
    return out


def _node_context(settings: Settings, inputs: NodeInputs, context: Path, rootfs: str) -> None:
    shutil.copytree(inputs.kind_module / "images" / "base" / "files", context / "files")
    for path in (context / "files").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    config = context / "files" / "etc" / "containerd" / "config.toml"
    config.write_text(containerd_config(config.read_text(), pause_image(inputs.tools)))
    for name, place in NODE_PATHS.items():
        target = context / "files" / place / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(_binaries(inputs)[name], target)
        target.chmod(0o755)
    (context / "setup.sh").write_text(setup_script(settings.k8s_version))
    (context / "Dockerfile").write_text(
        f"FROM {rootfs}\nCOPY files/ /\nCOPY setup.sh /tmp/setup.sh\n"
        "RUN sh -eu /tmp/setup.sh && rm /tmp/setup.sh\n"
        "ENV container=docker\nSTOPSIGNAL SIGRTMIN+3\n"
    )


def pause_image(tools: KindTools) -> str:
    return next(i for i in kubeadm_images(tools) if _component_of(i) == "pause")


def containerd_config(kind_config: str, pause: str) -> str:
    """kind's containerd config with our pause image, restricted oom_score_adj (runc in a node
    cannot lower it without CAP_SYS_RESOURCE) and without the fuse-overlayfs proxy (not built)."""
    lines = []
    skip = False
    for line in kind_config.splitlines():
        if line.startswith("[proxy_plugins"):
            skip = True
            continue
        if skip and line.startswith("["):
            skip = line.startswith("[proxy_plugins")
        if skip:
            continue
        if line.strip().startswith("sandbox_image"):
            line = f'  sandbox_image = "{pause}"'
        if line.strip().startswith("restrict_oom_score_adj"):
            line = "  restrict_oom_score_adj = true"
        lines.append(line)
    return "\n".join(lines) + "\n"


def setup_script(k8s_version: str) -> str:
    """What kind's base Dockerfile RUNs, plus the binaries' places and our removals."""
    sysctl_files = " ".join(HOST_WIDE_SYSCTL_FILES)
    return f"""
chmod 755 /kind/bin/* /usr/local/bin/entrypoint /usr/local/bin/clean-install
mkdir -p /etc/cni/net.d /etc/kubernetes/manifests
for tool in kubeadm kubectl kube-proxy; do ln -sf /usr/local/bin/vgpu-kind-k8s /usr/bin/$tool; done
printf '#!/bin/sh\\nexec /usr/local/bin/vgpu-k8s kubelet "$@"\\n' > /usr/bin/kubelet
chmod 755 /usr/bin/kubelet
echo {k8s_version} > /kind/version
HOOK='{{"path": "/kind/bin/mount-product-files.sh"}}'
ctr oci spec \\
  | jq --argjson hook "$HOOK" '.hooks.createContainer += [$hook]' \\
  | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json
find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
  /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
  /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
  {sysctl_files}
echo ReadKMsg=no >> /etc/systemd/journald.conf
ln -sf /usr/lib/systemd/systemd /sbin/init
systemctl enable kubelet.service containerd.service undo-mount-hacks.service
systemctl mask systemd-binfmt.service
"""


def _import_and_commit(staged: str, archive: Path, tag: str) -> None:
    """Start the staged image's containerd, import the archive pinned, commit the node image."""
    env = docker_env()
    container = run(
        ["docker", "run", "-d", "--privileged", "--entrypoint", "sleep", staged, "infinity"],
        env=env,
    ).strip()
    try:
        run(["docker", "cp", str(archive), f"{container}:/images.tar"], env=env)
        run(["docker", "exec", container, "sh", "-c", IMPORT_SCRIPT], env=env)
        run(
            [
                "docker",
                "commit",
                "--change",
                'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
                "--change",
                "CMD []",
                container,
                tag,
            ],
            env=env,
        )
    finally:
        subprocess.run(["docker", "rm", "-f", container], env=env, capture_output=True)
    run(["docker", "rmi", staged], env=env, quiet=True)
    archive.unlink(missing_ok=True)


IMPORT_SCRIPT = """
set -eu
containerd >/tmp/containerd.log 2>&1 &
for i in $(seq 1 100); do ctr version >/dev/null 2>&1 && break; sleep 0.2; done
ctr -n k8s.io images import --all-platforms --no-unpack --digests \
  --label io.cri-containerd.pinned=pinned /images.tar
ctr -n k8s.io images ls -q
kill $!
wait $! || true
rm -f /images.tar /tmp/containerd.log
"""
