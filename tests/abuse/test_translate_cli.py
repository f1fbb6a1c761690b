"""`vgpu-bridge translate` on hostile manifests: exit 1 with `<object>: <field>: <reason>` lines
(the very field, where we translate it), never a traceback; a YAML alias bomb refused without
blowing memory. A fixed-seed sample runs in-process (the same `main` the binary runs); a few
inputs go through the real binary, under a memory cap. A hostile tree for `-R` (links out of it,
to /dev/stdin, a FIFO) is refused by name through the real binary, without waiting on a reader."""

from __future__ import annotations

import json
import os
import re
import subprocess
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.abuse.hostile import FIELD_LINE, Case, cases
from tests.abuse.processes import command
from tests.cli_runner import run_cli

SAMPLE = 300
SEED = 1015
BINARY_MEMORY_CAP = 1 << 30  # the alias bomb reached 3 GB
BINARY_DEADLINE_S = 60


# A parse error names its place by line and column instead of a field path.
PLACE = re.compile(r": line \d+, column \d+: ")


def judge(case: Case, code: int, stderr: str) -> str | None:
    """As the webhook's judge, except that claim names are the webhook's to check (it is the one
    that puts them into API paths): the CLI passes them through."""
    deny_path = None if case.family == "claim-name" else case.deny_path
    if "Traceback" in stderr:
        return f"traceback: {stderr[-300:]}"
    if code == 0:
        return None if deny_path is None else f"exit 0; expected a refusal at {deny_path}"
    if code != 1:
        return f"exit {code}: {stderr[:300]}"
    if deny_path is not None and deny_path not in stderr:
        return f"does not name {deny_path}: {stderr[:300]}"
    named = FIELD_LINE.search(stderr) or PLACE.search(stderr)
    return None if named else f"names no field: {stderr[:300]}"


def test_a_sample_of_hostile_manifests_is_refused_by_field_and_never_with_a_traceback() -> None:
    sample = [c for c in cases(SAMPLE * 3, seed=SEED) if c.obj][:SAMPLE]
    problems = []
    for index, case in enumerate(sample):
        try:
            result = run_cli("translate -f -", stdin=json.dumps(case.obj))
            problem = judge(case, result.code, result.stderr)
        except Exception:
            problem = "raised " + traceback.format_exc(limit=-2)[-400:]
        if problem is not None:
            problems.append(f"#{index} {case.family} {case.note}: {problem}")
    assert not problems, f"{len(problems)} of {len(sample)}:\n" + "\n".join(problems[:15])


def alias_bomb(levels: int = 12) -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(
        ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: bomb}", "data:"]
        + ["  " + line for line in lines]
    )


def deep_yaml(levels: int) -> str:
    return (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: deep}\nspec: {containers: [{name: a, "
        f"resources: {{limits: {{x: {'[' * levels}{']' * levels}}}}}}}]}}\n"
    )


BINARY_INPUTS = {
    "alias bomb": (alias_bomb().encode(), None),
    "1e999999 GPUs": (
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: "
        b'a, resources: {limits: {nvidia.com/gpu: "1e999999"}}}]}\n',
        "spec.containers[0].resources.limits[nvidia.com/gpu]",
    ),
    "999 levels of nesting": (deep_yaml(999).encode(), None),
    "containers: 5": (
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: 5}\n",
        None,
    ),
    "Volcano Job spec: x": (
        b"apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec: x\n",
        None,
    ),
    "not UTF-8": (b"\xff\xfe\x00kind: Pod\n", None),
}


@pytest.mark.parametrize("name", list(BINARY_INPUTS), ids=list(BINARY_INPUTS))
def test_the_real_binary_refuses_a_hostile_file_by_field_within_a_memory_cap(
    name: str, tmp_path: Path
) -> None:
    data, deny_path = BINARY_INPUTS[name]
    manifest = tmp_path / "in.yaml"
    manifest.write_bytes(data)
    # prlimit (util-linux) sets the cap in the child: a preexec_fn would run in a fork of this
    # test process, whose gRPC threads (other abuse tests load it) can abort that fork.
    capped = ["prlimit", f"--as={BINARY_MEMORY_CAP}", *command("translate", "-f", str(manifest))]
    done = subprocess.run([*capped, "-o", "json"], capture_output=True, timeout=BINARY_DEADLINE_S)
    stderr = done.stderr.decode(errors="replace")
    assert "Traceback" not in stderr, stderr[-1500:]
    assert "MemoryError" not in stderr, stderr[-1500:]
    assert done.returncode in (0, 1), (done.returncode, stderr[-500:])
    if done.returncode == 1:
        assert stderr.strip(), "exit 1 without a reason"
    if deny_path is not None:
        assert done.returncode == 1
        assert deny_path in stderr, stderr[-500:]


POD = (
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: n}\nspec:\n  containers:\n"
    "  - name: c\n    resources: {limits: {nvidia.com/gpu: 1}}\n"
)
TOKEN = "the-admins-secret-token"


def link_out(tree: Path) -> str:
    secret = tree.parent / "kubeconfig"
    secret.write_text(f"apiVersion: v1\nkind: Config\nusers: [{{user: {{token: {TOKEN}}}}}]\n")
    (tree / "config.yaml").symlink_to(secret)
    return f"{tree / 'config.yaml'}: a link to {secret}, outside {tree}: not read"


def link_to_stdin(tree: Path) -> str:
    (tree / "stdin.yaml").symlink_to("/dev/stdin")
    return f"{tree / 'stdin.yaml'}: a link to "


def fifo(tree: Path) -> str:
    os.mkfifo(tree / "pipe.yaml")
    return f"{tree / 'pipe.yaml'}: a FIFO, not a regular file: not read"


def link_inside(tree: Path) -> str:
    (tree / "again.yaml").symlink_to(tree / "pod.yaml")
    return ""


HOSTILE_TREES: dict[str, Callable[[Path], str]] = {
    "a link to a kubeconfig outside": link_out,
    "a link to /dev/stdin": link_to_stdin,
    "a FIFO": fifo,
    "a link inside the tree (read)": link_inside,
}


@pytest.mark.parametrize("name", list(HOSTILE_TREES), ids=list(HOSTILE_TREES))
def test_the_real_binary_reads_only_regular_files_inside_an_r_tree(
    name: str, tmp_path: Path
) -> None:
    """Standard input is a pipe nobody writes to or closes, so that a read of /dev/stdin or of
    the FIFO would wait: the deadline is only a guard against that hang."""
    tree = tmp_path.resolve() / "tree"
    tree.mkdir()
    (tree / "pod.yaml").write_text(POD)
    refusal = HOSTILE_TREES[name](tree)
    read_end, write_end = os.pipe()
    try:
        done = subprocess.run(
            command("translate", "-R", "-f", str(tree)),
            stdin=read_end,
            capture_output=True,
            timeout=BINARY_DEADLINE_S,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    stderr, stdout = done.stderr.decode(errors="replace"), done.stdout.decode(errors="replace")
    assert "Traceback" not in stderr, stderr[-1500:]
    assert TOKEN not in stdout + stderr
    if not refusal:
        assert done.returncode == 0, stderr[-500:]
        assert stdout.count("kind: Pod") == 2
        return
    assert done.returncode == 2, stderr[-500:]
    assert refusal in stderr, stderr[-500:]
    assert stdout == ""
