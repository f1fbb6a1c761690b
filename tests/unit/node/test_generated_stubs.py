"""The kubelet stubs in vgpu_bridge/node/kubeletapi are what the vendored protos generate."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "generate_protos.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_protos", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_stubs_are_not_stale() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_check_notices_an_edited_a_missing_and_an_extra_stub(tmp_path: Path) -> None:
    generate = _script()
    fresh = generate.generate(tmp_path / "fresh")
    committed = tmp_path / "committed"
    shutil.copytree(fresh, committed)
    assert generate.stale_files(committed, fresh) == []
    with (committed / "dra_v1_pb2.py").open("a") as edited:
        edited.write("# edited by hand\n")
    (committed / "dra_v1beta1_pb2_grpc.py").unlink()
    (committed / "old_pb2.py").write_text("")
    assert generate.stale_files(committed, fresh) == [
        "dra_v1_pb2.py",
        "dra_v1beta1_pb2_grpc.py",
        "old_pb2.py",
    ]


def test_the_stubs_name_the_kubelet_services_and_methods() -> None:
    from vgpu_bridge.node.kubeletapi import dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_v1_pb2

    services = {
        dra_v1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name,
        dra_v1beta1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name,
        pluginregistration_v1_pb2.DESCRIPTOR.services_by_name["Registration"].full_name,
    }
    assert services == {
        "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
        "pluginregistration.Registration",
    }
    assert "share_id" in dra_v1_pb2.Device.DESCRIPTOR.fields_by_name


def test_the_pod_resources_stub_is_the_kubelets_v1_lister() -> None:
    from vgpu_bridge.node.kubeletapi import podresources_v1_pb2

    lister = podresources_v1_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert lister.full_name == "v1.PodResourcesLister"
    assert lister.methods_by_name["List"].output_type.full_name == "v1.ListPodResourcesResponse"
    fields = podresources_v1_pb2.ContainerResources.DESCRIPTOR.fields_by_name
    assert fields["dynamic_resources"].number == 5
