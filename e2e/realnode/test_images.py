"""The OCI archives ``ctr images import`` takes, written without a registry or a tool, and
what the CUDA image holds."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

from e2e.realnode.build import NativeParts
from e2e.realnode.images import ImageSpec, layer_bytes, shared_libraries, write_oci_archive
from e2e.realnode.node import cuda_image_spec


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def _spec(tmp_path: Path) -> ImageSpec:
    program = tmp_path / "prog"
    program.write_bytes(b"#!/bin/true\n")
    program.chmod(0o755)
    return ImageSpec(
        "localhost/test:1", entrypoint=("/bin/prog", "-x"), files={"/bin/prog": program}
    )


def test_archive_is_an_oci_layout_whose_digests_match(tmp_path: Path) -> None:
    written = write_oci_archive(_spec(tmp_path), tmp_path / "image.tar")
    members = _members(written.archive)
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, blob in members.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(blob).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(members["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/test:1"
    assert entry["digest"] == written.manifest_digest
    manifest = json.loads(members["blobs/sha256/" + entry["digest"].split(":")[1]])
    config = json.loads(members["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["config"]["Entrypoint"] == ["/bin/prog", "-x"]
    (layer_desc,) = manifest["layers"]
    layer = members["blobs/sha256/" + layer_desc["digest"].split(":")[1]]
    assert config["rootfs"]["diff_ids"] == [layer_desc["digest"]]  # uncompressed: diff id = digest
    assert layer_desc["size"] == len(layer)


def test_layer_holds_the_files_with_their_modes_and_parent_directories(tmp_path: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(layer_bytes(_spec(tmp_path)))) as tar:
        entries = {m.name: m for m in tar.getmembers()}
    assert entries["bin"].isdir()
    assert entries["bin/prog"].mode == 0o755
    assert entries["tmp"].mode == 0o1777
    assert {"etc", "proc", "sys", "dev"} <= set(entries)
    assert all(m.uid == 0 and m.mtime == 0 for m in entries.values())


def test_same_inputs_same_digests(tmp_path: Path) -> None:
    first = write_oci_archive(_spec(tmp_path), tmp_path / "a.tar")
    second = write_oci_archive(_spec(tmp_path), tmp_path / "b.tar")
    assert first.manifest_digest == second.manifest_digest
    assert first.archive.read_bytes() == second.archive.read_bytes()


def test_shared_libraries_of_a_dynamic_program_include_loader_and_libc() -> None:
    libraries = shared_libraries(Path("/bin/ls"))
    assert any("ld-linux" in path for path in libraries)
    assert any(Path(path).name.startswith("libc.so") for path in libraries)


def test_cuda_image_carries_no_driver_library_even_where_the_builder_has_one(
    tmp_path: Path,
) -> None:
    """The builder's loader finds a libcuda.so.1 for the CUDA programs (here through a RUNPATH,
    on a GPU host through its driver install): the image still holds none, nor LD_LIBRARY_PATH."""
    driver = tmp_path / "driver"
    driver.mkdir()
    stub = tmp_path / "stub.c"
    stub.write_text("int cuInit(unsigned int flags) { return (int)flags; }\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
         str(driver / "libcuda.so.1"), str(stub)],
        check=True,
    )  # fmt: skip
    main = tmp_path / "main.c"
    main.write_text("int cuInit(unsigned int flags);\nint main(void) { return cuInit(0); }\n")
    program = tmp_path / "cudaprobe"
    subprocess.run(
        ["gcc", "-o", str(program), str(main), f"-L{driver}", "-l:libcuda.so.1",
         f"-Wl,-rpath,{driver}"],
        check=True,
    )  # fmt: skip
    assert str(driver / "libcuda.so.1") in shared_libraries(program)
    native = NativeParts(
        libvgpu=Path("/bin/ls"),
        fake_cuda=driver / "libcuda.so.1",
        fake_nvml=driver / "libcuda.so.1",
        cudaprobe=program,
        cudalaunch=program,
        nvidia_smi=program,
    )
    spec = cuda_image_spec(native)
    assert not [path for path in spec.files if "libcuda" in path or "libnvidia" in path]
    assert spec.files["/cudaprobe"] == program
    assert any(Path(path).name.startswith("libc.so") for path in spec.files)
    assert not [entry for entry in spec.env if entry.startswith("LD_LIBRARY_PATH=")]
