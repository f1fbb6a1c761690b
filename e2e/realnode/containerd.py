"""containerd for the real node: its config, ``ctr`` calls, and stopping what it runs.

The daemon, its shims and runc use the node's own root, state, sockets and runc root (``Layout``),
never /run/containerd or /var/lib/containerd, and NRI is off (its socket would be the machine-wide
/var/run/nri/nri.sock). Two settings are what this VM needs (shared/reference/realnode.md §1):
``restrict_oom_score_adj`` (no CAP_SYS_RESOURCE: runc could not write the sandbox's -998) and the
pinned sandbox image ``localhost/pause:local``, imported from a tarball, so nothing is pulled.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from e2e.realnode.host import Layout

SANDBOX_IMAGE = "localhost/pause:local"
NAMESPACE = "k8s.io"
CNI_NETWORK = "vgpu-realnode"


def render_config(layout: Layout, bin_dir: Path) -> str:
    """containerd config (version 3) for the real node."""
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    return "\n".join(
        [
            "version = 3",
            f"root = '{layout.containerd_root}'",
            f"state = '{layout.containerd_state}'",
            "oom_score = 0",
            # NRI would listen on the machine-wide /var/run/nri/nri.sock
            "disabled_plugins = ['io.containerd.nri.v1.nri']",
            "",
            "[grpc]",
            f"  address = '{layout.containerd_socket}'",
            "",
            "[ttrpc]",
            f"  address = '{layout.containerd_socket}.ttrpc'",
            "",
            # shim sockets and runc state: by default /run/containerd/s and /run/containerd/runc
            "[plugins.'io.containerd.shim.v1.manager']",
            f"  socket_dir = '{layout.run / 's'}'",
            "",
            "[plugins.'io.containerd.internal.v1.opt']",
            f"  path = '{layout.root / 'opt'}'",
            "",
            "[plugins.'io.containerd.cri.v1.images']",
            "  snapshotter = 'overlayfs'",
            "  [plugins.'io.containerd.cri.v1.images'.pinned_images]",
            f"    sandbox = '{SANDBOX_IMAGE}'",
            "",
            f"[{runtime}]",
            "  enable_cdi = true",
            f"  cdi_spec_dirs = ['{layout.cdi_dir}']",
            "  restrict_oom_score_adj = true",
            "  tolerate_missing_hugetlb_controller = true",
            "  disable_hugetlb_controller = true",
            f"  [{runtime}.containerd]",
            "    default_runtime_name = 'runc'",
            f"    [{runtime}.containerd.runtimes.runc]",
            "      runtime_type = 'io.containerd.runc.v2'",
            f"      [{runtime}.containerd.runtimes.runc.options]",
            f"        BinaryName = '{bin_dir / 'runc'}'",
            f"        Root = '{layout.run / 'runc'}'",
            "        SystemdCgroup = false",
            f"  [{runtime}.cni]",
            f"    bin_dirs = ['{layout.root / 'cni-bin'}']",
            f"    conf_dir = '{layout.etc / 'cni'}'",
            "",
            "[plugins.'io.containerd.grpc.v1.cri']",
            "  stream_server_address = '127.0.0.1'",
            "  stream_server_port = '0'",
            "",
        ]
    )


def cni_conflist() -> str:
    """A bridge network, only so the runtime reports NetworkReady (and the node turns Ready).

    Test pods use the host network, for which containerd never executes a CNI plugin; the plugin
    directory stays empty. isGateway/ipMasq off: nothing would touch iptables or ip_forward.
    """
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": CNI_NETWORK,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "vgpurn0",
                    "isGateway": False,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": "10.244.77.0/24"}]],
                    },
                }
            ],
        },
        indent=2,
    )


def write_files(layout: Layout, bin_dir: Path) -> Path:
    """Config and CNI conflist on disk; returns the config's path."""
    config = layout.etc / "containerd.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(render_config(layout, bin_dir))
    (layout.etc / "cni").mkdir(parents=True, exist_ok=True)
    (layout.etc / "cni" / "10-vgpu-realnode.conflist").write_text(cni_conflist())
    (layout.root / "cni-bin").mkdir(parents=True, exist_ok=True)
    return config


def ctr(layout: Layout, bin_dir: Path, *args: str, timeout_s: float = 60.0) -> str:
    """Run ``ctr -a <our socket> -n k8s.io ARGS``; its stdout, or RuntimeError with stderr."""
    command = [
        str(bin_dir / "ctr"),
        "-a",
        str(layout.containerd_socket),
        "-n",
        NAMESPACE,
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def import_image(layout: Layout, bin_dir: Path, archive: Path) -> str:
    """Import an OCI tarball into the CRI's namespace, pinned (the kubelet's GC leaves it)."""
    return ctr(
        layout,
        bin_dir,
        "images",
        "import",
        "--label",
        "io.cri-containerd.pinned=pinned",
        "--digests",
        "--snapshotter",
        "overlayfs",
        str(archive),
    )


def image_names(layout: Layout, bin_dir: Path) -> list[str]:
    return ctr(layout, bin_dir, "images", "ls", "-q").split()


def remove_all_containers(layout: Layout, bin_dir: Path) -> list[str]:
    """Kill every task and delete every container in the namespace (best effort, logged)."""
    notes = []
    try:
        containers = ctr(layout, bin_dir, "containers", "ls", "-q").split()
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        return [f"containers ls: {error}"]
    for container in containers:
        for args in (
            ("tasks", "kill", "-a", "-s", "SIGKILL", container),
            ("tasks", "delete", "-f", container),
            ("containers", "delete", container),
        ):
            try:
                ctr(layout, bin_dir, *args, timeout_s=20.0)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                if "not found" not in str(error):  # a task that already exited
                    notes.append(str(error).splitlines()[0][:300])
    return notes
