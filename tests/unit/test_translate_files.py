"""`vgpu-bridge translate` on a GitOps repository (tests/data/translate-repo): directories read as
kubectl reads them, several `-f`, stdin, each file's comments and layout kept outside the changed
fields (a golden test, byte for byte), `--in-place` atomic and all-or-nothing, `--card-memory`
as the offline inventory, and messages in the user's own words."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from pathlib import Path

import pytest
import yaml

from tests.cli_runner import DATA, run_cli

REPO = DATA / "translate-repo"
IN, EXPECTED = REPO / "in", REPO / "expected"
CARD = "--card-memory 80Gi"  # the repository's percent shares need the card size


def files_under(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(IN, copy)
    return copy


def test_in_place_rewrites_each_changed_file_as_the_golden_says_byte_for_byte(repo: Path) -> None:
    result = run_cli(f"translate -R -f {repo} --in-place {CARD}")
    assert result.code == 0, result.stderr
    assert result.stdout == ""
    assert files_under(repo) == files_under(EXPECTED)
    assert "3 of 5 files changed" in result.stderr  # README.md is no manifest


def test_every_comment_and_every_untouched_document_survives(repo: Path) -> None:
    """What the golden shows, as a property: no comment outside a removed GPU limit is lost, and
    documents translation leaves alone come back as the very text they were."""
    assert run_cli(f"translate -R -f {repo} --in-place {CARD}").code == 0
    for name, before in files_under(IN).items():
        after = (repo / name).read_text()
        for line in before.decode().splitlines():
            if "#" in line and "nvidia.com/" not in line:
                assert line in after.splitlines(), f"{name}: lost {line!r}"
    service = (IN / "apps/vllm/deployment.yaml").read_text().split("---\n")[1]
    assert (repo / "apps/vllm/deployment.yaml").read_text().endswith("---\n" + service)
    assert (repo / "base/namespaces.yml").read_bytes() == (IN / "base/namespaces.yml").read_bytes()


def test_a_second_run_changes_nothing(repo: Path) -> None:
    assert run_cli(f"translate -R -f {repo} --in-place {CARD}").code == 0
    first = files_under(repo)
    again = run_cli(f"translate -R -f {repo} --in-place {CARD}")
    assert again.code == 0, again.stderr
    assert "0 of 5 files changed" in again.stderr
    assert files_under(repo) == first


def test_printed_stream_is_the_files_in_order_with_a_template_written_once() -> None:
    result = run_cli(f"translate -R -f {IN} {CARD}")
    assert result.code == 0, result.stderr
    assert result.stdout == (REPO / "stdout.yaml").read_text()
    documents = [d for d in yaml.safe_load_all(result.stdout) if d]
    templates = [d for d in documents if d["kind"] == "ResourceClaimTemplate"]
    assert len(templates) == 2  # the two Jobs of one shape share one (the JSON Pod's is listed)
    assert len({t["metadata"]["name"] for t in templates}) == 2


def test_a_directory_without_r_is_read_one_level_deep(tmp_path: Path) -> None:
    shutil.copytree(IN / "base", tmp_path / "base")
    (tmp_path / "top.yaml").write_text((IN / "apps/train/job.yaml").read_text())
    shallow = run_cli(f"translate -f {tmp_path} {CARD}")
    assert shallow.code == 0, shallow.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(shallow.stdout) if d]
    assert kinds == ["Job", "ResourceClaimTemplate", "Job"]  # base/ is below: not read
    deep = run_cli(f"translate -R -f {tmp_path} {CARD}")
    deep_kinds = [d["kind"] for d in yaml.safe_load_all(deep.stdout) if d]
    assert deep_kinds == ["Namespace", "Namespace", *kinds]  # base/ sorts before top.yaml


def test_several_f_and_stdin_are_all_read_in_order() -> None:
    stdin = (IN / "base/namespaces.yml").read_text()
    result = run_cli(
        f"translate -f {IN}/apps/vllm/deployment.yaml -f - -f {IN}/apps/train/job.yaml {CARD}",
        stdin=stdin,
    )
    assert result.code == 0, result.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(result.stdout) if d]
    assert kinds == [
        "Deployment", "ResourceClaimTemplate", "Service", "Namespace", "Namespace",
        "Job", "ResourceClaimTemplate", "Job",
    ]  # fmt: skip


def test_json_output_lists_every_object_of_every_file() -> None:
    result = run_cli(f"translate -R -f {IN} {CARD} -o json")
    assert result.code == 0, result.stderr
    items = yaml.safe_load(result.stdout)["items"]
    assert len(items) == 11  # the printed stream's 10 documents, the JSON file's List unpacked


def test_a_refusal_anywhere_leaves_every_file_as_it_was(repo: Path) -> None:
    before = files_under(repo)
    bad = repo / "apps" / "zz-bad.yaml"
    bad.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: n}\nspec:\n  containers:\n"
        "  - name: c\n    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 10Gi}}\n"
    )
    result = run_cli(f"translate -R -f {repo} --in-place {CARD}")
    assert result.code == 1
    assert "Pod/n/p: spec.containers[0].resources.limits[nvidia.com/gpumem]" in result.stderr
    bad.unlink()
    assert files_under(repo) == before
    assert not list(repo.rglob(".*.tmp"))


def test_in_place_never_replaces_a_symlink(repo: Path) -> None:
    link = repo / "apps" / "link.yaml"
    link.symlink_to(repo / "apps/vllm/deployment.yaml")
    before = files_under(repo)
    result = run_cli(f"translate -f {link} --in-place {CARD}")
    assert result.code == 2
    assert f"{link}: --in-place would replace a symlink" in result.stderr
    assert link.is_symlink()
    assert files_under(repo) == before


GPU_POD = """apiVersion: v1
kind: Pod
metadata: {name: p, namespace: n}
spec:
  containers:
  - name: c
    resources: {limits: {nvidia.com/gpu: 1}}
"""
SECRET_CONFIG = """apiVersion: v1
kind: Config
users:
- name: admin
  user: {token: the-admins-secret-token}
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A tree with one GPU Pod, and beside it (outside the tree) a kubeconfig with a token."""
    root = tmp_path.resolve() / "tree"  # the real path, as refusals name it
    (root / "apps").mkdir(parents=True)
    (root / "apps" / "pod.yaml").write_text(GPU_POD)
    (tmp_path / "kubeconfig").write_text(SECRET_CONFIG)
    return root


@pytest.mark.parametrize("hops", ["direct", "through a link inside the tree"])
def test_r_refuses_a_link_that_leaves_the_tree_and_never_prints_its_target(
    tree: Path, hops: str
) -> None:
    link = tree / "apps" / "config.yaml"
    if hops == "direct":
        link.symlink_to(tree.parent / "kubeconfig")
    else:
        (tree / "inner").symlink_to(tree.parent / "kubeconfig")
        link.symlink_to(tree / "inner")
    result = run_cli(f"translate -R -f {tree}")
    assert result.code == 2
    assert f"{link}: a link to {tree.parent / 'kubeconfig'}, outside {tree}" in result.stderr
    assert "secret-token" not in result.stdout + result.stderr


def test_r_reads_a_link_that_stays_inside_the_tree(tree: Path) -> None:
    """In-tree links are read, as kubectl reads them: the linked Pod comes twice."""
    (tree / "again.yaml").symlink_to(tree / "apps" / "pod.yaml")
    result = run_cli(f"translate -R -f {tree}")
    assert result.code == 0, result.stderr
    pods = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Pod"]
    assert len(pods) == 2


def test_r_refuses_a_fifo_without_reading_it(tree: Path) -> None:
    """A FIFO in the tree is refused by its kind; today's code would wait for a writer (this
    test gives it one, so that the old code reads it instead of hanging)."""
    fifo = tree / "apps" / "pipe.yaml"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=(SECRET_CONFIG,), daemon=True)
    writer.start()
    try:
        result = run_cli(f"translate -R -f {tree}")
    finally:
        release = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader lets the writer finish
        writer.join()
        os.close(release)
    assert result.code == 2
    assert f"{fifo}: a FIFO, not a regular file: not read" in result.stderr
    assert "secret-token" not in result.stdout


def test_r_refuses_a_socket_by_its_kind(tree: Path) -> None:
    path = tree / "apps" / "s.yaml"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        result = run_cli(f"translate -R -f {tree}")
    assert result.code == 2
    assert f"{path}: a socket, not a regular file: not read" in result.stderr


def test_a_pipe_named_with_f_is_still_read(tree: Path) -> None:
    """The rule is for files a directory holds: a path the user names (`-f <(helm template)`)
    is the user's choice, read as given."""
    fifo = tree.parent / "named-pipe"
    os.mkfifo(fifo)
    pod = (tree / "apps" / "pod.yaml").read_text()
    writer = threading.Thread(target=fifo.write_text, args=(pod,), daemon=True)
    writer.start()
    result = run_cli(f"translate -f {fifo}")
    writer.join()
    assert result.code == 0, result.stderr
    assert "kind: Pod" in result.stdout


def test_in_place_keeps_the_file_mode(repo: Path) -> None:
    path = repo / "apps/vllm/deployment.yaml"
    path.chmod(0o640)
    assert run_cli(f"translate -f {path} --in-place").code == 0
    assert os.stat(path).st_mode & 0o777 == 0o640


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("translate -f - --in-place", "--in-place: standard input (-f -) has no file to rewrite"),
        ("translate -f {data}/translate-repo/in --in-place -o json", "leave out -o json"),
        ("translate -f - -f -", "-f -: standard input can be read once"),
        ("translate -f - --inventory -", "--inventory -: standard input is already read"),
        ("translate -f {data}/no-such-dir", "no-such-dir: cannot read: No such file"),
        ("translate -f {data}/translate-repo/in", "no .yaml, .yml, .json files in it (-R reads"),
    ],
)
def test_usage_problems_name_the_flag_and_exit_2(args: str, message: str) -> None:
    result = run_cli(args)
    assert result.code == 2
    assert message in result.stderr
    assert result.stdout == ""


PERCENT_POD = """apiVersion: v1
kind: Pod
metadata: {name: p, namespace: n}
spec:
  containers:
  - name: c
    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem-percentage: 25}}
"""


def test_card_memory_is_the_offline_inventory_for_a_percentage() -> None:
    without = run_cli("translate -f -", stdin=PERCENT_POD)
    assert without.code == 1
    assert "a share of 25% needs the cluster's card sizes" in without.stderr
    assert "--card-memory SIZE" in without.stderr
    one = run_cli("translate -f - --card-memory 80Gi", stdin=PERCENT_POD)
    assert one.code == 0, one.stderr
    assert "memory: 20Gi" in one.stdout
    two = run_cli("translate -f - --card-memory 80Gi --card-memory 40Gi", stdin=PERCENT_POD)
    (_, template) = [d for d in yaml.safe_load_all(two.stdout) if d]
    alternatives = template["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    sizes = [a["capacity"]["requests"]["memory"] for a in alternatives]
    assert sizes == ["10Gi", "20Gi"]


@pytest.mark.parametrize("value", ["80GB", "-1Gi", "0", "1.5"])
def test_a_bad_card_memory_is_refused_by_name(value: str) -> None:
    result = run_cli(f"translate -f - --card-memory={value}", stdin=PERCENT_POD)
    assert result.code == 1
    assert result.stderr.startswith("settings: --card-memory: ")


KAI_FRACTION_POD = """apiVersion: v1
kind: Pod
metadata:
  name: f
  namespace: n
  annotations: {gpu-fraction: "0.5"}
spec:
  schedulerName: kai-scheduler
  containers: [{name: c, image: cuda:12}]
"""


def test_a_kai_fraction_is_spoken_of_as_a_fraction() -> None:
    result = run_cli("translate -f - --scheduler kai", stdin=KAI_FRACTION_POD)
    assert result.code == 1
    assert "metadata.annotations[gpu-fraction]: a gpu-fraction of 0.5 needs" in result.stderr
    assert "percent" not in result.stderr
    sized = run_cli("translate -f - --scheduler kai --card-memory 80Gi", stdin=KAI_FRACTION_POD)
    assert sized.code == 0, sized.stderr
    assert "memory: 40Gi" in sized.stdout
