"""The admin kubeconfig with certificate data embedded: kubectl and clients need nothing else."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from e2e.cluster.pki import KeyPair


def write_kubeconfig(path: Path, *, server: str, ca_file: Path, client: KeyPair) -> Path:
    def data(file: Path) -> str:
        return base64.b64encode(file.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "vgpu-bridge-e2e",
                "cluster": {"server": server, "certificate-authority-data": data(ca_file)},
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": data(client.cert),
                    "client-key-data": data(client.key),
                },
            }
        ],
        "contexts": [
            {"name": "vgpu-bridge-e2e", "context": {"cluster": "vgpu-bridge-e2e", "user": "admin"}}
        ],
        "current-context": "vgpu-bridge-e2e",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
